"""``remat.compile(model, budget=...)``: ``torch.compile`` with remat's partitioner (docs/compile.md).

The model is compiled by inductor as usual (``dynamic=False``: every new input shape is a new
graph, so each gets its own exact sizes and its own solve, kept by torch's compile cache; inductor's
layout optimization off); only the partition of each joint graph into forward and backward is
remat's (:class:`~remat.joint.partition.RematPartitioner`). After the first call, ``regions``,
``plan``, ``schedule``, ``budget``, ``predicted_peak``, ``simulated_peak``, ``measured_peak``,
``least_peak``, ``store_all_peak`` and ``predicted_ms`` describe the step of the latest call's input signature,
and ``plans`` holds every region plan made (one per region and input shape).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from remat.joint.call import call_device, input_signature, remat_error
from remat.joint.choice import TIMED_ROUNDS, Measured, interleaved, kept_index, round_step_ms
from remat.joint.min_cut import MIN_CUT_RATIOS
from remat.joint.partition import RegionPlan, RematPartitioner, Session, resolve_budget
from remat.joint.solve import BelowLeast, Front
from remat.joint.split import least_step_peak, split, step_peak
from remat.joint.torch_private import check_torch, tree_flatten
from remat.measure.allocator import AllocatorMeter, cpu_meter_available
from remat.measure.oom import memory_phase
from remat.measure.state import StepState
from remat.measure.timing import time_ms
from remat.schedules import RematError, Schedule
from remat.trace.loss import step_loss

MAX_RERUNS = 4  # each rerun sees at least one more region than the last, or ends the loop
MAX_REMEASURES = 3  # compiles after the first measured one: a probe, torch's own, its next ratio down; re-solves
OVERSHOOT_RESOLVES = 2  # re-solves after steps measured above the budget; the last goes to the least simulated
MEASURE_BELOW_LEAST = 0.5  # a budget this fraction of the least simulated peak, or more, is measured at the least
PROBE_FRACTION = 0.05  # NOTE [A faster plan just above the budget]: how far above it a plan is measured
RIVAL_FRACTION = 0.2  # NOTE [torch.compile's own partition is measured beside remat's]: its reach above the budget
TORCH_OWN = "torch.compile's own partition"  # the source suffix of a plan _rival measured
TORCH_BELOW = "torch.compile's own partition, below what remat's plans measured"  # _torch_below's


@dataclass(frozen=True)
class _Call:
    """What one input signature compiled: its region plans and fronts (in region order), the
    allocator's peak of its measured step (bytes; None when not measured), its timed step (ms,
    :func:`remat.joint.choice.round_step_ms`; None when not timed) and the ``torch.compile``
    object that runs them."""

    plans: tuple[RegionPlan, ...]
    fronts: tuple[Front, ...]
    keys: tuple[tuple[int, str], ...] = ()
    measured: int | None = None
    step_ms: float | None = None
    compiled: Any = field(default=None, repr=False, compare=False)


def _saved_sets(call: _Call) -> tuple:
    """The call's save set per region key, as one hashable value (sorted by key)."""
    return tuple(sorted(zip(call.keys, (p.chosen.saved for p in call.plans), strict=False)))


def _budget_bytes(session: Session, fronts: Sequence[Front]) -> int:
    """The step's budget in bytes (a fraction or percentage of its simulated store-all peak)."""
    return resolve_budget(session.budget, step_peak([f.store_all for f in fronts]))


