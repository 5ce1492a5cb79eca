"""``hierarchical``: cut the graph into blocks, solve each block, choose among them by a chain DP.

Three steps (issue 12, item 2; Rockmate's structure, Zhao et al. ICML 2023), a fourth for
large blocks and a fifth across block boundaries:

1. Cut the graph at the forward graph's articulation points into a chain of blocks
   (:mod:`remat.solver.graph.hierarchical.blocks`: which forward and backward nodes form each block, what its
   input ``c_{i-1}``, output ``c_i`` and gradients ``G_{i+1}`` / ``G_i`` are, and why the chain
   semantics then hold exactly).
2. Solve each block on its own into a Pareto set of recording options (memory vs time):
   which of its forward outputs to keep for its backward, and how its backward recomputes the
   rest (:mod:`remat.solver.graph.hierarchical.block_options`).
3. Run a multi-option chain DP over the blocks (:mod:`remat.solver.graph.hierarchical.dp`) and
   expand its block-level ops back into graph compute/free ops.
4. Where a chosen option belongs to a block whose kept sets are only sampled, search near it
   for this budget (:mod:`remat.solver.graph.hierarchical.refine_blocks`), re-running the DP.
5. On the schedule's flat R/S plan, a bounded local search keeps recomputed nodes and makes
   room by dropping a held node around the stages that go over
   (:mod:`remat.solver.graph.hierarchical.flat`): what the DP cannot do, since it keeps a block's
   outputs until the backward that reads them.

**What it guarantees.** Every schedule is valid and within the budget (checked by the one
simulator, which also confirms the claimed peak and time). Among the schedules that (a) run each
block's forward whole, as one chain stage, (b) record each block, or each run of up to
:data:`MERGE` consecutive blocks taken as one, with one of its options, and (c) are persistent at
that level (a kept block output is dropped only after the backward that uses it), the DP's
schedule is the fastest up to its memory discretization (``slots`` levels of the budget, default
:data:`SLOTS`); tests/solver/graph/test_hierarchical.py checks it against a brute force over exactly those
schedules with one-byte slots. The block options are exhaustive over *what to keep* for blocks
of at most ``EXHAUSTIVE_NODES + 1`` forward nodes and cover two fixed recomputation policies.
A larger block's kept sets are a sample; for it, a bounded local search around the options the
DP chose (:mod:`remat.solver.graph.hierarchical.refine_blocks`) adds kept sets for this budget and
re-runs the DP, and the flat search of step 5 moves only to strictly faster plans within the
budget, so the schedule returned is never slower than the DP's over the sample and may be
faster (then it no longer respects the block boundaries). It is not optimal over every
schedule: the flat ``ilp`` may be faster (measured in
docs/strategies.md). The smallest budget it can meet is computed exactly (in bytes, no
discretization) by the same recurrence minimising the peak; below it, it refuses with that
number, and from it up it always returns a schedule. At or above the store-all peak it returns
store-all, which nothing beats.

Units: bytes and milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from remat.schedules import GraphProfile, InfeasibleBudgetError, Op, RematError, Schedule
from remat.solver.common import ProfileCache, SolverBug, Strategy, make_schedule, require_graph
from remat.solver.deadline import Deadline, TimeUp
from remat.solver.graph.baselines import store_all_plan
from remat.solver.graph.hierarchical.block_options import BlockModel, BlockOption, block_model, merged_kept_sets
from remat.solver.graph.hierarchical.blocks import Blocks, cut_blocks
from remat.solver.graph.hierarchical.dp import Chain, chain_of, fill, least_peak, read_ops, walk
from remat.solver.graph.hierarchical.flat import flat_search
from remat.solver.graph.hierarchical.refine_blocks import refine
from remat.solver.graph.stages import StagePlan, plan_from_ops, plan_ops, plan_peak

NAME = "hierarchical"
SLOTS = 1000
# The ILP's second warm start counts memory in this many steps: on the ResNet-50 graph at 50% it
# finds 17046.84 ms where 1000 steps find 17050.70 (0.5 s more), enough for the 60-s ILP's gap
# to stay under 1% on HiGHS's first round of root cuts alone (docs/benchmarks.md).
FINE_SLOTS = 3000
MERGE = 3  # runs of up to this many blocks are also solved as one block (their options join the DP)
_CACHE = ProfileCache(size=4)


@dataclass(frozen=True)
class Solved:
    """A graph's blocks, the models of every run of at most :data:`MERGE` consecutive blocks, the
    DP's numbers, and per block s the options in the DP's order (each with the block it ends at)."""

    blocks: Blocks
    models: dict[tuple[int, int], BlockModel]
    chain: Chain
    options: tuple[tuple[BlockOption, ...], ...]


def _solved(profile: GraphProfile, merge: int = MERGE, deadline: Deadline | None = None) -> Solved:
    """The (cached) block models; ``deadline`` is checked between blocks (:class:`TimeUp`)."""

    def check() -> None:
        if deadline is not None:
            deadline.check(NAME)

    def compute() -> Solved:
        blocks = cut_blocks(profile)
        n = len(blocks.blocks)
        models = {}
        for s in range(n):
            check()
            models[(s, s + 1)] = block_model(profile, blocks, s)
        for span in range(2, merge + 1):
            for s in range(n - span + 1):
                check()
                parts = [models[(k, k + 1)] for k in range(s, s + span)]
                kept_sets = merged_kept_sets(profile, blocks, parts, s)
                if kept_sets is not None:
                    models[(s, s + span)] = block_model(profile, blocks, s, s + span, kept_sets)
        return assemble(blocks, models)

    return _CACHE.get(profile, ("blocks", merge), compute)


def assemble(blocks: Blocks, models: dict[tuple[int, int], BlockModel]) -> Solved:
    """The :class:`Solved` of these block models (per block, the options of the runs it starts)."""
    options = tuple(
        tuple(o for (start, _), m in sorted(models.items()) if start == s for o in m.options)
        for s in range(len(blocks.blocks))
    )
    return Solved(blocks, models, chain_of(models), options)


def expand(solved: Solved, ops: list[tuple]) -> list[Op]:
    """Graph ops of block-level ops (each block op is its block's run; ``Fn`` and ``drop`` free
    the block input that the chain op releases)."""
    out: list[Op] = []
    for op in ops:
        name, i = op[0], op[1]
        if name in ("Fck", "Fn"):
            out += solved.models[(i, i + 1)].nograd.ops
            if name == "Fn":
                out.append(("free", solved.blocks.input_node(i)))
        elif name == "Fall":
            out += solved.options[i][op[2]].forward.ops
        elif name == "B":
            out += solved.options[i][op[2]].backward.ops
        else:
            out.append(("free", solved.blocks.input_node(i)))
    return out


def least_budget(profile: GraphProfile) -> int:
    """The smallest budget (bytes) this strategy can meet: the least peak of its block schedules,
    or store-all's peak if that is lower."""
    return min(least_peak(_solved(profile).chain)[0], plan_peak(profile, store_all_plan(profile)))


