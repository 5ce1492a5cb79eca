"""A chain profile as its forward+backward graph (Checkmate's setting), so the graph strategies
can solve chains and be compared with the chain DP.

Mapping (chain of n stages; a_i, abar[i+1], g[i] as in docs/model.md, "Chains"):

========================  =====================  =================  =====================================
graph node                time_ms                size (bytes)       inputs
========================  =====================  =================  =====================================
``F{i}`` (recorded fwd)   forward_ms of stage i  saved_size         ``F{i-1}`` (a_i; none for i = 0)
``loss_grad`` (g_n)       0                      output of stage n-1  ``F{n-1}``
``B{i}`` (backward)       backward_ms            size of a_i (g_i)  ``F{i}`` (abar[i+1]), ``F{i-1}`` (a_i),
                                                                    ``B{i+1}`` or ``loss_grad`` (g[i+1])
========================  =====================  =================  =====================================

* The input a_0 is not a node: the chain holds it for the whole step and no op frees it, so it is
  a constant ``input_size`` bytes: chain peak = graph peak + ``metadata["memory_offset"]``.
  (As a zero-cost node it would let the graph free and "recompute" the input for nothing.)
* A stage's ``forward_overhead`` / ``backward_overhead`` is the ``overhead`` of ``F{i}`` / ``B{i}``:
  the graph peak of the compute is before + output + overhead, as the chain's op peak. ``F{i}``
  is a recording forward, so it takes the recording forward's transient (``forward_overhead``,
  the one of ``F_all``), never ``forward_nograd_overhead``.
* ``loss_grad`` cannot be recomputed (``recompute`` false): in the chain, g[n] appears once.
* A graph node has one output, so every forward is a *recording* forward holding saved_size
  bytes (abar[i+1] includes a_{i+1}). When ``saved_size == output_size`` (and the non-recording
  transient equals the recording one) for every stage the
  chain's F_ck and F_all hold the same bytes and the two models coincide operation for
  operation (:func:`chain_ops_to_graph_ops`); otherwise the graph cannot express a
  non-recording F_ck and its optimum can be above the chain's.
"""

from __future__ import annotations

from collections.abc import Sequence

from remat.schedules import ChainProfile, GraphNode, GraphProfile, Op, ScheduleError


def chain_to_graph(chain: ChainProfile) -> GraphProfile:
    """The forward+backward graph of ``chain`` (see the module docstring for the mapping)."""
    n = chain.length
    nodes: list[GraphNode] = []
    edges: list[tuple[int, int]] = []
    forward: list[int] = []
    backward: dict[int, int] = {}
    for i, stage in enumerate(chain.stages):
        index = len(nodes)
        # abar[i+1] as a node holds what stage i hands on too: the graph may free F{i-1} first
        abar = stage.saved_size + stage.handed_on
        nodes.append(GraphNode(f"F{i}", stage.forward_ms, abar, False, overhead=stage.forward_overhead))
        if i > 0:
            edges.append((forward[i - 1], index))
        forward.append(index)
    loss_grad = len(nodes)
    nodes.append(GraphNode("loss_grad", 0.0, chain.activation_size(n), True, recompute=False))
    edges.append((forward[n - 1], loss_grad))
    previous = loss_grad
    for i in reversed(range(n)):
        stage = chain.stages[i]
        index = len(nodes)
        nodes.append(
            # a graph node's overhead is >= 0: a negative backward_overhead (early release, docs/
            # model.md) is taken as 0, which over-estimates the graph's peak, never under
            GraphNode(
                f"B{i}", stage.backward_ms, chain.activation_size(i), True, overhead=max(0, stage.backward_overhead)
            )
        )
        inputs = [forward[i], previous] + ([forward[i - 1]] if i > 0 else [])
        edges.extend((u, index) for u in sorted(inputs))
        backward[i] = index
        previous = index
    metadata = {"chain": chain.name, "chain_sha256": chain.sha256, "memory_offset": chain.input_size}
    return GraphProfile(f"{chain.name}-graph", tuple(nodes), tuple(sorted(edges)), metadata)


def chain_ops_to_graph_ops(chain: ChainProfile, graph: GraphProfile, ops: Sequence[Op]) -> list[Op]:
    """The graph ops doing what the chain ops do (same compute time; same peak once the constant
    input is added back). Exact when every ``saved_size == output_size`` (then a[i+1] and
    abar[i+1] are the same bytes); raises :class:`ScheduleError` if the chain schedule holds
    a[i+1] and abar[i+1] at once, which one graph node cannot express."""
    index = {node.name: v for v, node in enumerate(graph.nodes)}
    n = chain.length
    held: dict[int, str] = {}  # graph node of a_{i+1} -> "a" or "abar"
    out: list[Op] = []

    def run(name: str) -> None:
        out.append(("compute", index[name]))

    for op, i in ops:
        if op in ("F_ck", "F_n", "F_all"):
            node = index[f"F{i}"]
            if node in held:
                raise ScheduleError(f"{op} {i}: a[{i + 1}] and abar[{i + 1}] would both be held (one graph node)")
            run(f"F{i}")
            held[node] = "abar" if op == "F_all" else "a"
            if op == "F_n" and i > 0:
                del held[index[f"F{i - 1}"]]
                out.append(("free", index[f"F{i - 1}"]))
        elif op == "B":
            if i == n - 1:
                out.append(("compute", index["loss_grad"]))
            run(f"B{i}")
            out.append(("free", index[f"F{i}"]))
            held.pop(index[f"F{i}"], None)
            out.append(("free", index["loss_grad"] if i == n - 1 else index[f"B{i + 1}"]))
            if i > 0 and held.get(index[f"F{i - 1}"]) == "a":
                del held[index[f"F{i - 1}"]]
                out.append(("free", index[f"F{i - 1}"]))
        else:
            raise ScheduleError(f"unknown chain op {op!r}")
    return out
