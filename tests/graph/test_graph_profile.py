"""Graphs of real models (remat.graph.profiler): validity, sizes, mapping, skips, no side effects."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from remat.graph.profiler import GRAD_OUTPUT_NAME, graph_plan, profile_graph
from remat.schedules import GraphProfile, ProfileError, load_profile, simulate
from remat.zoo import vision


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread: on a shared 2-core machine, two threads per op mostly wait on each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


F32 = 4


class ConvNet(nn.Module):
    """conv-bn-relu, conv-relu-pool, linear: a chain with hand-computable sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(4, 6, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


class SkipNet(nn.Module):
    """A stem whose output feeds a conv branch and a skip that are added (the branch ends in a
    ReLU, which saves its output: an unsaved branch output would join the add's piece)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.branch = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4 * 8 * 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.relu(self.stem(x))
        y = torch.relu(torch.relu(self.branch(s)) + s)
        return self.head(y.flatten(1))


def _by_name(profile: GraphProfile) -> dict[str, int]:
    return {node.name: index for index, node in enumerate(profile.nodes)}


@pytest.mark.slow
def test_zoo_graphs_are_valid_and_a_size_an_ilp_can_handle():
    shapes = {vision.vgg16: (2, 3, 64, 64), vision.resnet50: (2, 3, 64, 64), vision.mobilenet_v2: (2, 3, 64, 64)}
    shapes[vision.unet] = (1, 3, 64, 64)
    for factory, shape in shapes.items():
        with torch.device("meta"):
            model = factory()
        profile = profile_graph(model, shape)
        again = GraphProfile.from_dict(json.loads(json.dumps(profile.to_dict())))  # validates on construction
        assert again.sha256 == profile.sha256
        assert 20 <= profile.size <= 300, (factory.__name__, profile.size)
        store_all = simulate(profile, [("compute", v) for v in range(profile.size)], timeline=False)
        assert store_all.peak_memory > 0
        assert profile.metadata["input_shape"] == list(shape)
        assert profile.metadata["batch_size"] == shape[0]


def test_example_graph_files_load_and_state_their_inputs():
    for stem in ("vgg16", "resnet50", "mobilenetv2", "unet"):
        profile = load_profile(f"examples/graph_{stem}.json")
        meta = profile.metadata
        assert meta["time_source"] == "flops" and meta["flop_rate"] > 0
        assert meta["batch_size"] == meta["input_shape"][0]
        assert profile.size <= 300


def test_sizes_match_hand_computed_tensor_sizes():
    n, h = 2, 8
    profile = profile_graph(ConvNet(), (n, 3, h, h))
    names = _by_name(profile)
    conv_out = n * 4 * h * h * F32
    # conv1+bn1+relu: bn saves its input (the conv output) and 2 per-channel stats, relu saves
    # its output (= the piece output); conv1's saved input is the model input (not counted).
    assert profile.nodes[names["fwd:conv1"]].size == conv_out + 2 * 4 * F32 + conv_out
    # conv2+relu+pool+flatten: relu output (saved), pooled output (n*6 floats, flatten is a view).
    assert profile.nodes[names["fwd:conv2"]].size == n * 6 * h * h * F32 + n * 6 * F32
    # fc saves its input (conv2's output, counted there) and its weight (a parameter): output only.
    assert profile.nodes[names["fwd:fc"]].size == n * 5 * F32
    assert profile.nodes[names[GRAD_OUTPUT_NAME]].size == n * 5 * F32
    # Backward nodes hold the gradient w.r.t. the piece input; the first piece reads the model input.
    assert profile.nodes[names["bwd:fc"]].size == n * 6 * F32
    assert profile.nodes[names["bwd:conv2"]].size == conv_out
    assert profile.nodes[names["bwd:conv1"]].size == 0


def test_sizes_match_real_tensors():
    torch.manual_seed(0)
    model = ConvNet()
    x = torch.randn(3, 3, 6, 6)
    profile = profile_graph(model, example_inputs=x)
    names = _by_name(profile)
    out = model(x)
    assert profile.nodes[names[GRAD_OUTPUT_NAME]].size == out.numel() * out.element_size()
    a1 = model.relu(model.bn1(model.conv1(x)))
    assert profile.nodes[names["bwd:conv2"]].size == a1.numel() * a1.element_size()


def test_every_forward_node_has_its_backward_counterpart():
    for model, shape in ((ConvNet(), (2, 3, 8, 8)), (SkipNet(), (2, 3, 8, 8))):
        plan = graph_plan(model, shape)
        profile = plan.profile
        forward = [v for v, node in enumerate(profile.nodes) if not node.backward]
        backward = [v for v, node in enumerate(profile.nodes) if node.backward]
        assert forward == list(range(len(forward))), "forward nodes first"
        assert profile.nodes[-1].name == f"bwd:{plan.pieces[0].name}", "the first piece's backward is last"
        for p, piece in enumerate(plan.pieces):
            f, b = plan.forward_node[p], plan.backward_node[p]
            assert b is not None and b in backward
            assert profile.nodes[f].name == f"fwd:{piece.name}" and profile.nodes[b].name == f"bwd:{piece.name}"
            assert f in profile.predecessors[b], "a backward reads its recorded forward"
        seed = _by_name(profile)[GRAD_OUTPUT_NAME]
        assert profile.predecessors[seed] == (plan.forward_node[plan.output_piece],)
        assert seed in profile.predecessors[plan.backward_node[plan.output_piece]]


def test_skip_connection_edges():
    plan = graph_plan(SkipNet(), (2, 3, 8, 8))
    profile = plan.profile
    names = _by_name(profile)
    stem, branch = names["fwd:stem"], names["fwd:branch"]
    add = next(v for v, node in enumerate(profile.nodes) if node.name.startswith("fwd:add"))
    # The add reads the branch and the skip (the stem's output).
    assert set(profile.predecessors[add]) == {stem, branch}
    assert set(profile.successors[stem]) >= {branch, add}
    # The stem's gradient is the sum of the branch's and the add's contributions.
    b_stem, b_branch = names["bwd:stem"], names["bwd:branch"]
    b_add = names[profile.nodes[add].name.replace("fwd:", "bwd:")]
    assert {b_branch, b_add} <= set(profile.predecessors[b_stem])
    # The branch conv saved its input (the stem's output): its backward needs the stem present.
    assert stem in profile.predecessors[b_branch]
    # relu+add saves only relu's output: the add's backward does not need its inputs.
    assert stem not in profile.predecessors[b_add] and branch not in profile.predecessors[b_add]


def test_profiling_does_not_change_the_model_or_the_rng():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.5), nn.Flatten())
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    for source in ("flops", "measured"):
        profile = profile_graph(model, (2, 3, 6, 6), time_source=source, repeats=1)
        assert profile.metadata["time_source"] == source
        assert all(node.time_ms > 0 for node in profile.nodes if node.name != GRAD_OUTPUT_NAME)
    after = model.state_dict()
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert torch.equal(value, after[key]), key
    assert torch.equal(rng, torch.get_rng_state())
    assert model.training
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_dropout_piece_is_marked_random():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1), nn.Linear(4, 2))
    plan = graph_plan(model, (3, 4))
    assert [p.random for p in plan.pieces] == [True, False]


def test_bad_input_gives_one_line_errors():
    with pytest.raises(ProfileError, match="input_shape"):
        profile_graph(ConvNet(), (2, 0, 8, 8))
    with pytest.raises(ProfileError, match="time_source"):
        profile_graph(ConvNet(), (2, 3, 8, 8), time_source="guess")
    with pytest.raises(ProfileError, match="dtype"):
        profile_graph(ConvNet(), (2, 3, 8, 8), dtype="float8")

    class Untraceable(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x if x.sum() > 0 else -x

    with pytest.raises(ProfileError, match="torch.fx cannot trace"):
        profile_graph(Untraceable(), (2, 3))


@pytest.mark.parametrize("time_source", ["flops", "measured"])
def test_profile_records_each_nodes_transient_bytes(time_source):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    profile = profile_graph(model, (32, 8), time_source=time_source, repeats=1)
    overhead = {n.name: n.overhead for n in profile.nodes}
    # Linear then ReLU: the linear output is alive only until the ReLU has run (ReLU saves its result).
    assert overhead["fwd:0"] == 32 * 16 * F32
    # the last Linear's backward allocates its weight and bias gradients (then adds them in place):
    # the larger, 16 x 4 weight, is alive alone at the peak, with the 32 x 16 input gradient counted in size
    assert overhead["bwd:2"] >= 16 * 4 * F32
    seed = next(n for n in profile.nodes if n.name == GRAD_OUTPUT_NAME)
    assert seed.recompute is False and all(n.recompute for n in profile.nodes if n is not seed)


def test_overheads_source_is_checked_and_recorded():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
    profile = profile_graph(model, (2, 3, 8, 8))
    assert profile.metadata["overheads"] == "allocator"
    assert profile.metadata["threads"] == torch.get_num_threads()
    with pytest.raises(ProfileError, match="overheads: must be"):
        profile_graph(model, (2, 3, 8, 8), overheads="guess")
    with torch.device("meta"):
        on_meta = ConvNet()
    assert profile_graph(on_meta, (2, 3, 8, 8)).metadata["overheads"] == "shapes"  # nothing can run
    with pytest.raises(ProfileError, match="overheads: 'allocator' needs a model with real parameters"):
        profile_graph(on_meta, (2, 3, 8, 8), overheads="allocator")


def test_measured_times_with_the_meta_runs_overheads():
    """``time_source="measured", overheads="shapes"``: times from the real run, transients from the
    meta run's tensors (the same as the flops profile's), nothing undefined between the two."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    measured = profile_graph(model, (32, 8), time_source="measured", overheads="shapes", repeats=1)
    by_shapes = profile_graph(model, (32, 8), time_source="flops", overheads="shapes")
    assert measured.metadata["overheads"] == "shapes" and measured.metadata["repeats"] == 1
    assert [n.overhead for n in measured.nodes] == [n.overhead for n in by_shapes.nodes]
    assert all(n.time_ms > 0 for n in measured.nodes if n.name != GRAD_OUTPUT_NAME)
