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
from torch.utils._pytree import tree_flatten

from remat.joint.partition import RegionPlan, RematPartitioner, Session, resolve_budget
from remat.joint.split import least_step_peak, split, step_peak
from remat.schedules import RematError, Schedule

MAX_RERUNS = 4  # each rerun sees at least one more region than the last, or ends the loop


def _signature(args: tuple, kwargs: dict) -> tuple:
    """What makes a call compile anew here: its tensors' shapes, dtypes and devices."""
    flat, spec = tree_flatten((args, kwargs))
    return (str(spec), *((tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else type(a) for a in flat))


def _snapshot(model: nn.Module) -> tuple:
    """The CPU (and CUDA) RNG states and a copy of every buffer, to run a call again unchanged."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    with torch.no_grad():
        buffers = [(b, b.detach().clone()) for b in model.buffers()]
    return torch.get_rng_state(), cuda, buffers


def _restore(model: nn.Module, state: tuple) -> None:
    cpu, cuda, buffers = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
    with torch.no_grad():
        for buffer, saved in buffers:
            buffer.copy_(saved)


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

    A call with a new input signature compiles. When it compiled more than one region (graph
    breaks), the budget is split across them exactly (:func:`remat.joint.split.split`); if that
    changes a region's choice, or a later region could not fit what the earlier ones left, the
    call is run again with the split (RNG state and buffers restored first, so the step is the
    one the user asked for; Python side effects of the model run twice).

    Attributes:
        plans: every :class:`RegionPlan` made so far, in the order the regions compiled.
    """

    def __init__(self, model: nn.Module, session: Session, **compile_options: Any) -> None:
        super().__init__()
        self.model = model
        self._session = session
        self._options = compile_options
        self._seen: set[tuple] = set()
        self._build()

    def _build(self) -> None:
        partitioner = RematPartitioner(self._session)  # a fresh uuid: inductor's caches miss
        options = {"custom_partitioner_fn": partitioner, "fx_graph_cache": False}
        compiled = torch.compile(self.model, backend="inductor", dynamic=False, options=options, **self._options)
        object.__setattr__(self, "_compiled", compiled)  # not a submodule: the parameters are model's

    def _run(self, args: tuple, kwargs: dict) -> tuple[Any, RematError | None]:
        self._session.begin_call()
        try:
            return self._compiled(*args, **kwargs), None
        except Exception as error:
            found = _remat_error(error)
            if found is None:
                raise
            return None, RematError(str(found).splitlines()[0])

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        signature = _signature(args, kwargs)
        if signature in self._seen:
            out, error = self._run(args, kwargs)
        else:
            state = _snapshot(self.model)
            for _ in range(MAX_RERUNS + 1):
                out, error = self._run(args, kwargs)
                if not self._resplit(error):
                    break
                _restore(self.model, state)
                self._build()
            self._seen.add(signature)
        if error is not None:
            raise error from None
        return out

    def _resplit(self, error: RematError | None) -> bool:
        """Split the budget across this call's regions; True if the call must run again with it."""
        session = self._session
        fronts = session.call_fronts
        if len(fronts) < 2 or (error is not None and len(fronts) == len(session.call_plans)):
            return False
        reference = step_peak([f.store_all for f in fronts])
        budget = resolve_budget(session.budget, reference)
        choices = split(fronts, budget)  # one line naming the least step peak if none fits
        assigned = {key: c.saved for key, c in zip(session.call_keys, choices, strict=True)}
        current = {key: p.chosen.saved for key, p in zip(session.call_keys, session.call_plans, strict=False)}
        if error is None and current == assigned:
            return False
        session.assigned.update(assigned)
        session.step_budget = budget
        return True

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
    def least_peak(self) -> int:
        """The least step peak (bytes) any budget can get for the latest compiled input shape."""
        self._latest()
        return least_step_peak(self._session.call_fronts)

    @property
    def store_all_peak(self) -> int:
        """The step peak (bytes) of saving everything, for the latest compiled input shape."""
        self._latest()
        return step_peak([f.store_all for f in self._session.call_fronts])

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