class RematCompiled(nn.Module):
    """``model`` compiled by inductor with remat's partitioner; call it like the model.

    A call with a new input signature compiles. When it compiled more than one region (graph
    breaks), the budget is split across them exactly (:func:`remat.joint.split.split`); if that
    changes a region's choice, or a later region could not fit what the earlier ones left, the
    call is run again with the split (RNG state and buffers restored first, so the step is the
    one the user asked for; Python side effects of the model run twice). Then, with ``measure``,
    one step of the compiled graphs runs under the allocator (:meth:`_measure`); if it peaks above
    the budget, the budget is lowered by the overshoot and the call runs again; if it fits, a
    faster plan just above the budget (:meth:`_probe`) and torch.compile's own partition
    (:meth:`_rival`) compile and are measured too (at most :data:`MAX_REMEASURES` more compiles
    in all). The measured plans are timed, interleaved, and the fastest that fits is kept (of
    two as fast, the one with more memory; :meth:`_best`), running its own compiled graphs. A
    budget below the least simulated step peak runs the least plans and measures them before it
    is refused (:meth:`_at_the_least`). The step the user asked for runs last.

    Attributes:
        plans: every :class:`RegionPlan` made so far, in the order the regions compiled.
    """

    def __init__(self, model: nn.Module, session: Session, measure: bool = True, **compile_options: Any) -> None:
        super().__init__()
        self.model = model
        self._session = session
        self._measure_steps = bool(measure)
        self._options = compile_options
        self._calls: dict[tuple, _Call] = {}
        self._current: _Call | None = None
        self._build()

    def _build(self) -> None:
        partitioner = RematPartitioner(self._session)  # a fresh uuid: inductor's caches miss
        # layout_optimization off: with it, inductor copies convolution weights to channels-last
        # inside the graphs (saved for the backward) and converts their gradients back, bytes the
        # joint graph does not have (ResNet-18: the allocator 62.6% over the prediction, docs/compile.md)
        options = {"custom_partitioner_fn": partitioner, "fx_graph_cache": False, "layout_optimization": False}
        # isolate_recompiles: every build (a rerun, a re-solve) is a new torch.compile of the same
        # code; shared, their entries would count against dynamo's recompile limit together and
        # a model would fall back to eager (uncompiled, unplanned) after a few new shapes
        compiled = torch.compile(
            self.model,
            backend="inductor",
            dynamic=False,
            options=options,
            isolate_recompiles=True,
            **self._options,
        )
        object.__setattr__(self, "_compiled", compiled)  # not a submodule: the parameters are model's

    def _run(self, args: tuple, kwargs: dict) -> tuple[Any, RematError | None]:
        self._session.begin_call()
        try:
            return self._compiled(*args, **kwargs), None
        except Exception as error:
            found = remat_error(error)
            if found is None:
                raise
            return None, (BelowLeast if isinstance(found, BelowLeast) else RematError)(str(found).splitlines()[0])

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        signature = input_signature(args, kwargs)
        budget = self._session.budget
        known = resolve_budget(budget, None)  # bytes, or None for a share of the store-all peak
        budget = known if known is not None else f"{budget} of the store-all peak"
        first = signature not in self._calls
        # an allocation failure is one line naming the phase (remat.measure.oom), never a bad_alloc
        phase = "remat.compile's first call of this input shape (compiling, planning, measuring)"
        with memory_phase(phase if first else "a compiled training step's forward", budget):
            return self._forward(signature, args, kwargs)

    def _forward(self, signature: tuple, args: tuple, kwargs: dict) -> Any:
        if signature in self._calls:
            out, error = self._run(args, kwargs)
            if error is None and self._session.call_plans:  # torch recompiled (a guard failed): new plans
                session = self._session
                self._calls[signature] = _Call(
                    tuple(session.call_plans), tuple(session.call_fronts), tuple(session.call_keys)
                )
        else:
            out, error, call = self._first_call(args, kwargs)
            if error is None:
                self._calls[signature] = call
        if error is not None:
            raise error from None
        self._current = self._calls[signature]
        return out

    def _first_call(self, args: tuple, kwargs: dict) -> tuple[Any, RematError | None, _Call]:
        """The first call of a signature: split, measure, re-solve, then the user's step; with
        the call's plans, fronts and measured peak."""
        session = self._session
        session.step_budget, session.margin = None, 0  # a new signature starts from the budget alone
        session.assigned.clear()
        session.resplit = True
        state = StepState(self.model)  # RNG and buffers, to run the call again unchanged
        tried: list[_Call] = []
        # MAX_REMEASURES compiles after the first measured one, and one more per torch partition
        # where none fits (NOTE [Every torch partition is measured before a refusal])
        for _ in range(MAX_REMEASURES + len(session.min_cut_ratios) + 1):
            out, error = self._split_runs(args, kwargs, state)
            if not tried and self._at_the_least(error):  # the least simulated plans run, measured next
                state.restore()
                self._build()
                refused = error
                out, error = self._split_runs(args, kwargs, state)
                if isinstance(error, BelowLeast):  # a later region, unknown before, cannot meet it either
                    error = refused
            plans, fronts, keys = tuple(session.call_plans), tuple(session.call_fronts), tuple(session.call_keys)
            call = _Call(plans, fronts, keys, compiled=self._compiled)
            if error is not None:  # refused: RNG and buffers as before the call (a region may have run)
                state.restore()
                return None, error, call
            if not self._measure_steps or not call.plans:
                return out, error, call
            del out  # the measured step starts from nothing of this one
            state.restore()
            tried.append(replace(call, measured=self._measure(args, kwargs)))
            state.restore()
            if not self._remeasure(tried):
                break
            self._build()  # the next plans compile anew; the tried ones keep their compiled graphs
        if len(tried) > 1:  # timed only where plans are compared (_best)
            tried = self._time_interleaved(tried, args, kwargs)
            state.restore()
        best = self._best(tried)
        del tried  # the other compiled graphs go
        refusal = self._over_budget(best)
        if refusal is not None:  # the budget is a ceiling: no step runs above it
            self._build()
            return None, refusal, best
        # the kept plans run from here on, and a recompile of the signature (a guard failed) keeps them
        object.__setattr__(self, "_compiled", best.compiled)
        session.assigned = {key: p.chosen.saved for key, p in zip(best.keys, best.plans, strict=True)}
        session.assigned_by, session.resplit = "the fastest measured", False
        out, error = self._run(args, kwargs)
        if session.call_plans:
            best = replace(best, plans=tuple(session.call_plans))
        return out, error, best

    def _over_budget(self, best: _Call) -> RematError | None:
        """A one-line refusal when even the best measured choice peaked above the budget (a budget
        that admits store-all keeps store-all, as :meth:`_remeasure` does)."""
        budget = _budget_bytes(self._session, best.fronts)
        top = step_peak([f.store_all for f in best.fronts])
        if best.measured is None or best.measured <= budget or budget >= top:
            return None
        least = least_step_peak(best.fronts)
        why = (
            "inductor's kernels hold more than the joint graph shows"
            if best.measured > least
            else f"the joint graph's least is {least} bytes, simulated; inductor fuses some of what it counts"
        )
        return RematError(
            f"remat.compile: budget {budget} bytes cannot be met: the compiled step measured {best.measured} "
            f"bytes at its least ({why}); give a budget of at least {best.measured} bytes"
        )

    def _at_the_least(self, error: RematError | None) -> bool:
        """After a call refused as below the least simulated step peak: set the step budget to
        that least and say True (the call runs again with the least plans), where measuring is
        on, no step budget was set and the budget is at least :data:`MEASURE_BELOW_LEAST` of
        the least; False otherwise (the refusal stands).

        NOTE [A budget below the least simulated is measured at the least]: the simulation
        counts every value of the joint graph at its full size, and inductor fuses pointwise
        chains, so the least plans can measure below their simulated peak, and a budget between
        the two can be met: the 12-layer GPT-2 (vocabulary 50257) was refused at 205.57 MiB, the
        least simulated, where its compiled step measures 156.94 MiB (docs/compile.md, "On the
        models of docs/models.md"). So the least plans compile and are measured first: kept if
        they fit, else refused naming what they measured (:meth:`_over_budget`), a budget that
        then runs. Below half the least (24% is the largest overcount seen) the refusal is at
        once: no compile is spent on a budget that far off."""
        session = self._session
        fronts = session.call_fronts
        if not (isinstance(error, BelowLeast) and self._measure_steps and fronts) or session.step_budget is not None:
            return False
        least = least_step_peak(fronts)
        budget = _budget_bytes(session, fronts)
        if budget < least * MEASURE_BELOW_LEAST:
            return False
        session.step_budget, session.margin = least, budget - least  # _resplit splits the least
        session.assigned.clear()
        return True

    def _best(self, tried: list[_Call]) -> _Call:
        """Of the measured choices, the one :func:`remat.joint.choice.kept_index` keeps: the
        fastest within the budget by their timed compiled steps (else by the simulation), of
        those as fast the one with more memory (NOTE [A tie goes to the plan with more memory]),
        else the one that peaked least.

        The timed steps decide because the simulation's time is the sum of eager op times: it
        puts ResNet-50's store-all first, whose compiled step took 168 ms against 132 ms for
        torch's 1.0 save set (inductor fuses the recomputed pointwise ops; store-all writes and
        reads every saved value), benchmarks/compile_front.py, 2026-12-05."""
        budget = _budget_bytes(self._session, tried[0].fronts)
        seen = [Measured(c.measured, c.step_ms, sum(p.chosen.ms for p in c.plans)) for c in tried]
        return tried[kept_index(seen, budget)]

    def _split_runs(self, args: tuple, kwargs: dict, state: StepState) -> tuple[Any, RematError | None]:
        """Run the call until the split across its regions no longer changes (at most
        :data:`MAX_RERUNS` reruns; a split still changing after them is a one-line refusal)."""
        for rerun in range(MAX_RERUNS + 1):
            out, error = self._run(args, kwargs)
            if error is None and self._session.over_share and len(self._session.call_fronts) < 2:
                state.restore()  # one region over its share: nothing to split, refused
                self._build()
                return None, BelowLeast(self._session.over_share[0])
            try:
                split_budget = self._resplit(error)
            except BelowLeast as refused:  # the step's regions cannot meet the budget together
                state.restore()
                self._build()
                return None, refused
            if split_budget is None:
                return out, error
            if rerun == MAX_RERUNS:
                state.restore()
                self._build()
                return None, RematError(
                    f"remat.compile: the split of the budget across {len(self._session.call_fronts)} compiled "
                    f"regions still changed after {MAX_RERUNS + 1} runs; the call is refused"
                )
            self._session.step_budget = split_budget
            state.restore()
            self._build()
        raise AssertionError("unreachable")  # the loop returns on its last pass

    def _resplit(self, error: RematError | None) -> int | None:
        """Split the budget across this call's regions; the step budget (bytes) to run the call
        again with, or None when it must not run again (one region, or the split changes nothing)."""
        session = self._session
        fronts = session.call_fronts
        if not session.resplit or len(fronts) < 2 or (error is not None and len(fronts) == len(session.call_plans)):
            return None
        budget = _budget_bytes(session, fronts) - session.margin
        choices = split(fronts, budget)  # one line naming the least step peak if none fits
        assigned = {key: c.saved for key, c in zip(session.call_keys, choices, strict=True)}
        current = {key: p.chosen.saved for key, p in zip(session.call_keys, session.call_plans, strict=False)}
        if error is None and current == assigned:
            return None
        session.assigned.update(assigned)
        session.assigned_by = "split across regions"
        return budget

    def _measure(self, args: tuple, kwargs: dict) -> int | None:
        """The allocator's peak (bytes) of one step of the compiled graphs on these inputs: the
        forward, then the backward of the loss (``torch.autograd.grad``, so no parameter's
        ``.grad`` is touched): the sum of the outputs that are scalars with a gradient (a Hugging
        Face model's ``loss``, not its logits), else of every output with a gradient (as
        ``out.sum().backward()``), the outputs held through the backward (as ``out =
        model(...); out.loss.backward()``, the larger of the two ways to write the step). None
        where the allocator cannot be read (a torch profiler is already running, on CPU)."""
        device = self._meterable(args, kwargs)
        if device is None:
            return None
        with AllocatorMeter(device) as meter:
            self._step(self._compiled, args, kwargs)
        return meter.peak_bytes

    def _meterable(self, args: tuple, kwargs: dict) -> torch.device | None:
        """The call's device, or None where a torch profiler other than the meters' own runs on CPU
        (the allocator's events and the step's time are then not the step's own)."""
        device = call_device(self.model, args, kwargs)
        if device.type == "cpu" and not cpu_meter_available():
            return None
        return device

    def _step(self, compiled: Any, args: tuple, kwargs: dict) -> None:
        """One step of ``compiled`` (a ``torch.compile`` of the model) as :meth:`_measure` describes it."""
        inputs = [p for p in self.model.parameters() if p.requires_grad]
        out = compiled(*args, **kwargs)
        leaves = tree_flatten(out)[0]
        outputs = [t for t in leaves if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        outputs = [t for t in outputs if t.dim() == 0] or outputs  # the loss the user steps on
        if outputs and inputs:
            loss = step_loss(outputs)  # a scalar loss as it is, as the user's step holds it
            torch.autograd.grad(loss, inputs, allow_unused=True)
            del loss
        del out, leaves, outputs

    def _time_interleaved(self, tried: list[_Call], args: tuple, kwargs: dict) -> list[_Call]:
        """``tried`` with each call's ``step_ms``: :data:`~remat.joint.choice.TIMED_ROUNDS`
        rounds of one unmetered step of each call's compiled graphs, in
        :func:`~remat.joint.choice.interleaved` order, compared round by round
        (:func:`~remat.joint.choice.round_step_ms`). 15 rounds: the least of 5 flipped the
        8-layer GPT-2's choice between plans 2-5% apart from one budget to the next
        (docs/compile.md, "Measured truth" step 6). Unchanged under a running torch profiler on
        CPU (as :meth:`_measure`). The caller restores RNG and buffers afterwards."""
        samples: list[list[float]] = [[] for _ in tried]
        for k in interleaved(len(tried), TIMED_ROUNDS):
            ms = self._time_step(tried[k], args, kwargs)
            if ms is None:
                return tried
            samples[k].append(ms)
        return [replace(c, step_ms=ms) for c, ms in zip(tried, round_step_ms(samples), strict=True)]

    def _time_step(self, call: _Call, args: tuple, kwargs: dict) -> float | None:
        """The wall time (ms) of one unmetered step of ``call``'s compiled graphs
        (:func:`remat.measure.timing.time_ms`), or None under a running torch profiler on CPU."""
        device = self._meterable(args, kwargs)
        if device is None:
            return None
        return time_ms(lambda: self._step(call.compiled, args, kwargs), device, 1)

    def _remeasure(self, tried: list[_Call]) -> bool:
        """After a measured step, set the step budget the call runs again with and say True; False
        when it need not run again.

        * Above the budget (and no plan measured so far fits): the step budget is lowered by the
          largest overshoot of the simulation seen so far (the margin), never below the least
          simulated step peak, and the second (:data:`OVERSHOOT_RESOLVES`) goes straight to that least: so the plans
          a budget at that least chooses are always among those measured, and a refusal's "give a
          budget of at least M bytes" (their measured peak) is a budget that then runs
          (``test_a_conv_bn_net_stays_within_the_prediction_at_store_all_and_at_the_least``).
        * Once a plan measured within the budget: once, the faster plans just above it
          (:meth:`_probe`), then torch.compile's own partition, the next ratio down while the one
          measured is above the budget (:meth:`_rival`).
        * Never for store-all above a budget that admits it (store-all is kept), nor when the
          step budget would not move."""
        session, call = self._session, tried[-1]
        measured, fronts = call.measured, call.fronts
        if measured is None:
            return False
        top = step_peak([f.store_all for f in fronts])
        budget = _budget_bytes(session, fronts)
        if any(c.measured is not None and c.measured <= budget for c in tried):
            if len(tried) > MAX_REMEASURES:
                return False
            return self._probe(tried, budget) or self._rival(tried, budget)  # else _best keeps the fastest
        if budget >= top and all(p.chosen.saved == p.store_all.saved for p in call.plans):
            return False  # a budget that admits store-all keeps it
        swept = any(p.source.endswith(f"({TORCH_BELOW})") for p in call.plans)  # no re-solve after it
        if len(tried) <= MAX_REMEASURES and not swept and self._lower(tried, budget):
            return True
        return self._torch_below(tried, budget)  # NOTE [Every torch partition is measured before a refusal]

    def _lower(self, tried: list[_Call], budget: int) -> bool:
        """After a step measured above ``budget`` (bytes): lower the step budget by the largest
        overshoot seen (:meth:`_remeasure`) and say True; False when it would not move."""
        session, call = self._session, tried[-1]
        margin = max(session.margin, call.measured - max(p.step_peak for p in call.plans))
        least = least_step_peak(call.fronts)
        last = len(tried) >= OVERSHOOT_RESOLVES  # every plan tried overshot (none fits): they are all re-solves
        lower = least if last else max(least, budget - margin)
        if lower >= (budget if session.step_budget is None else session.step_budget):
            return False  # no lower step budget to try: the same plans again
        session.margin = budget - lower  # what the split takes off the budget too (_resplit)
        session.step_budget = lower
        session.assigned.clear()
        return True

    def _torch_below(self, tried: list[_Call], budget: int) -> bool:
        """Where no plan measured so far fits ``budget`` (bytes): assign every region torch.compile's
        own partition at the ratio not measured yet whose simulated step peak is least, and say
        True (it compiles and is measured next); False when every ratio's is measured, or
        simulated above ``budget / MEASURE_BELOW_LEAST`` (no fusion seen takes that much away).

        NOTE [Every torch partition is measured before a refusal]: the simulation counts every
        value at its full size, and inductor fuses some of them away, by how much depends on the
        partition; so the partition that measures least need not be the one simulated least. On
        a 4-layer decoder, torch.compile at ``activation_memory_budget`` 0.3 measured 16664592
        bytes, and remat.compile at that budget measured only its least simulated plans (19731592)
        and refused (issue 42). A budget below everything measured is refused only after each of
        torch's partitions (one compile each, those with the same save sets once) is measured too,
        the first that fits ending it; the refusal then names the least of all that measured, a
        budget that runs: so remat.compile's least is at most torch.compile's over its ratios."""
        session, call = self._session, tried[-1]
        cuts = [dict(f.torch_cuts) for f in call.fronts]
        measured = {_saved_sets(c) for c in tried}
        options = []
        for ratio in set.intersection(*(set(c) for c in cuts)):
            chosen = [f.candidate(c[ratio]) for f, c in zip(call.fronts, cuts, strict=True)]
            rival = {key: c.saved for key, c in zip(call.keys, chosen, strict=True)}
            if tuple(sorted(rival.items())) not in measured and step_peak(chosen) * MEASURE_BELOW_LEAST <= budget:
                options.append((step_peak(chosen), -ratio, rival))
        if not options:
            return False
        session.assigned = min(options, key=lambda o: o[:2])[2]
        session.assigned_by, session.resplit = TORCH_BELOW, False
        session.step_budget, session.margin = None, 0
        return True

    def _probe(self, tried: list[_Call], budget: int) -> bool:
        """After the first measured step fits ``budget`` (bytes): set the step budget to the
        fastest plans simulated within ``budget * (1 + PROBE_FRACTION)`` and say True when they
        are faster than the measured ones (they compile and are measured next; :meth:`_best`
        keeps them only if they fit and their timed steps are faster, or as fast with more
        memory); False otherwise.

        NOTE [A faster plan just above the budget]: the simulation counts every value of the
        joint graph at its full size, and inductor fuses pointwise chains, so a plan simulated a
        little above the budget can measure within it, and be faster than the plan chosen (the
        8-layer GPT-2's loss region: its recomputed softmax is fused into one backward kernel,
        4 MiB the simulation holds; at 14499464 bytes the plan chosen measured 14446216, a faster
        one simulated at 14713860 measured 14437000). One probe per input signature, and none
        after an overshoot (the margin then points down, :meth:`_remeasure`); it costs one
        compile. 10% was tried (2026-12-06: GPT-2's torch 0.5 save set beside store-all,
        simulated 8.2% above 16747656 bytes, measures 16721544): it compiled a plan more at most
        budgets (first calls of 77-113 s against 31-70 s) and did not keep the measured peak
        monotone in the budget (docs/compile.md, "Measured truth" step 4)."""
        session, call = self._session, tried[-1]
        if len(tried) > 1:
            return False
        upper = budget + int(budget * PROBE_FRACTION)
        try:
            choices = split(call.fronts, upper)
        except RematError:  # the plans measured were the least, simulated above ``upper``
            return False
        if sum(c.ms for c in choices) >= sum(p.chosen.ms for p in call.plans):
            return False  # nothing faster within reach
        session.step_budget, session.margin = upper, budget - upper  # _resplit splits ``upper``
        session.assigned.clear()
        return True

    def _rival(self, tried: list[_Call], budget: int) -> bool:
        """Once a plan measured within ``budget`` (bytes): assign every region torch.compile's own
        partition at the largest ``activation_memory_budget`` ratio whose simulated step peak is
        at most :data:`RIVAL_FRACTION` above the budget and not measured yet, and say True (it
        compiles and is measured and timed next; :meth:`_best` keeps it only if it fits and is
        faster, or as fast with more memory); False when no ratio is within reach, or the largest
        measured already fits.

        NOTE [torch.compile's own partition is measured beside remat's]: the simulation's time is
        the sum of eager op times, so at a budget that admits store-all, store-all is the fastest
        simulated plan; compiled, it was slower than torch.compile's own partition on Llama and
        ResNet-50 (35.1 against 29.9 ms, 170 against 159 ms; benchmarks/compile_front.py,
        2026-12-05): inductor fuses the pointwise ops that torch's min-cut recomputes, and
        store-all writes and reads every value it saves. Below store-all, the partition a
        ``torch.compile`` user gets at the ratio whose step fits is the one to beat (issue 26's
        target), and its simulated peak overcounts what inductor fuses (the 8-layer GPT-2's 0.7
        partition: simulated 19290116 bytes, 15% above the 16747656 its compiled step measures;
        its loss region's logits and softmax are fused), hence the 20% reach; one that measures
        above the budget is never kept. With the joint graph merged as torch's partitioner
        merges it (``remat.joint.joint_profile.apply_torch_safety``), remat's graphs of torch's save set
        measure what torch.compile's do. It costs one compile.

        NOTE [A torch partition above the budget gives way to the next ratio down]: the reach
        overshoots too: on the 8-layer Llama at 14528528 bytes, the 0.6 partition (simulated
        17204232) measured 15109136 and was dropped, so the 0.5 partition, kept at the smaller
        budget 14027792 (measured 13800456), was never measured, and remat's plan (13240968) was
        kept: a larger budget measured less (benchmarks/compile_front.py, 2026-12-06, issue 26's
        target (b)). So a partition measured above the budget is followed by the next
        ratio within reach whose save sets differ, one compile each, within
        :data:`MAX_REMEASURES`; the first that fits ends it (a lower ratio recomputes more)."""
        session, call = self._session, tried[-1]
        reach = budget + int(budget * RIVAL_FRACTION)
        cuts = [dict(f.torch_cuts) for f in call.fronts]
        measured = {_saved_sets(c): c.measured for c in tried}
        for ratio in sorted(set.intersection(*(set(c) for c in cuts)), reverse=True):
            chosen = [f.candidate(c[ratio]) for f, c in zip(call.fronts, cuts, strict=True)]
            if step_peak(chosen) > reach:
                continue
            rival = {key: c.saved for key, c in zip(call.keys, chosen, strict=True)}
            key = tuple(sorted(rival.items()))
            if key not in measured:
                session.assigned, session.assigned_by, session.resplit = rival, TORCH_OWN, False
                session.step_budget, session.margin = None, 0
                return True
            if measured[key] is None or measured[key] <= budget:
                return False  # measured already, and it fits: a lower ratio recomputes more
            # above the budget: NOTE [A torch partition above the budget gives way to the next ratio down]
        return False

    @property
    def plans(self) -> tuple[RegionPlan, ...]:
        return tuple(self._session.plans)

    def _latest(self) -> _Call:
        if self._current is None:
            raise RematError("remat.compile: nothing is compiled yet; call the model once first")
        if not self._current.plans:
            raise RematError("remat.compile: the latest call compiled no region with a backward (nothing to plan)")
        return self._current

    @property
    def regions(self) -> tuple[RegionPlan, ...]:
        """The region plans of the latest call's input signature (one per compiled region)."""
        return self._latest().plans

    @property
    def plan(self) -> RegionPlan:
        """The latest call's last compiled region's plan (the only one without graph breaks)."""
        return self._latest().plans[-1]

    @property
    def schedule(self) -> Schedule:
        """The latest call's last region's partition as a remat graph schedule."""
        return self.plan.schedule

    @property
    def simulated_peak(self) -> int:
        """The step's simulated peak (bytes): the largest ``held_before + peak`` over its regions."""
        return max(p.step_peak for p in self._latest().plans)

    @property
    def measured_peak(self) -> int | None:
        """The allocator's peak (bytes) of the step measured for the latest call's signature
        (:meth:`_measure`), or None when it was not measured."""
        return self._latest().measured

    @property
    def predicted_peak(self) -> int:
        """The step's predicted peak (bytes): the allocator's peak of the compiled step measured
        at the first call of the latest signature (inductor fuses and reorders what the
        simulation counts value by value), or the simulated peak where it was not measured."""
        measured = self._latest().measured
        return self.simulated_peak if measured is None else measured

    @property
    def budget(self) -> int:
        """The step's budget (bytes) for the latest call's signature: the budget given, or its
        share of :attr:`store_all_peak`."""
        return _budget_bytes(self._session, self._latest().fronts)

    @property
    def least_peak(self) -> int:
        """The least simulated step peak (bytes) any budget can get for the latest call's signature."""
        return least_step_peak(self._latest().fronts)

    @property
    def store_all_peak(self) -> int:
        """The simulated step peak (bytes) of saving everything, for the latest call's signature."""
        return step_peak([f.store_all for f in self._latest().fronts])

    @property
    def predicted_ms(self) -> float:
        """The step's predicted time (ms): the sum of its regions' schedule times."""
        return sum(p.chosen.ms for p in self._latest().plans)


def compile(  # noqa: A001 - the public name is remat.compile
    model: nn.Module,
    budget: int | float | str = 1.0,
    *,
    times: str = "measured",
    ilp_seconds: float = 0.0,
    repeats: int = 2,
    measure: bool = True,
    min_cut_ratios: Sequence[float] = MIN_CUT_RATIOS,
    **compile_options: Any,
) -> RematCompiled:
    """``model`` compiled with ``torch.compile`` (inductor), its joint graphs partitioned by remat
    under ``budget``.

    Args:
        model: an ``nn.Module`` in train mode.
        budget: the bytes a training step allocates beyond what exists before it (parameters,
            inputs and pre-allocated ``.grad`` tensors are not in it; the gradients the compiled
            backward returns are, as they are new tensors until autograd adds them into ``.grad``):
            bytes (int), a size (``"6GiB"``), a percentage of the store-all peak (``"40%"``) or a
            fraction of it in (0, 1] (``0.4``, ``"0.4"``; docs/formats.md, "Budgets"). A malformed or
            out-of-range budget is refused here.
        times: ``"measured"`` (each joint graph's nodes run eagerly on fresh data) or
            ``"estimate"`` (remat's own bytes-and-FLOPs formula, :mod:`remat.joint.timing`; not
            inductor's cost model).
        ilp_seconds: seconds for the ILP after the hierarchical solver, per joint graph (0: skip;
            graphs of at most :data:`remat.joint.solve.ILP_NODES` nodes only).
        repeats: timed runs of each joint graph after one warm-up (the least counts).
        measure: run one step of the compiled graphs under the allocator at the first call of
            each input signature, re-solve if it peaks above the budget, and make that peak
            ``predicted_peak`` (:class:`RematCompiled`).
        min_cut_ratios: ``activation_memory_budget`` ratios in [0, 1] at which torch's own
            partitioner is run on each joint graph; its save sets join remat's candidates
            (:mod:`remat.joint.min_cut`). Empty: remat's solvers alone.
        compile_options: passed to ``torch.compile`` (``fullgraph``, ``mode``; not ``backend``,
            ``options``, ``dynamic`` or ``isolate_recompiles``).
    """
    check_torch()  # a torch release its private partitioner names were not tested on: one line
    if not isinstance(model, nn.Module):
        raise RematError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    taken = sorted(set(compile_options) & {"backend", "options", "dynamic", "isolate_recompiles"})
    if taken:
        raise RematError(f"remat.compile: option '{taken[0]}' is set by remat.compile itself")
    session = Session(budget, times, ilp_seconds, repeats, min_cut_ratios)
    return RematCompiled(model, session, measure=measure, **compile_options)


__all__ = ["RematCompiled", "compile"]
