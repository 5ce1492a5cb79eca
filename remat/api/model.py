"""The wrapped model ``remat.checkpoint`` returns: it trains by replaying, for each call, the
schedule of that call's shape under one budget (docs/models.md, "Batches of other shapes")."""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from remat.api.inputs import check_count, check_strategy, described, resolve_budget
from remat.api.shapes import ShapeCut, ShapeCuts
from remat.measure.oom import memory_phase
from remat.model_errors import one_line_errors
from remat.replay.chain import RematChain
from remat.replay.report import compare
from remat.schedules import ChainProfile, InfeasibleBudgetError, RematError, Schedule, format_size
from remat.solver.budget import reference_peak
from remat.solver.chain.dp.cache import release_tables
from remat.solver.chain.optimal import minimum_budget
from remat.solver.registry import solve
from remat.trace.capture import OutputForm
from remat.trace.stage_errors import traced_location

OVER_BUDGET = ("refuse", "least")
logger = logging.getLogger("remat")


def _same_cut(a: ShapeCut, b: ShapeCut) -> bool:
    """Whether two cuts are one (``ShapeCuts`` hands out a copy with the time it took): the same
    chain and profile objects, hence the same schedule under the same budget."""
    return a.chain is b.chain and a.profile is b.profile


@dataclass(frozen=True, eq=False)
class ShapePlan:
    """How one cut trains under the model's budget: its schedule and the replay of it.

    ``least`` says the shape needed more than the budget and runs under the least-memory
    schedule instead (``over_budget="least"``)."""

    cut: ShapeCut
    schedule: Schedule
    replay: RematChain
    least: bool = False

    @property
    def predicted_peak(self) -> int:
        """Bytes: the peak of the whole call, the simulator's peak of the schedule on the cut's
        profile (the replay's step) plus the side values held through it (``side_bytes``)."""
        return self.schedule.predicted.peak_memory + self.cut.side_bytes

    @property
    def side_bytes(self) -> int:
        """Bytes: the side values the call computes before the replay (masks, rotary tables) and
        holds through it; in ``predicted_peak`` and in the budget (docs/models.md)."""
        return self.cut.side_bytes


def call_store_all_peak(cut: ShapeCut) -> int:
    """Bytes: the whole call's store-all peak for ``cut``: the chain's (the solver's one reference,
    :func:`remat.solver.budget.reference_peak`) plus its side values."""
    return reference_peak(cut.profile) + cut.side_bytes


def _least_schedule(profile: ChainProfile) -> Schedule:
    return solve(profile, minimum_budget(profile), "optimal")


def answer(form: OutputForm, loss: torch.Tensor) -> Any:
    """NOTE [The wrapped model answers as the model]
    The replay computes the step's one value. Where the model's output carries its loss (a
    Hugging Face ``ModelOutput``, a dict), the wrapped model returns an output of the same type
    holding that loss and nothing else, so ``out.loss``, ``out["loss"]`` and ``out[0]`` (the
    Trainer's ``compute_loss``) read what they read from the model. The other fields (logits,
    hidden states, the cache) are left out: they are values inside the chain's last stages, and
    returning them would keep them alive through the backward (the logits alone are batch x
    sequence x vocabulary), a peak no schedule was solved for. Any other form (a ``loss=``, a
    tensor output, a tuple's first tensor) returns the step's tensor, as before."""
    if form.kind != "own":
        return loss
    if form.output is dict or not issubclass(form.output, Mapping):
        return {"loss": loss}
    return form.output(loss=loss)  # a ModelOutput: its other fields default to None


