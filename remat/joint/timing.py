"""Milliseconds of every node of a joint graph: measured by running it, or estimated.

``measured`` (the default): the joint graph runs eagerly, node by node, on fresh real tensors
with the fake inputs' shapes, strides and dtypes (floats from a normal distribution, integers and booleans
zero, so an index is always in range), under :func:`remat.measure.state.kept_rng` (``fork_rng``) so the user's RNG
stream is untouched; each node's time is the least of ``repeats`` runs after one warm-up whose
times do not count (``time.perf_counter``, after a device sync). These are eager op times:
inductor fuses pointwise chains, so a recomputed pointwise op costs less in the compiled step than
here (docs/compile.md). Where the graph cannot run (an op the fresh data makes fail), every node
not yet timed gets the estimate instead, and the result says so.

NOTE [Timing real tensors inside a compile]: the partitioner is called inside inductor's
``FakeTensorMode``, under which ``torch.empty_strided`` makes a fake tensor and every op dispatches
to its fake kernel. The timed runs lift that mode (``unset_fake_temporarily``): without it, the
"measured" times were the fake dispatch's (0.1-0.3 ms for any op of an 8-layer Llama, a matmul or
an add alike; found 2026-12-05), and the solver weighed every recompute alike.

``estimate``: remat's own formula, not inductor's cost model:
``bytes read and written / BYTES_PER_MS + FLOPs / FLOPS_PER_MS``, FLOPs from torch's
``flop_counter`` formulas (matmuls, convolutions, attention; 0 for other ops).

Units: milliseconds (float).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx
from torch.utils.flop_counter import flop_registry

from remat.joint.joint_profile import tensor_bytes
from remat.joint.torch_private import tree_flatten, tree_map, unset_fake_temporarily
from remat.measure.state import kept_rng

BYTES_PER_MS = 10e9 / 1e3  # 10 GB/s: a conservative CPU memory bandwidth
FLOPS_PER_MS = 20e9 / 1e3  # 20 GFLOP/s: one CPU core's float32 matmul rate, roughly
TIME_SOURCES = ("measured", "estimate")


@dataclass(frozen=True)
class NodeTimes:
    """Per fx node name, milliseconds; ``source`` is ``measured``, ``estimate`` or
    ``measured, estimate after <node>`` (the graph stopped running there)."""

    ms: dict[str, float]
    source: str


def _real(value: object) -> object:
    """A fresh real tensor like the fake ``value`` (same shape, strides, dtype, device)."""
    if not isinstance(value, torch.Tensor):
        return value
    out = torch.empty_strided(tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device=value.device)
    if out.is_floating_point() or out.is_complex():
        out.normal_()
    else:
        out.zero_()
    return out


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def estimate_ms(node: fx.Node) -> float:
    """The bytes-and-FLOPs estimate of one node (see the module docstring), in ms."""
    if node.op != "call_function":
        return 0.0
    value = node.meta.get("val")
    read = sum(tensor_bytes(m.meta.get("val")) for m in node.all_input_nodes)
    flops = 0
    packet = getattr(node.target, "overloadpacket", None)
    if packet in flop_registry:
        args, kwargs = tree_map(lambda a: a.meta.get("val") if isinstance(a, fx.Node) else a, (node.args, node.kwargs))
        try:
            flops = int(flop_registry[packet](*args, **kwargs, out_val=value))
        except Exception:  # noqa: BLE001 - an op whose formula does not take these arguments: no FLOPs
            flops = 0
    return (read + tensor_bytes(value)) / BYTES_PER_MS + flops / FLOPS_PER_MS


class _Timer(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, device: torch.device | None) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.device = device
        self.ms: dict[str, float] = {}
        self.warm_up = True  # the first run's times (cold caches, lazy initialisation) do not count

    def run_node(self, n: fx.Node) -> object:
        if n.op != "call_function":
            return super().run_node(n)
        _sync(self.device)
        start = time.perf_counter()
        out = super().run_node(n)
        _sync(self.device)
        took = (time.perf_counter() - start) * 1e3
        if not self.warm_up:
            self.ms[n.name] = min(took, self.ms.get(n.name, took))
        return out


def node_times(
    gm: fx.GraphModule, joint_inputs: Sequence[object], source: str = "measured", repeats: int = 2
) -> NodeTimes:
    """Milliseconds per fx node of ``gm`` (a joint graph) for ``source`` in :data:`TIME_SOURCES`."""
    estimates = {n.name: estimate_ms(n) for n in gm.graph.nodes}
    if source == "estimate":
        return NodeTimes(estimates, "estimate")
    flat, _ = tree_flatten(list(joint_inputs))
    device = next((v.device for v in flat if isinstance(v, torch.Tensor)), None)
    timer = _Timer(gm, device)
    done = "measured"
    with (
        unset_fake_temporarily(),  # NOTE [Timing real tensors inside a compile]
        kept_rng(),
        torch.no_grad(),
    ):
        try:
            for run in range(1 + max(1, int(repeats))):
                timer.warm_up = run == 0
                timer.run(*[_real(v) for v in flat])
        except Exception:  # noqa: BLE001 - the graph cannot run on fresh data: estimate the rest
            last = next(reversed(timer.ms), None)
            done = f"measured, estimate after {last}" if last else "estimate"
    return NodeTimes({name: timer.ms.get(name, estimates[name]) for name in estimates}, done)