def solve(profile: GraphProfile, budget: int, slots: int = SLOTS, local_search: bool = True) -> Schedule:
    """The fastest block schedule within ``budget`` bytes (see the module docstring for what
    that is optimal among); raises :class:`InfeasibleBudgetError` with the exact smallest budget
    it can meet. ``local_search=False`` skips steps 4 and 5 (the DP's schedule over the sampled
    options, as is): for a caller that keeps only part of the schedule (remat.compile keeps what
    it holds at the backward, :func:`remat.joint.plan.held_at_backward`), the searches' time for
    little or nothing of what it keeps."""
    return _solve(profile, budget, slots, None, local_search)


def _solve(
    profile: GraphProfile, budget: int, slots: int, deadline: Deadline | None, local_search: bool = True
) -> Schedule:
    profile = require_graph(profile, NAME)
    slots = int(slots)
    if slots < 1:
        raise RematError(f"strategy '{NAME}': slots must be at least 1, got {slots}")
    solved = _solved(profile, deadline=deadline)  # refuses a graph it cannot cut, whatever the budget
    store_all = store_all_plan(profile)
    if plan_peak(profile, store_all) <= budget:
        ops = plan_ops(profile, store_all)
        extra = {"source": "store-all", "gap": 0.0, "lower_bound_ms": profile.store_all_compute_ms}
        peak = plan_peak(profile, store_all)
        return make_schedule(profile, budget, NAME, ops, store_all.cost_ms(profile), peak, extra)
    chain, count = solved.chain, len(solved.blocks.blocks)
    lowest, lowest_ops = least_peak(chain)
    if lowest > budget:
        detail = f"the least peak of its schedules over {count} blocks"
        raise InfeasibleBudgetError(NAME, budget, min(lowest, plan_peak(profile, store_all)), detail)
    candidates = [(solved, "least-peak", lowest_ops)]
    table = fill(chain, budget, slots)
    found = read_ops(chain, table)
    if found is not None:
        candidates.insert(0, (solved, "dp", found))
        if local_search:
            candidates.insert(0, _refined(profile, solved, budget, slots, found, deadline))
    fitting = [(walk(s.chain, ops), source, ops, s) for s, source, ops in candidates]
    fitting = [item for item in fitting if item[0][0] <= budget]
    (peak, ms), source, ops, used = min(fitting, key=lambda item: item[0][1])
    graph_ops = expand(used, ops)
    if local_search:
        graph_ops, ms, peak, source = _flat_searched(profile, budget, graph_ops, ms, peak, source, deadline)
    extra = {
        "source": source,
        "blocks": count,
        "options": [len(o) for o in used.options],
        "slots": table.levels,
    }
    return make_schedule(profile, budget, NAME, graph_ops, ms, peak, extra)


