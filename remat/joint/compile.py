"""``remat.compile(model, budget=...)``: ``torch.compile`` with remat's partitioner (docs/compile.md).

The model is compiled by inductor as usual (``dynamic=False``: every new input shape is a new
graph, so each gets its own exact sizes and its own solve, kept by torch's compile cache); only
the partition of each joint graph into forward and backward is remat's
(:class:`~remat.joint.partition.RematPartitioner`). After the first call, ``.plan``,
``.schedule``, ``.predicted_peak`` and ``.predicted_ms`` describe the latest compiled step, and
``.plans`` holds every region plan made (one per region and input shape).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from remat.joint.partition import RegionPlan, RematPartitioner, Session
from remat.schedules import RematError, Schedule


def _remat_error(error: BaseException) -> RematError | None:
    """The RematError inside an exception torch wrapped (BackendCompilerFailed and friends)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, RematError):
            return error
        seen.add(id(error))
        error = getattr(error, "inner_exception", None) or error.__cause__ or error.__context__
    return None


class RematCompiled(nn.Module):
    """``model`` compiled by inductor with remat's partitioner; call it like the model.

    Attributes:
        plans: every :class:`RegionPlan` made so far, in the order the regions compiled.
    """

    def __init__(self, model: nn.Module, session: Session, **compile_options: Any) -> None:
        super().__init__()
        self.model = model
        self._session = session
        self._partitioner = RematPartitioner(session)
        options = {"custom_partitioner_fn": self._partitioner, "fx_graph_cache": False}
        compiled = torch.compile(model, backend="inductor", dynamic=False, options=options, **compile_options)
        object.__setattr__(self, "_compiled", compiled)  # not a submodule: the parameters are model's

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._session.begin_call()
        try:
            return self._compiled(*args, **kwargs)
        except Exception as error:
            found = _remat_error(error)
            if found is None:
                raise
            raise RematError(str(found).splitlines()[0]) from None

    @property
    def plans(self) -> tuple[RegionPlan, ...]:
        return tuple(self._session.plans)

    def _latest(self) -> list[RegionPlan]:
        plans = self._session.call_plans or self._session.plans[-1:]
        if not plans:
            raise RematError("remat.compile: nothing is compiled yet; call the model once first")
        return list(plans)

    @property
    def regions(self) -> tuple[RegionPlan, ...]:
        """The region plans of the latest call that compiled (one per compiled region)."""
        return tuple(self._latest())

    @property
    def plan(self) -> RegionPlan:
        """The latest compiled region's plan (the only one without graph breaks)."""
        return self._latest()[-1]

    @property
    def schedule(self) -> Schedule:
        """The latest compiled region's partition as a remat graph schedule."""
        return self.plan.schedule

    @property
    def predicted_peak(self) -> int:
        """The step's predicted peak (bytes): the largest ``held_before + peak`` over its regions."""
        return max(p.step_peak for p in self._latest())

    @property
    def predicted_ms(self) -> float:
        """The step's predicted time (ms): the sum of its regions' schedule times."""
        return sum(p.chosen.ms for p in self._latest())


def compile(  # noqa: A001 - the public name is remat.compile
    model: nn.Module,
    budget: int | float | str = 1.0,
    *,
    times: str = "measured",
    ilp_seconds: float = 0.0,
    repeats: int = 2,
    **compile_options: Any,
) -> RematCompiled:
    """``model`` compiled with ``torch.compile`` (inductor), its joint graphs partitioned by remat
    under ``budget``.

    Args:
        model: an ``nn.Module`` in train mode.
        budget: activation memory of the training step, parameters, inputs and pre-allocated
            gradients excluded: bytes (int), a size (``"6GiB"``), a percentage of the store-all
            peak (``"40%"``) or a fraction of it (float in (0, 1]).
        times: ``"measured"`` (each joint graph's nodes run eagerly on fresh data) or
            ``"estimate"`` (bytes and FLOPs; :mod:`remat.joint.timing`).
        ilp_seconds: seconds for the ILP after the hierarchical solver, per joint graph (0: skip;
            graphs of at most :data:`remat.joint.solve.ILP_NODES` nodes only).
        repeats: timed runs of each joint graph (the least counts).
        compile_options: passed to ``torch.compile`` (``fullgraph``, ``mode``; not ``backend``,
            ``options`` or ``dynamic``).
    """
    if not isinstance(model, nn.Module):
        raise RematError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    taken = sorted(set(compile_options) & {"backend", "options", "dynamic"})
    if taken:
        raise RematError(f"remat.compile: option '{taken[0]}' is set by remat.compile itself")
    return RematCompiled(model, Session(budget, times, ilp_seconds, repeats), **compile_options)


__all__ = ["RematCompiled", "compile"]