def _with_signature(step: Callable[..., Any], source: nn.Module, loss_given: bool) -> Callable[..., Any]:
    """``step`` under the name ``forward`` with ``source.forward``'s signature (plus ``target=``
    with a ``loss=``): ``inspect.signature`` of the wrapped model names the model's inputs, which
    the Trainer's ``remove_unused_columns`` keeps (a bare ``*args, **kwargs`` kept none)."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        return step(*args, **kwargs)

    try:
        signature = inspect.signature(source.forward)
    except (TypeError, ValueError):  # a builtin or a C extension's forward: the generic one stays
        return step
    if loss_given and "target" not in signature.parameters:
        params = list(signature.parameters.values())
        at = next((i for i, p in enumerate(params) if p.kind == inspect.Parameter.VAR_KEYWORD), len(params))
        params.insert(at, inspect.Parameter("target", inspect.Parameter.KEYWORD_ONLY, default=None))
        signature = signature.replace(parameters=params)
    forward.__signature__ = signature
    forward.__doc__ = RematModel.forward.__doc__
    return forward


def _renamed(old: str, new: str) -> property:
    """A deprecated attribute ``old`` that reads ``new`` (renamed in 0.2.0 so that
    ``remat.checkpoint`` and ``remat.compile`` name the same bytes alike; CHANGELOG.md)."""

    def read(self: RematModel) -> int:
        warnings.warn(f"RematModel.{old} is deprecated since remat 0.2.0: use .{new}", DeprecationWarning, stacklevel=2)
        return getattr(self, new)

    return property(read, doc=f"Deprecated since 0.2.0: :attr:`{new}` (the same bytes).")


class RematModel(nn.Module):
    """A model that trains by replaying a schedule: call it like the model (same positional and
    keyword inputs, plus ``target=`` when a ``loss`` taking one was given); it answers as the model
    does (NOTE [The wrapped model answers as the model]): the model's output type carrying the
    step's loss where the model's output carries one (``wrapped(**batch).loss.backward()``), else
    the step's tensor (the ``loss=``'s, or the model's one output tensor) to call ``.backward()`` on.
    Its state, attributes and (for a Hugging Face or PEFT model) class are the model's (NOTE [The
    wrapped model is the model's state]), so ``transformers.Trainer`` and accelerate take it as the
    model; in eval mode a call is the model's own.

    Calls of another shape (a ragged last batch, another sequence length, a padded or unpadded
    batch) are profiled (or predicted) and solved under the same budget in bytes the first time
    they come, on a cut general in the sizes that change, traced and proven once per set of
    changing dimensions and mask branch (NOTE [Cuts general in a size], :mod:`remat.api.shapes`),
    then cached. ``.schedule`` and ``.profile`` are the example's;
    ``.plan_for(...)`` and ``.plans`` give every shape's. ``.report()`` measures steps on the
    example input and puts them next to the prediction.
    """

    def __init__(
        self,
        cuts: ShapeCuts,
        budget: int | float | str,
        strategy: str,
        example: tuple,
        loss_given: bool = False,
        over_budget: str = "refuse",
        source: nn.Module | None = None,
        first: ShapeCut | None = None,
        forms: dict[str, OutputForm] | None = None,
    ) -> None:
        """``first``: the example's cut, with ``budget`` in bytes (:meth:`with_budget`); without it,
        the example is cut now (NOTE [Order of a new cut]) and ``budget`` may be a fraction or
        percentage of its store-all peak. ``forms["example"]``: what the example's step
        differentiates, set by its proof (NOTE [One meaning per step]); the output is answered
        in the model's type from it (NOTE [The wrapped model answers as the model])."""
        super().__init__()
        object.__setattr__(self, "_source", source)  # not a submodule: the chain holds the parameters
        self._forms = {} if forms is None else forms
        if source is not None:  # the model's inputs, for inspect.signature (the Trainer's columns)
            self.forward = _with_signature(self._step, source, loss_given)
        if over_budget not in OVER_BUDGET:
            raise RematError(f"over_budget: expected one of {', '.join(map(repr, OVER_BUDGET))}, got {over_budget!r}")
        self.strategy = strategy
        self.over_budget = over_budget
        self._cuts = cuts
        self._plans: dict[int, ShapePlan] = {}
        self._example = example
        self._loss_given = loss_given
        self._spec = budget
        self.budget: int | None = budget if first is not None else resolve_budget(budget, None)  # bytes once known
        self._first: ShapeCut | None = first
        if first is None:
            args, kwargs, target = example
            first = cuts.cut_for(args, kwargs, target, fit=self)[0]
            self._first = first
        self.chain = first.chain
        example_plan = self._plan(first, example=True)
        self.replay = example_plan.replay
        self.schedule = example_plan.schedule
        self.profile = first.profile

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, nn.Parameter]]:
        """The user's model's parameters, in its order and under its names, then any other the
        chain holds (a ``loss`` module's). An optimizer over them is the one over the model: its
        state dict loads across, and a gradient clip sums the norms in the same order (the
        traced stages' order put a Trainer's clipped steps 1e-8 apart from the plain model's)."""
        seen: set[int] = set()
        if self._source is not None:
            for name, param in self._source.named_parameters(prefix, recurse, remove_duplicate):
                seen.add(id(param))
                yield name, param
        for name, param in super().named_parameters(prefix, recurse, remove_duplicate):
            if id(param) not in seen:
                seen.add(id(param))
                yield name, param

    # NOTE [The wrapped model is the model's state]
    # The wrapped model holds the user's parameters twice over (the chain's stages and the replay
    # of its schedule reach the same tensors), so its own state_dict named each tensor two or more
    # times (safetensors refused to save it). What is saved, loaded and introspected is the user's
    # model: state_dict/load_state_dict are its, an attribute the wrapper lacks is read from it
    # (config, save_pretrained, loss_type, ...), and where the model is a Hugging Face or PEFT model
    # (it has save_pretrained) the wrapper's __class__ is the model's, so that the Trainer, which
    # asks isinstance(model, PreTrainedModel | PeftModel), saves and resumes it as it does the plain
    # model (config.json and tied weights, or a LoRA adapter). type(wrapped) stays RematModel.

    @property
    def __class__(self) -> type:  # noqa: D105 - NOTE [The wrapped model is the model's state]
        source = self.__dict__.get("_source")
        if source is not None and callable(getattr(type(source), "save_pretrained", None)):
            return type(source)
        return type(self)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            source = self.__dict__.get("_source")
            if source is None or name.startswith("__"):
                raise
            return getattr(source, name)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The user's model's state dict (its names, each tensor once as the model has it)."""
        if self._source is None:
            return super().state_dict(*args, **kwargs)
        return self._source.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Loads into the user's model (copied into its tensors, which the chain trains)."""
        if self._source is None:
            return super().load_state_dict(state_dict, strict, assign)
        if assign:
            raise RematError(
                "load_state_dict: assign=True would put new tensors in the model, which the wrapped model's chain"
                " does not hold; load with assign=False (the default), or wrap the loaded model again"
            )
        return self._source.load_state_dict(state_dict, strict)

    def named_children(self) -> Iterator[tuple[str, nn.Module]]:
        """The user's model's children, then the wrapper's own (the chain, its replay): code that
        walks children to name parameters (the Trainer's weight-decay groups) finds the model's
        names, which :meth:`named_parameters` yields."""
        seen: set[int] = set()
        children = [] if self._source is None else list(self._source.named_children())
        for name, child in [*children, *super().named_children()]:
            if id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def train(self, mode: bool = True) -> RematModel:
        """Train or eval mode, for the wrapper and the user's model (an eval-mode call runs it)."""
        super().train(mode)
        if self._source is not None:
            self._source.train(mode)
        return self

    @property
    def least_peak(self) -> int:
        """Bytes: the least peak the example's call trains in, hence the least budget it takes: its
        least-memory schedule's peak plus the side values the call holds (:attr:`ShapePlan.side_bytes`)."""
        return minimum_budget(self.profile) + self._first.side_bytes

    @property
    def store_all_peak(self) -> int:
        """Bytes: the example's call's peak when it stores every stage: the store-all peak plus the
        side values; a budget given as a fraction or percentage is of this."""
        return call_store_all_peak(self._first)

    @property
    def predicted_peak(self) -> int:
        """Bytes: the example's call's predicted peak under :attr:`budget` (its plan's)."""
        return self._plan(self._first, example=True).predicted_peak

    least_budget = _renamed("least_budget", "least_peak")
    store_all_budget = _renamed("store_all_budget", "store_all_peak")

    @property
    def plans(self) -> list[ShapePlan]:
        """Every shape's plan made so far, in the order the shapes came (the example's first)."""
        return [self._plans[id(cut)] for cut in self._cuts.all() if id(cut) in self._plans]

    @property
    def retraces(self) -> int:
        """How many cuts were traced and proven after the example's (new shapes and branches)."""
        return self._cuts.retraces

    def plan_for(self, *args: Any, target: Any = None, **kwargs: Any) -> ShapePlan:
        """The plan a call with these inputs runs (cut, proven and solved now if its shape is new);
        refuses, in one line, a shape whose least memory is above the budget."""
        return self._plan(self._cuts.cut_for(args, kwargs, target, fit=self)[0])

    def forward(self, *args: Any, target: Any = None, **kwargs: Any) -> Any:
        """The training step's output, in the model's own form: the loss in the model's output type
        where the model returns one carrying it (a Hugging Face ``ModelOutput``: ``.loss``, ``["loss"]``,
        ``[0]``), else the step's tensor; in eval mode, the model's own call (no step is trained)."""
        return self._step(*args, target=target, **kwargs)

    # torch.compile(wrapped) (the Trainer's torch_compile=True) runs the call as it is: dynamo would
    # trace remat's own Python (the cut's cache, the replay's autograd.Function), not the model;
    # remat.checkpoint(compile=True) compiles the stages instead (docs/models.md, "Hugging Face's Trainer")
    @torch.compiler.disable
    def _step(self, *args: Any, target: Any = None, **kwargs: Any) -> Any:
        if not self.training and self._source is not None:
            if target is not None:
                raise RematError("target: an eval-mode call runs the model itself, which takes no target")
            return self._source(*args, **kwargs)
        loss = self._replayed(args, kwargs, target)
        form = self._forms.get("example")
        return loss if form is None else answer(form, loss)

    def _replayed(self, args: tuple, kwargs: dict, target: Any) -> torch.Tensor:
        cut, x = self._cuts.cut_for(args, kwargs, target, fit=self)
        plan = self._plan(cut)
        if plan.least:
            logger.warning(
                "remat: a batch of shapes %s needs %s, above the budget %s; it runs under the least-memory schedule"
                " (over_budget='least')",
                cut.signature.text(),
                format_size(plan.predicted_peak),
                format_size(self.budget),
            )
        # a size first run here (a general cut, a predicted profile) may fail in the model itself
        with memory_phase("a training step's forward (the replay of its schedule)", self.budget):
            with one_line_errors(f"a batch's inputs ({described(args, kwargs)})", traced_location):
                return plan.replay(x)

    @property
    def memory_budget(self) -> int | str:
        """The budget for an out-of-memory line (:class:`~remat.api.shapes.Fit`): bytes, or what
        the user gave while the example's store-all peak is not yet measured."""
        if self.budget is not None:
            return self.budget
        return f"{self._spec} of the store-all peak, not yet measured"

    def admit(self, cut: ShapeCut, example: bool) -> None:
        """NOTE [Order of a new cut]: refuse ``cut`` in one line, before its proof or any step, when
        the budget is below the least it trains in (:attr:`least_peak`'s definition); a shape
        after the example's runs its least-memory schedule instead under ``over_budget="least"``.
        The example's store-all peak turns a fraction of it into bytes."""
        if self.budget is None:
            self.budget = resolve_budget(self._spec, call_store_all_peak(cut))
        need = minimum_budget(cut.profile) + cut.side_bytes
        if need <= self.budget:
            return
        if example:
            raise self._below_least(cut, need)
        if self.over_budget == "refuse":
            raise self._refusal(cut, None, example=False)

    def chain_step(self, cut: ShapeCut, call: tuple, example: bool) -> Callable[[], torch.Tensor]:
        """The replay of the schedule that will train ``cut``, on ``call``: the chain's half of its
        proof (solved now, and kept as the cut's plan)."""
        plan = self._plan(cut, example)
        args, kwargs, target = call
        return lambda: plan.replay(cut.chain.bind(*args, target=target, **kwargs))

    def _below_least(self, cut: ShapeCut, need: int) -> InfeasibleBudgetError:
        side = cut.side_bytes
        detail = f"the call's side values (masks) take {side} bytes of it; " if side else ""
        detail += "pass a budget of at least that; refused before the proof or any step ran"
        bound = "exact" if self.strategy == "optimal" else "at least"
        return InfeasibleBudgetError(self.strategy, self.budget, need, detail, bound)

    def _plan(self, cut: ShapeCut, example: bool = False) -> ShapePlan:
        plan = self._plans.get(id(cut))
        if plan is not None and plan.cut is cut:  # a plan holds its cut, so no live id is reused
            return plan
        solved = next((p for p in self._plans.values() if _same_cut(p.cut, cut)), None)
        if solved is not None:  # the proof's schedule of this cut, now with its time: not solved twice; a
            # fresh replay of it (the proof's replay ran, and holds what its run left: RNG snapshots)
            replay = RematChain(cut.chain, solved.schedule, cut.profile)
            return self._keep(ShapePlan(cut, solved.schedule, replay, solved.least))
        least = False
        try:  # the side values the call holds come out of the budget first
            with memory_phase("solving the schedule", self.budget):
                schedule = solve(cut.profile, max(0, self.budget - cut.side_bytes), self.strategy)
        except InfeasibleBudgetError as error:
            if example or self.over_budget == "refuse":
                raise self._refusal(cut, error, example) from None
            schedule, least = _least_schedule(cut.profile), True
        finally:
            release_tables()  # NOTE [The first call's host memory] in remat/api/shapes.py
        return self._keep(ShapePlan(cut, schedule, RematChain(cut.chain, schedule, cut.profile), least))

    def _keep(self, plan: ShapePlan) -> ShapePlan:
        cut = plan.cut
        live = {id(c) for c in self._cuts.all()} | {id(cut), id(self._first)}
        self._plans = {k: v for k, v in self._plans.items() if k in live}  # cuts evicted from the cache
        self._plans[id(cut)] = plan
        return plan

    def _refusal(self, cut: ShapeCut, error: InfeasibleBudgetError | None, example: bool) -> RematError:
        side = cut.side_bytes
        if example:  # the strategy's own message, in the whole call's bytes (side values included)
            if not side:
                return error
            least = None if error.min_budget is None else error.min_budget + side
            detail = f"the call's side values (masks) take {side} bytes of it"
            return InfeasibleBudgetError(error.strategy, self.budget, least, detail, error.bound)
        need = minimum_budget(cut.profile) + side
        return RematError(
            f"inputs: a batch of shapes {cut.signature.text()} needs at least {format_size(need)} ({need} bytes)"
            f" under remat, above the budget {format_size(self.budget)} ({self.budget} bytes); refused before its"
            " step ran (pass over_budget='least' to run such batches under the least-memory schedule)"
        )

    def with_budget(self, budget: int | float | str, strategy: str | None = None) -> RematModel:
        """The same model, cuts and profiles, solved again for another ``budget`` (no re-profiling);
        a fraction or percentage is of the example's store-all peak (:attr:`store_all_peak`)."""
        bytes_ = resolve_budget(budget, self.store_all_peak)
        return RematModel(
            self._cuts,
            bytes_,
            check_strategy(strategy or self.strategy),
            self._example,
            self._loss_given,
            self.over_budget,
            self._source,
            first=self._first,
            forms=self._forms,
        )

    def report(self, steps: int = 3, warmup: int = 1) -> Any:
        """Predicted vs measured peak memory (bytes) and step time (ms) of the user's step on the
        example input (:func:`remat.replay.report.compare`); print it with ``.table()``. The step
        is the whole call, so the side values it computes (masks) are measured, and predicted.
        Its forward runs under the autocast state the example was cut under, in an autocast region
        of its own when ``report()`` is called outside one (call it there: inside one, the region's
        cache already holds the weights' casts, and the step is measured without them).

        The step measured is the one this model trains (``Report.step``, a line of the table):
        ``loss = self(x, target=y); loss.backward()`` with the ``loss=`` given (and its example
        target), the model's own loss (Hugging Face ``labels``) held the same way, or, when the
        step ends in the model's output, the documented default ``(self(x) * r).sum()``."""
        check_count("steps", steps, 1)
        check_count("warmup", warmup, 0)
        args, kwargs, target = self._example
        autocast = self._first.signature.autocast
        with autocast.entered():
            x = self.chain.bind(*args, target=target, **kwargs)
        kind = "loss" if self._loss_given else None

        def call() -> torch.Tensor:  # the user's whole call: its side values are made in the step
            # the forward in an autocast region of the example's state, the backward outside: the
            # loop torch's AMP recipe gives (NOTE [Autocast's weight-cast cache])
            with autocast.entered():
                return self._replayed(args, target=target, kwargs=kwargs)

        side = self._first.side_bytes
        return compare(
            self.profile,
            self.schedule,
            self.replay,
            x,
            steps=steps,
            warmup=warmup,
            kind=kind,
            call=call,
            side_bytes=side,
            autocast=autocast,
        )


__all__ = ["OVER_BUDGET", "RematModel", "ShapePlan"]
