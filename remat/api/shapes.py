"""One wrapped model for every batch a loader gives: a cut, proven equal to the model, per input
signature and mask branch, and its profile, measured or predicted (docs/models.md, "Batches of
other shapes").

A traced cut is specialised to the dtypes and constants of the call it was traced on, to the
branch transformers' mask code took on it (:mod:`remat.rewrite.branches`), and to its shapes but
for the dimensions it is general in. Cuts are kept per signature, at most ``limit`` signatures
(the least recently used goes first, and is cut again if it comes back).

NOTE [Cuts general in a size]
The first call is traced for its own sizes. A call of a new :class:`Signature` is served, in this
order, by a cut of its signature that takes its branch; by a general cut whose fixed sizes, shape
guard and branch take it (no trace: only a profile, usually predicted, and a solve); else by a new
trace, asked to stay general in the dimensions where the call differs from a signature already
cut (a sequence length, a batch size: NOTE [Dimensions a trace is general in]). A general cut is
proven on the call it was traced on, and on the first call of another size it serves, before
that call runs. If that second proof refuses it, the call is traced for its own sizes: should the
model itself fail on the call, that is its one-line error and the general cut stays; else the
general cut differs from the model at that size, so it is dropped and every later new signature
is traced for its own sizes. So a re-trace happens for the first call, for the first call that
differs in a new set of dimensions, for each new mask branch, and for a call outside a general
cut's guard (a size of 1, a size the model's code fixed).

NOTE [Sizes a general cut is sampled at]
Right after a general cut is traced on a call whose general dimensions hold one size x, it is run
on that call cut down along those dimensions (the first tokens of every row, the first rows of a
batch, a crop of an image) to x/2, x/4, x/8 and x/16 (the range below x), then 3x/4, 3x/8, 7x/8
and 5x/8, until 4 sizes are measured: with the traced call's, the 5 sizes that fit_growth needs
to tell every degree up to cubic, and to call a field piecewise linear. The first of these its
guard and branch take and the model runs is its proof on a second size; each is a point of the
growth model (NOTE [Profiles of new shapes]). Their cost joins the trace's (a first-seen set of
dimensions or mask branch), so the lengths that come later, inside the measured range, are
predicted from the start instead of being measured one by one. A size the model does not take,
or that takes the other branch, is skipped: a padded batch cut down to x/4 often has no padding
left (its shortest row is longer), so the sizes above x/2 are what its branch keeps. If none is
left, the cut is proven on the first call of another size it serves.

NOTE [Profiles of new shapes]
A new signature's profile is *predicted* instead of measured when it lies on a line of measured
ones: the signatures differ only in dimensions that all hold one size ``x`` (a sequence length in
``input_ids``, ``attention_mask`` and ``labels``; a batch size), with the same branch. Through
three or more measured sizes of that family, :func:`remat.solver.plan.fit_growth` fits every
field with the lowest polynomial degree that reproduces the other measured sizes exactly (times
by least squares), as ``remat plan`` does. A prediction is used only for ``x`` inside the
measured range: there a piecewise-linear field (a maximum of linear terms, which is convex) is
interpolated by a chord, which lies above it, so a predicted size is never below the real one;
outside it, and while the fit needs another size to tell a degree, the new signature is measured
and joins its family.

NOTE [Order of a new cut]
A new cut is made in the order that keeps the first call within the budget and refuses early:
trace and cut (unproven) -> profile (stage by stage, or predicted) -> the budget in bytes (the
first cut's profile gives the store-all peak a fraction is of) -> refused in one line when the
budget is below the least the cut trains in (``minimum_budget`` + side values), before any step
-> the schedule solved -> the proof, whose chain half is the replay of that schedule (the path
that will train: shared modules' gradients summed as the replay sums them) -> the cut is kept.
A shape above the budget under ``over_budget="least"`` is proven with its least-memory schedule.
Each phase turns an allocation failure into one line (:func:`remat.measure.oom.memory_phase`).

NOTE [The first call's host memory]
Beside the device memory the budget bounds, a first call holds host state: TorchDynamo's graph
and the stages' fx modules (kept: the cut is made of them), the profile's records, the solver's
DP tables, and the proof's copies off the device (files). Where the device is the CPU (and under
an address-space cap, as benchmarks/does_not_fit.py emulates a device's limit), that state comes
out of the same memory. The solver's filled tables are O(stages**2 * slots) bytes (tens of MiB
at 200 stages) and only speed up a later solve of the same profile, so they are dropped after
each solve (:func:`remat.solver.chain.dp.cache.release_tables`; the minima and fronts,
small, are kept). Measured on the residual MLP of 200 blocks (benchmarks/does_not_fit.py's
resmlp row, budget 0.5, uncapped, one thread, ``MALLOC_MMAP_THRESHOLD_=32768``): VmSize above the
call's start after the solve +95 MiB before, +58 MiB after; VmRSS +86 before, +44 after.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.utils import _pytree as pytree

from remat.api.inputs import described
from remat.measure.memory import allocated_bytes, storage_key
from remat.measure.oom import OutOfMemory, memory_phase
from remat.model_errors import one_line_errors
from remat.profile.chain import profile_chain
from remat.rewrite.branches import OtherBranchError, pinned_verdicts
from remat.runtime.compiled import CompiledChain, compile_chain
from remat.runtime.core import AutocastState
from remat.schedules import ChainProfile, RematError
from remat.solver.chain.dp.cache import release_tables
from remat.solver.plan import GrowthModel, fit_growth
from remat.trace.stage_errors import traced_location
from remat.trace.stages import CutChain, leaf_check

MIN_POINTS = 3  # fit_growth fits 2 sizes and checks 1 at the least
# NOTE [Sizes a general cut is sampled at]: x/2, x/4, x/8, x/16 first (the range below x), then
# 3x/4, 3x/8, 7x/8, 5x/8 (sizes a padded batch cut down keeps its padding at), until SAMPLES are
# measured: with the traced call, the 5 sizes fit_growth needs to tell every degree up to 3
SAMPLE_SIXTEENTHS = (8, 4, 2, 1, 12, 6, 14, 10)
SAMPLES = 4
# the proof's parts an out-of-memory line names (remat.trace.proof's functions)
PROOF_PARTS = {"check_forward_kinds": "checking each stage's forward kinds", "_step": "running one training step"}


@dataclass(frozen=True)
class Signature:
    """What a call's flattened inputs (``(args, kwargs, target)``) look like: the key of its cut.

    ``shapes`` holds each tensor leaf's shape, in leaf order; ``rest`` everything else a trace is
    specialised to (the pytree structure, each tensor's index, dtype and device, the constants
    and which leaves are the same tensor, the autocast state it runs under) or profiled for (which
    leaves require grad: the chain input's gradient is measured only where it is computed).

    The autocast state (each enabled device type's dtype, and the cache flag;
    :meth:`AutocastState.key`) is the last part of ``rest``: a trace records the dtypes it saw
    (``x.to(h.dtype)`` is ``x.to(torch.float32)`` in an fp32 trace), and a profile the sizes, so a
    call under ``torch.autocast`` gets a cut traced, proven and profiled under that state."""

    shapes: tuple[tuple[int, ...], ...]
    rest: tuple

    @classmethod
    def of(cls, leaves: list[Any], spec: Any) -> Signature:
        """The signature of a call's flattened inputs: :func:`leaf_check`'s record (the one that
        ``bind`` validates against), with the shapes apart and every part hashable."""
        check = leaf_check(leaves, spec)
        shapes = tuple(shape for _, shape, _, _ in check.tensors)
        tensors = tuple((i, str(dtype), device) for i, _, dtype, device in check.tensors)
        constants = tuple((i, repr(value)) for i, value in check.constants)
        autocast = AutocastState.current().key()
        return cls(shapes, (repr(check.spec), tensors, constants, check.aliases, check.grads, autocast))

    @property
    def autocast(self) -> AutocastState:
        """The autocast state of the calls this signature names."""
        return AutocastState.of_key(self.rest[-1])

    def text(self) -> str:
        """The tensor shapes, e.g. ``(4, 128), (4, 128)``, and the autocast dtype if any."""
        shapes = ", ".join(str(s) for s in self.shapes)
        enabled = self.rest[-1][0] if self.rest[-1] else ()
        casts = ", ".join(f"{kind} {str(dtype).removeprefix('torch.')}" for kind, dtype in enabled)
        return f"{shapes} under autocast ({casts})" if casts else shapes


def _own_leaves(tree: Any) -> Any:
    """``tree`` with every tensor replaced by a detached alias of the same storage that requires
    grad as the original does (one alias per tensor, so inputs that are the same tensor stay so)."""
    aliases: dict[int, torch.Tensor] = {}

    def own(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        if id(leaf) not in aliases:
            aliases[id(leaf)] = leaf.detach().requires_grad_(leaf.requires_grad)
        return aliases[id(leaf)]

    return pytree.tree_map(own, tree)


Positions = frozenset  # of (tensor leaf, dimension)


def along(a: Signature, b: Signature) -> tuple[Positions, int, int] | None:
    """``(positions, x_a, x_b)`` when ``a`` and ``b`` differ only in dimensions that all hold one
    size in ``a`` (``x_a``) and one other size in ``b`` (``x_b``); None otherwise."""
    if a.rest != b.rest or [len(s) for s in a.shapes] != [len(s) for s in b.shapes]:
        return None
    diff = [
        (k, d)
        for k, (sa, sb) in enumerate(zip(a.shapes, b.shapes, strict=True))
        for d, (u, v) in enumerate(zip(sa, sb, strict=True))
        if u != v
    ]
    xs = {a.shapes[k][d] for k, d in diff}
    ys = {b.shapes[k][d] for k, d in diff}
    if not diff or len(xs) != 1 or len(ys) != 1:
        return None
    return frozenset(diff), xs.pop(), ys.pop()


@dataclass(frozen=True, eq=False)
class ShapeCut:
    """One signature's (and branch's) cut and profile.

    Attributes:
        signature: the calls it serves.
        chain: the cut, proven equal to the model on a call of that signature, or a cut general in
            the sizes that differ, proven on two sizes (NOTE [Cuts general in a size]).
        profile: measured on that call, or predicted (NOTE [Profiles of new shapes]).
        source: ``"measured"`` or ``"predicted (<growth> in x, from x = a, b, c)"``.
        branch: the mask-branch verdicts pinned in the trace (empty: none).
        seconds: wall time to make it: trace, proof, profile or prediction (s).
        side_bytes: bytes of the side values ``bind`` computes for a call (masks, rotary tables),
            held through the step beside the schedule's peak, outside the profile (docs/models.md).
    """

    signature: Signature
    chain: CutChain
    profile: ChainProfile
    source: str
    branch: tuple
    seconds: float
    side_bytes: int = 0

    @property
    def measured(self) -> bool:
        return self.source == "measured"


class _NeedsAnotherSize(Exception):
    """fit_growth asked for a size that was not measured."""


def _no_new_size(x: int) -> ChainProfile:
    raise _NeedsAnotherSize(x)


def _family(new: Signature, branch: tuple, measured: list[ShapeCut]) -> tuple[dict[int, ChainProfile], int]:
    """The measured profiles on a line through ``new`` (same branch, differing only in one size
    x), the line with the most of them: ({x: profile}, new's x); ({}, 0) when there is none."""
    best: tuple[dict[int, ChainProfile], int] = ({}, 0)
    for anchor in measured:
        if anchor.branch != branch or (step := along(anchor.signature, new)) is None:
            continue
        positions, x_anchor, x_new = step
        members = {x_anchor: anchor.profile}
        for other in measured:
            hop = along(anchor.signature, other.signature) if other.branch == branch else None
            if hop is not None and hop[0] == positions:
                members[hop[2]] = other.profile
        if len(members) > len(best[0]):
            best = (members, x_new)
    return best


def predicted_profile(
    new: Signature, branch: tuple, names: list[str], measured: list[ShapeCut]
) -> tuple[ChainProfile, str] | None:
    """``new``'s profile from a growth model of its family (NOTE [Profiles of new shapes]), or None
    when it must be measured: fewer than 3 measured sizes on its line, a size outside their range,
    a degree the sizes cannot tell, or other stage names than ``names`` (the new cut's)."""
    family, x = _family(new, branch, measured)
    sizes = sorted(family)
    if len(sizes) < MIN_POINTS or not sizes[0] < x < sizes[-1]:
        return None
    if any([s.name for s in p.stages] != names for p in family.values()):
        return None
    try:
        growth: GrowthModel = fit_growth(_no_new_size, sizes, time_rtol=None, known=family)
    except (_NeedsAnotherSize, RematError):
        return None
    sizes_text = ", ".join(map(str, sizes))
    return growth.profile_at(x), f"predicted ({growth.kind} in the varying size, from sizes {sizes_text})"


class Fit(Protocol):
    """What a new cut must fit before it is proven (NOTE [Order of a new cut]): the wrapped
    model's budget, its refusal, and the step that will train the cut."""

    @property
    def memory_budget(self) -> int | str | None:
        """The budget for an out-of-memory line: bytes, or a text while it is not yet in bytes."""

    def admit(self, cut: ShapeCut, example: bool) -> None:
        """Refuse ``cut`` in one line (:class:`RematError`) when the budget cannot train it; the
        ``example``'s (the model's first cut) turns a fraction of its store-all peak into bytes."""

    def chain_step(self, cut: ShapeCut, call: tuple, example: bool) -> Callable[[], torch.Tensor]:
        """The step the proof runs for the chain on ``call`` (args, kwargs, target): the replay of
        the schedule that will train ``cut``, solved now."""


@dataclass(eq=False)
class _General:
    """A cut general in some input dimensions (NOTE [Cuts general in a size]) and the signatures
    it was proven on (the one it was traced on, then the first other one it serves)."""

    chain: CutChain
    proven_on: list[Signature]


class ShapeCuts:
    """The cuts of one model, per signature and branch, made on demand (see the module docstring).

    ``make_chain(args, kwargs, target, dynamic)`` traces and cuts the model on a call (unproven),
    general in the ``dynamic`` input dimensions where the model lets it; ``prove(chain, args,
    kwargs, target, chain_step)`` proves a cut on a call, the chain's half of the step run by
    ``chain_step`` (None: the chain as it is). A new cut is profiled, fitted to the budget
    (:class:`Fit`) and proven in that order (NOTE [Order of a new cut]). A measured profile takes
    ``repeats`` timed runs after ``warmup`` (:func:`profile_chain`), on stages compiled first when
    ``compile`` (compiled stages are per signature: no general cuts then). Not thread-safe."""

    def __init__(
        self,
        make_chain: Callable[[tuple, dict, Any, frozenset], CutChain],
        prove: Callable[[CutChain, tuple, dict, Any, Callable[[], torch.Tensor] | None], None],
        repeats: int,
        warmup: int,
        compile: bool,  # noqa: A002 - remat.checkpoint's option
        name: str,
        limit: int = 256,
    ) -> None:
        self._make_chain = make_chain
        self._prove = prove
        self._repeats = repeats
        self._warmup = warmup
        self._compile = compile
        self._name = name
        self._limit = limit
        self._cuts: OrderedDict[Signature, list[ShapeCut]] = OrderedDict()
        self._general: list[_General] = []
        self._specialise = False  # a general cut failed its proof at a second size: trace per size
        self.retraces = 0  # cuts traced after the first

    def __len__(self) -> int:
        return sum(len(cuts) for cuts in self._cuts.values())

    def all(self) -> list[ShapeCut]:
        """Every cut held, oldest signature first."""
        return [cut for cuts in self._cuts.values() for cut in cuts]

    def cut_for(self, args: tuple, kwargs: dict, target: Any, fit: Fit | None = None) -> tuple[ShapeCut, torch.Tensor]:
        """The cut serving this call (made now if none does, fitted to ``fit`` before its proof)
        and the call bound to it (its chain input a_0; the side values are set)."""
        leaves, spec = pytree.tree_flatten((args, kwargs, target))
        signature = Signature.of(leaves, spec)
        for cut in self._cuts.get(signature, []):
            try:
                x = cut.chain.bind(*args, target=target, **kwargs)
            except OtherBranchError:
                continue
            self._cuts.move_to_end(signature)
            return cut, x
        made = self._served(signature, args, kwargs, target, fit) or self._new(signature, args, kwargs, target, fit)
        self._cuts.setdefault(signature, []).append(made)
        self._cuts.move_to_end(signature)
        while len(self._cuts) > self._limit:
            self._cuts.popitem(last=False)
        return made, made.chain.bind(*args, target=target, **kwargs)

    @staticmethod
    def _admitted(cut: ShapeCut, call: tuple, fit: Fit | None, example: bool, prove: bool) -> Callable | None:
        """NOTE [Order of a new cut]: ``cut`` (profiled) refused in one line if the budget cannot
        train it, before anything runs it again; else, when it is to be ``prove``n, the replay of
        the schedule that will train it on ``call`` (None: no fit, or no proof)."""
        if fit is None:
            return None
        try:
            with memory_phase("solving the schedule", fit.memory_budget):
                fit.admit(cut, example)
                return fit.chain_step(cut, call, example) if prove else None
        finally:
            release_tables()  # NOTE [The first call's host memory]

    def _proven(self, cut: ShapeCut, call: tuple, fit: Fit | None, step: Callable | None) -> None:
        """``cut`` proven equal to the model on ``call``, its chain's half run by ``step``. With
        compiled stages the eager cut is proven, bit for bit, and its chain's half is the cut run
        plainly: each compiled stage is checked against its eager stage within a tolerance
        (:func:`compile_chain`), so a replay of them is not bit-equal to the model by design."""
        chain = cut.chain
        if isinstance(chain, CompiledChain):
            chain, step = chain.source, None
        with memory_phase("proving the cut equal to the model", _budget(fit), parts=PROOF_PARTS):
            self._prove(chain, *call, step)

    def _served(self, signature: Signature, args: tuple, kwargs: dict, target: Any, fit: Fit | None) -> ShapeCut | None:
        """A cut of this call from a general cut that takes it (its sizes, guard and branch), with
        a new profile and no trace; None when none does."""
        for general in reversed(self._general):
            if general.proven_on[0].rest[-1] != signature.rest[-1]:  # traced under another autocast state
                continue
            start = time.perf_counter()
            try:
                general.chain.bind(*args, target=target, **kwargs)
            except RematError:  # another fixed size, the guard, another branch: not this cut's call
                continue
            own = _own_leaves((args, kwargs, target))
            with one_line_errors(f"a batch's inputs ({described(args, kwargs)})", traced_location):
                cut = self._profiled(signature, general.chain, own, start, fit)
            proving = len(general.proven_on) < 2  # NOTE [Cuts general in a size]: a second size, once
            step = self._admitted(cut, own, fit, example=False, prove=proving)  # a refusal is the call's
            if proving:
                try:
                    self._proven(cut, own, fit, step)
                except OutOfMemory:
                    raise
                except RematError:
                    # this call traced for its own sizes: its one-line error if the model itself
                    # fails on it (the general cut stays); else the general cut differs from the
                    # model at this size, so it goes, and later calls are traced per size too
                    cut = self._new(signature, args, kwargs, target, fit, frozenset())
                    self._general.remove(general)
                    self._specialise = True
                    return cut
                general.proven_on.append(signature)
            return cut
        return None

    def _new(
        self,
        signature: Signature,
        args: tuple,
        kwargs: dict,
        target: Any,
        fit: Fit | None,
        dimensions: frozenset | None = None,
    ) -> ShapeCut:
        """A new trace of this call, general in ``dimensions`` (default :meth:`_dimensions`):
        traced and cut, profiled, fitted to the budget, then proven (NOTE [Order of a new cut])."""
        start = time.perf_counter()
        example = not self._cuts and not self._general  # the model's first cut
        # the trace, the proof and the profile run on leaves of their own: their backwards must
        # not reach the user's tensors (a call's input that requires grad got 3x its gradient)
        own = _own_leaves((args, kwargs, target))
        dims = self._dimensions(signature) if dimensions is None else dimensions
        with memory_phase("tracing and cutting the model", _budget(fit)):
            chain = self._make_chain(*own, dims)
        if not example:
            self.retraces += 1
        cut = self._profiled(signature, chain, own, start, fit)
        self._proven(cut, own, fit, self._admitted(cut, own, fit, example, prove=True))
        if chain.dynamic is not None:
            general = _General(chain, [signature])
            self._general.append(general)
            del self._general[: -self._limit]  # the oldest first out, as signatures go
            self._sample(general, signature, own, fit)
        return dataclasses.replace(cut, seconds=time.perf_counter() - start)

    def _sample(self, general: _General, signature: Signature, own: tuple, fit: Fit | None) -> None:
        """NOTE [Sizes a general cut is sampled at]: prove ``general`` on a second size and measure
        it at shorter sizes, on this call cut down along its general dimensions."""
        sizes = {signature.shapes[k][d] for k, d in _positions(signature, general.chain.dynamic.dims)}
        if len(sizes) != 1:  # a line needs one varying size (NOTE [Profiles of new shapes])
            return
        x = sizes.pop()
        taken = 0
        for size in dict.fromkeys(x * k // 16 for k in SAMPLE_SIXTEENTHS):
            if taken == SAMPLES:
                break
            if not 2 <= size < x:
                continue
            call = _cut_down(own, general.chain.dynamic.dims, size)
            leaves, spec = pytree.tree_flatten(call)
            sampled = Signature.of(leaves, spec)
            if sampled in self._cuts:
                continue
            try:  # its guard and its branch take the call, the model runs it, the cut equals it
                general.chain.bind(*call[0], target=call[2], **call[1])
                cut = self._profiled(sampled, general.chain, call, time.perf_counter(), fit)
                proving = len(general.proven_on) < 2
                step = self._admitted(cut, call, fit, example=False, prove=proving)
                if proving:
                    self._proven(cut, call, fit, step)
                    general.proven_on.append(sampled)
            except OutOfMemory:
                raise
            except Exception:  # noqa: BLE001 - a size this model or this cut does not take: not sampled
                continue
            self._cuts.setdefault(sampled, []).append(cut)
            taken += 1

    def _dimensions(self, signature: Signature) -> frozenset[tuple[int, int]]:
        """The input dimensions (leaf index, dimension) a new trace for ``signature`` is asked to
        keep general: a general cut's, with those in which ``signature`` differs from the call it
        was traced on (a batch size beside an image size); else those in which it differs from a
        signature already cut, on a line. None for the first call, or with compiled stages."""
        if self._compile or self._specialise:
            return frozenset()
        leaf = [i for i, _, _ in signature.rest[1]]  # tensor k is flattened leaf leaf[k]
        for general in reversed(self._general):
            base = general.proven_on[0]
            if base.rest == signature.rest and [len(s) for s in base.shapes] == [len(s) for s in signature.shapes]:
                differ = {
                    (leaf[k], d)
                    for k, (a, b) in enumerate(zip(base.shapes, signature.shapes, strict=True))
                    for d, (u, v) in enumerate(zip(a, b, strict=True))
                    if u != v
                }
                return general.chain.dynamic.dims | differ
        for known in reversed(self._cuts):
            step = along(known, signature)
            if step is not None:
                return frozenset((leaf[k], d) for k, d in step[0])
        return frozenset()

    def _profiled(self, signature: Signature, chain: CutChain, own: tuple, start: float, fit: Fit | None) -> ShapeCut:
        """``signature``'s cut on ``chain``: its profile predicted (NOTE [Profiles of new shapes]) or
        measured on the call ``own``."""
        args, kwargs, target = own
        x = chain.bind(*args, target=target, **kwargs)
        branch = pinned_verdicts(chain.plan.gm)
        if self._compile:
            chain = compile_chain(chain, x)
        side_bytes = _side_bytes(chain, args, kwargs, target)
        measured = [c for c in self.all() if c.measured]
        guess = predicted_profile(signature, branch, list(chain.names), measured)
        if guess is None:
            batch = int(x.shape[0]) if x.dim() > 0 else 1
            name = f"{self._name}-b{batch}-{x.device.type}"
            # a cut already measured at another size is warm, and a size measured on it is mostly
            # a point of its growth fit (least squares over the sizes): timed once, no warmup
            warm = any(c.measured and c.chain is chain for c in measured)
            repeats, warmup = (1, 0) if warm else (self._repeats, self._warmup)
            # g_0 only where the call's input requires grad (which is part of its signature)
            with memory_phase("profiling the cut", _budget(fit)):
                profile = profile_chain(chain, x, name=name, repeats=repeats, warmup=warmup, input_grad=x.requires_grad)
            source = "measured"
        else:
            profile, source = guess
        metadata = {
            **profile.metadata,
            "cut": "traced (TorchDynamo), proven equal",
            "side_bytes": side_bytes,
            "input_shapes": [list(s) for s in signature.shapes],
            "profile_source": source,
        }
        profile = dataclasses.replace(profile, metadata=metadata)
        return ShapeCut(signature, chain, profile, source, branch, time.perf_counter() - start, side_bytes)


def _budget(fit: Fit | None) -> int | str | None:
    return None if fit is None else fit.memory_budget


def _positions(signature: Signature, dims: frozenset[tuple[int, int]]) -> list[tuple[int, int]]:
    """``dims`` (flattened leaf, dimension) as (tensor k of ``signature.shapes``, dimension)."""
    tensor_of = {leaf: k for k, (leaf, _, _) in enumerate(signature.rest[1])}
    return [(tensor_of[leaf], d) for leaf, d in dims if leaf in tensor_of]


def _cut_down(call: tuple, dims: frozenset[tuple[int, int]], size: int) -> tuple:
    """``call`` with every tensor leaf's ``dims`` narrowed to their first ``size`` entries (a
    shorter sequence, a smaller batch, a crop), each a contiguous tensor of its own that requires
    grad as the leaf does; tensors that were one stay one."""
    by_leaf: dict[int, list[int]] = {}
    for leaf, d in dims:
        by_leaf.setdefault(leaf, []).append(d)
    leaves, spec = pytree.tree_flatten(call)
    made: dict[int, torch.Tensor] = {}
    out = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor) and i in by_leaf:
            if id(leaf) not in made:
                narrowed = leaf.detach()
                for d in by_leaf[i]:
                    narrowed = narrowed.narrow(d, 0, min(size, narrowed.shape[d]))
                made[id(leaf)] = narrowed.contiguous().requires_grad_(leaf.requires_grad)
            leaf = made[id(leaf)]
        out.append(leaf)
    return pytree.tree_unflatten(out, spec)


def _side_bytes(chain: CutChain, args: tuple, kwargs: dict, target: Any) -> int:
    """Bytes the side values ``bind`` made for this call take (masks, rotary tables, ...): the
    storages of the context's tensors, each once (:func:`~remat.measure.memory.storage_key`),
    less those allocated before the call: the call's own inputs and the model's parameters and
    buffers, views of them included (``self.pe[:, :T]``, a slice of token ids cost nothing:
    docs/model.md, "Every byte counted once"). On CUDA each storage as the allocator rounds it."""
    inputs = [v for v in pytree.tree_leaves((args, kwargs, target)) if isinstance(v, torch.Tensor)]
    existing = {storage_key(t) for t in (*inputs, *chain.parameters(), *chain.buffers())}
    sides = [v for v in pytree.tree_leaves(list(chain.context.values.values())) if isinstance(v, torch.Tensor)]
    made: dict[Any, int] = {}
    for t in sides:
        key = storage_key(t)
        if key is not None and key not in existing:
            made.setdefault(key, allocated_bytes(t))
    return sum(made.values())


__all__ = ["ShapeCut", "ShapeCuts", "Signature", "along", "predicted_profile"]