def _flat_searched(
    profile: GraphProfile,
    budget: int,
    ops: list[Op],
    ms: float,
    peak: int,
    source: str,
    deadline: Deadline | None,
) -> tuple[list[Op], float, int, str]:
    """The block schedule's ops after :func:`~remat.solver.graph.hierarchical.flat.flat_search` on
    its R/S plan, with their time (ms), peak (bytes) and source; the ops themselves if it finds
    nothing faster (or they are not in frontier-advancing form)."""
    plan = plan_from_ops(profile, ops)
    if plan is None:
        return ops, ms, peak, source
    better = flat_search(profile, budget, plan, deadline)
    cost = better.cost_ms(profile)
    if better is plan or cost >= ms:
        return ops, ms, peak, source
    return plan_ops(profile, better), cost, plan_peak(profile, better), f"{source}, flat search"


def _refined(
    profile: GraphProfile, solved: Solved, budget: int, slots: int, found: list[tuple], deadline: Deadline | None
) -> tuple[Solved, str, list[tuple]]:
    """The DP's answer after the local search of :mod:`~remat.solver.graph.hierarchical.refine_blocks`
    over the kept sets of large blocks (the DP's own answer where it finds nothing faster)."""

    def dp(models: dict[tuple[int, int], BlockModel]) -> tuple[list[tuple], float] | None:
        chain = chain_of(models)
        ops = read_ops(chain, fill(chain, budget, slots))
        if ops is None:
            return None
        peak, ms = walk(chain, ops)
        return (ops, ms) if peak <= budget else None

    start = (found, walk(solved.chain, found)[1])
    models, ops, _ = refine(profile, solved.blocks, solved.models, dp, start, deadline)
    if models is solved.models:
        return solved, "dp", found
    return assemble(solved.blocks, models), "dp, refined", ops


def hierarchical_plan(
    profile: GraphProfile, budget: int, deadline: Deadline | None = None, slots: int = SLOTS
) -> StagePlan | None:
    """The hierarchical schedule within ``budget`` bytes as a frontier-advancing R/S plan (e.g. an
    ILP warm start), or None: infeasible budget, a graph it cannot cut, ``deadline`` passed
    before the block models were built, or ops not in frontier-advancing form. The plan's peak
    (Checkmate's implied frees, never later than ours) is at most the schedule's."""
    try:
        schedule = _solve(profile, budget, slots, deadline)
    except (RematError, TimeUp):
        return None
    plan = plan_from_ops(profile, schedule.ops)
    if plan is None:
        return None
    plan.check(profile)
    if plan_peak(profile, plan) > budget:
        raise SolverBug(f"{NAME}: the R/S plan of its schedule peaks above the schedule")
    return plan


def hierarchical_fine_plan(profile: GraphProfile, budget: int, deadline: Deadline | None = None) -> StagePlan | None:
    """:func:`hierarchical_plan` with :data:`FINE_SLOTS` memory steps: a second ILP warm start.
    The block models are cached from the first call, so only the chain DP runs again."""
    return hierarchical_plan(profile, budget, deadline, FINE_SLOTS)


STRATEGY = Strategy(
    name=NAME,
    kind="graph",
    description="blocks at the articulation points, each solved into options, chosen among by a chain DP",
    solve=solve,
    options=("slots",),
    reference="Zhao et al. 2023 (Rockmate); Beaumont et al. 2019 (rotor) for the chain DP",
)
