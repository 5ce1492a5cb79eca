"""What the chain replay and the graph replay share: recomputing a piece exactly, handing the
output gradient back, and delivering parameter gradients the way the caller's backward asks.

A *piece* is what a replay runs as one unit (a chain stage, or a piece of a traced graph). Both
replays (:mod:`remat.replay.chain`, :mod:`remat.replay.graph`) keep their own op
semantics and use this module for everything a recomputation must preserve (docs/executor.md,
"What a recomputation preserves"), as ``torch.utils.checkpoint`` does for its segments:

* the autocast state of every device type (enabled flag, dtype) and the autocast cache flag,
  captured at the piece's first forward in the step and re-entered for every recomputation, so a
  bf16-autocast recompute runs in bf16 even when the backward runs outside ``torch.autocast``;
* the RNG state of the CPU and of every accelerator device the step uses, saved before the
  piece's first forward and restored for each recomputation of *every* piece (no list of random
  ops: a piece that draws from any generator redraws the same numbers); the global RNG is left
  where it was;
* the piece's buffers (BatchNorm running statistics): restored after a recomputation, so they are
  updated once per step;
* how a piece reads an input it differentiates: under autocast through :func:`grad_input`, a
  non-leaf alias of the leaf that collects the gradient, because autocast caches its casts of leaves that require
  grad (meant for weights, for the whole autocast region): a piece reading the leaf itself would
  cast an activation once for all its bf16 uses and sum their gradients in bf16, where the plain
  model casts each use and sums in fp32 (BERT's layer input feeds q, k and v: 6e-6 off);
* parameter gradients: :class:`ReplayFunction` takes the parameters as inputs, and
  :class:`GradSink` asks autograd's engine, per parameter, what the running backward wants:
  accumulate into ``.grad`` (``loss.backward()``, ``backward(inputs=...)``; done inside, one piece
  at a time, through autograd's own ``AccumulateGrad``, so its hooks fire and no extra gradient
  memory is held), return it (``torch.autograd.grad``: summed over pieces and returned by the
  Function, so the engine hands it to the caller), or leave it alone (not asked for); a parameter
  several pieces read sums its uses in plain autograd's order (NOTE [Shared parameters under
  gradient accumulation]);
* an expanded gradient at a cut (a step ending in a bare ``.sum()``) handed on with autograd's
  strides (NOTE [Gradient layout at a cut]).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils.dlpack
from torch.autograd.graph import _get_grad_fn_or_grad_acc

from remat.measure.memory import notify_resized, untracked
from remat.measure.state import RngState
from remat.schedules import RematError
from remat.trace.boundary import Boundary, can_have_grad, each

# Device types torch.autocast knows besides "cpu"; only those whose backend is present are used.
_AUTOCAST_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "xla")


@dataclass(frozen=True)
class AutocastState:
    """Autocast as a piece's first forward saw it: (device type, enabled, dtype) per device type."""

    devices: tuple[tuple[str, bool, torch.dtype], ...]
    cache_enabled: bool

    @staticmethod
    def current() -> AutocastState:
        """The calling thread's autocast state."""
        devices = tuple(
            (kind, torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))
            for kind in _AUTOCAST_TYPES
            if torch.amp.is_autocast_available(kind)
        )
        return AutocastState(devices, torch.is_autocast_cache_enabled())

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run under exactly this state (disabled types are entered disabled: the backward may run
        inside the caller's own ``torch.autocast``)."""
        with contextlib.ExitStack() as stack:
            for kind, enabled, dtype in self.devices:
                stack.enter_context(
                    torch.autocast(kind, dtype=dtype, enabled=enabled, cache_enabled=self.cache_enabled)
                )
            yield

    def key(self) -> tuple:
        """What a traced cut is specialised to (part of a call's signature, remat.api.shapes): each
        enabled device type with its dtype, and the cache flag when any is enabled; () without
        autocast (a disabled type's dtype and the cache flag then change nothing)."""
        enabled = tuple((kind, dtype) for kind, enabled, dtype in self.devices if enabled)
        return (enabled, self.cache_enabled) if enabled else ()

    @staticmethod
    def of_key(key: tuple) -> AutocastState:
        """The state a :meth:`key` names (every type it does not name disabled)."""
        enabled, cache = key if key else ((), True)
        dtypes = dict(enabled)
        devices = AutocastState.current().devices
        return AutocastState(
            tuple((kind, kind in dtypes, dtypes.get(kind, dtype)) for kind, _, dtype in devices), cache
        )


# NOTE [Autocast's weight-cast cache]
# Under torch.autocast, the first cast of a leaf fp32 tensor that requires grad (a weight) to the
# autocast dtype is cached (per thread) and reused until the outermost autocast region exits,
# whether or not a graph is recorded (no_grad forwards cache too). So in a replay under autocast
# every stage's weight casts would stay allocated from its first forward to the region's end,
# beside what the chain model counts (a 6 x (Linear 512 + Tanh) MLP: +55.7% over the prediction).
# What remat does instead, in the loop torch's AMP recipe gives (`with autocast(): loss =
# model(x)`, then `loss.backward()` outside the region):
# * a forward that records no graph (F_ck, F_n) runs with the cache off (`uncached_casts`): the
#   same values (a cast is a pure function of its weight), and its casts are transients of that
#   forward, freed with it;
# * a recording forward (F_all) keeps the cache, so a weight it uses twice is cast once and its
#   gradients summed as plain autocast sums them; the casts its backward needs are saved tensors
#   (abar), as the chain model counts them;
# * a recomputation in the backward enters the first forward's autocast state (Recomputer) in a
#   region of its own, whose cache is cleared when it ends: what stays is what autograd saved;
# * the profile measures each stage's forwards with the cache off (remat.profile.chain), so a cast
#   is allocated in the measured forward whatever the caller's region has cached already;
# * the profile runs each stage's backward outside autocast (`outside_autocast`), as the recipe's
#   backward runs: inside the region, a backward formula's autocast-listed ops cast again (SDPA's
#   math path with dropout under bf16: +0.37 MB per 3 blocks of backward, -3.5% under the
#   prediction where the profile was run inside the caller's region).
# Left out of the model (measured, docs/models.md "Mixed precision"): a cast a recording forward of
# the forward pass makes but does not save (a bias's) stays cached to the region's end; and a
# backward run inside the autocast region keeps each recorded stage's casts to the region's end.


@contextlib.contextmanager
def uncached_casts() -> Iterator[None]:
    """Autocast's weight-cast cache off inside the block (NOTE [Autocast's weight-cast cache]).

    A forward that records no graph (F_ck, F_n, the profile's non-recording forward) gets the
    same values with or without the cache (a cast is a pure function of the weight), but a cached
    cast stays allocated to the end of the outermost autocast region, recorded or not. Without
    autocast it changes nothing (the flag is global state a compiled stage guards on)."""
    if not AutocastState.current().key():
        yield
        return
    previous = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)
    try:
        yield
    finally:
        torch.set_autocast_cache_enabled(previous)


@contextlib.contextmanager
def outside_autocast() -> Iterator[None]:
    """Every autocast device type off inside the block, as a backward outside the caller's
    ``torch.autocast`` region runs (NOTE [Autocast's weight-cast cache]); nothing changes without
    autocast. The region's cache is kept (a nested region does not clear it on exit)."""
    if not AutocastState.current().key():
        yield
        return
    with AutocastState.of_key(()).entered():
        yield


def accelerator_devices(tensors: Iterable[torch.Tensor]) -> tuple[torch.device, ...]:
    """The distinct non-CPU devices among ``tensors`` (whose generators a recompute must replay)."""
    found: dict[torch.device, None] = {}
    for t in tensors:
        if t.device.type not in ("cpu", "meta"):
            device = t.device if t.device.index is not None else torch.device(t.device.type, 0)
            found.setdefault(device, None)
    return tuple(found)


class BufferSnapshots:
    """Preallocated copies of each piece's buffers and RNG states (no allocation during a step
    once made: they are the replay's own state across steps, like parameter gradients)."""

    def __init__(self, count_rng_reads: bool = False) -> None:
        self._snapshots: dict[int, list[torch.Tensor]] = {}
        self._rng: dict[Any, RngState] = {}
        # True (the chain replay): the step's reads of the generators are counted, and the chain
        # profile covers them (remat.profile.chain.with_recompute_bookkeeping); False (the graph
        # replay, whose profile does not yet): made inside untracked(), set apart by the meters
        self._rng_reads = contextlib.nullcontext if count_rng_reads else untracked

    def rng(self, key: Any, devices: Sequence[torch.device]) -> RngState:
        """The generators' states now, kept in ``key``'s preallocated copy (overwritten). Reading
        them allocates a transient (CPU: the 5,056-byte Mersenne twister state), freed here."""
        with self._rng_reads():
            now = RngState.current(devices)
        kept = now.copy_into(self._rng.get(key))
        self._rng[key] = kept
        return kept

    def get(self, key: int, buffers: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        snaps = self._snapshots.get(key)
        if snaps is None or any(
            s.shape != b.shape or s.dtype != b.dtype or s.device != b.device
            for s, b in zip(snaps, buffers, strict=True)
        ):
            with untracked(), torch.no_grad():
                snaps = [b.detach().clone() for b in buffers]
            self._snapshots[key] = snaps
        return snaps


class Recomputer:
    """Per-step record of each recomputed piece's first forward (RNG, autocast), and the context that
    makes a later run of the piece a faithful recomputation.

    ``recomputed``: the pieces the schedule runs forward more than once (only those need a
    record: store-all holds nothing the plain step does not); ``buffers(key)`` lists a piece's
    buffers.
    """

    def __init__(
        self,
        devices: Sequence[torch.device],
        recomputed: Iterable[int],
        buffers: Callable[[int], Sequence[torch.Tensor]],
        snapshots: BufferSnapshots,
    ) -> None:
        self.devices = tuple(devices)
        self.recomputed = frozenset(recomputed)
        self._buffers = buffers
        self._snapshots = snapshots
        self._first: dict[int, tuple[RngState, AutocastState]] = {}
        self._depth = 0  # recomputations under way (the "now" copy serves the outermost)

    @contextlib.contextmanager
    def running(self, key: int) -> Iterator[None]:
        """Wrap every forward of piece ``key``: remember the first, replay it for the others."""
        if key not in self._first:
            if key in self.recomputed:
                # one preallocated copy per recomputed piece: the step allocates only the
                # transient read of the generators (one per forward of a recomputed piece, before
                # it runs), which the profile folds into the stage's forward transients
                self._first[key] = (self._snapshots.rng(key, self.devices), AutocastState.current())
            yield
            return
        rng, autocast = self._first[key]
        buffers = list(self._buffers(key))
        snaps = self._snapshots.get(key, buffers)
        for buffer, snap in zip(buffers, snaps, strict=True):
            snap.copy_(buffer.data)
        if self._depth == 0:
            rng_now = self._snapshots.rng("now", self.devices)
        else:  # a recomputation inside another (not made by the replays): its own copy
            with untracked():
                rng_now = RngState.current(self.devices)
        self._depth += 1
        rng.restore()
        try:
            with autocast.entered():
                yield
        finally:
            self._depth -= 1
            # through .data: the recomputed graph may have saved a buffer (BatchNorm saves its
            # running stats); restoring must not bump the version counter autograd checks.
            for buffer, snap in zip(buffers, snaps, strict=True):
                buffer.data.copy_(snap)
            rng_now.restore()


def release_output_grad(g: torch.Tensor | None, output: weakref.ref | None) -> None:
    """Free the storage of the output gradient autograd handed the Function's backward, if nobody
    but autograd's own argument tuple can see it (the simulator frees it at its last use, but
    autograd keeps its tuple until the Function's backward returns)."""
    if g is None:
        return
    held = output() if output is not None else None
    if held is not None and held.retains_grad:
        return
    if g._is_view() or g.untyped_storage().nbytes() != g.numel() * g.element_size():
        return
    storage = g.untyped_storage()  # this Python storage object holds one reference itself
    if torch._C._storage_Use_Count(storage._cdata) != 2:
        return
    with contextlib.suppress(RuntimeError):
        storage.resize_(0)
        notify_resized(g)


def _engine_wants(param: torch.Tensor) -> str:
    """'accumulate', 'return' or 'skip': what the running backward does with ``param``'s gradient."""
    node = _get_grad_fn_or_grad_acc(param)
    try:
        return "accumulate" if torch._C._will_engine_execute_node(node) else "skip"
    except RuntimeError:
        # torch raises exactly for a leaf that torch.autograd.grad captures (it is not executed)
        return "return"


def _holds_gradient(param: torch.Tensor) -> bool:
    """Whether ``param.grad`` holds a gradient to add to (not None, not all zeros)."""
    grad = param.grad
    return grad is not None and bool(grad.any())


# NOTE [The running sum stays in .grad's buffer]: a shared parameter's running sum is ``.grad``'s
# own buffer, handed to a piece's backward as the first gradient of the parameter's AccumulateGrad
# (NOTE [Shared parameters under gradient accumulation]). Autograd's input buffer adds the piece's
# gradients into it in place only while it holds the last reference to the tensor *and* to its
# storage; a Python object of that storage (``torch.save`` of the gradients, ``.untyped_storage()``,
# anything that pickles them) outlives its last Python reference in torch 2.x and holds one. Then
# the engine added out of place into the piece's fresh gradient (``g + sum``: the same bits, float
# addition commutes), the caller's buffer was freed and the fresh one became ``.grad``: the same
# bytes live, but a meter opened after ``.grad`` was made saw a gradient-sized allocation and no
# free (benchmarks/does_not_fit.py's LSTM: steps 2-3, after step 1's gradients were saved with
# ``torch.save``, measured one weight's and two biases' gradients, 266,244 bytes, above step 1 and
# the prediction), and ``.grad`` was no longer the caller's tensor (a bucket view under DDP's
# ``gradient_as_bucket_view``). So the engine is handed an alias of the sum with a storage of its
# own (DLPack: the same memory, nobody else's storage object), which it adds into in place and
# AccumulateGrad steals; a post-accumulate hook then makes the sum itself ``.grad`` again (or
# copies into it, should the engine still have added out of place). Nothing is allocated.
def _alias(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s memory under a storage of its own (DLPack), or ``tensor`` where DLPack cannot
    carry it (NOTE above)."""
    try:
        return torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(tensor))
    except (BufferError, RuntimeError, TypeError):
        return tensor


def _back_into(buffer: torch.Tensor, param: torch.Tensor) -> None:
    """Post-accumulate hook: ``buffer`` (the running sum an alias of which the backward was handed)
    is ``param.grad`` again, holding what autograd accumulated (NOTE above)."""
    grad = param.grad
    if grad is None or grad is buffer:
        return
    if grad.data_ptr() != buffer.data_ptr():
        buffer.copy_(grad)
    param.grad = buffer


class GradSink:
    """How one backward of a replay delivers parameter gradients (see the module docstring).

    ``params`` are the Function's parameter inputs; ``needed`` the Function's
    ``ctx.needs_input_grad`` for them; ``shared`` the ids of those read by several pieces.
    """

    def __init__(
        self, params: Sequence[torch.Tensor], needed: Sequence[bool], shared: frozenset[int] = frozenset()
    ) -> None:
        self.params = list(params)
        self._mode = {
            id(p): (_engine_wants(p) if need else "skip") for p, need in zip(self.params, needed, strict=True)
        }
        # In the common case (loss.backward()) every parameter accumulates: the inner backward
        # then needs no ``inputs=`` (parameters reached through other modules' hooks, e.g. FSDP's
        # unsharded ones, accumulate as autograd finds them).
        self.everything = all(m == "accumulate" for m in self._mode.values())
        # NOTE [Shared parameters under gradient accumulation]: a parameter read by several pieces
        # (a recurrent cell called at every step, tied embeddings, ALBERT's shared layer) gets one
        # gradient per use. Plain autograd adds the uses' gradients one by one into the input
        # buffer of the parameter's AccumulateGrad, in the order the engine produces them
        # (((g1 + g2) + g3) + ...), and adds that sum to ``.grad`` once. A replay runs one
        # backward per piece, and a piece reading the parameter twice (two steps of the cell)
        # sums its own uses first: ((g1 + g2) + (g3 + g4)), ulps off (1e-8 on an LSTMCell loop).
        # So the replay hands each piece's backward the running sum as the *first* gradient to
        # arrive at the parameter's AccumulateGrad (:func:`remat.runtime.release.released_backward`
        # injects it through the backward's seed, which the engine runs before any op of the
        # piece), and each use of the piece is added to it in the engine's order: the plain sum,
        # bit for bit, since the pieces' backwards run in the order the plain engine reaches them.
        # Where the running sum lives:
        # * ``.grad`` None or zero (after ``zero_grad()``; the profile's measured step): in
        #   ``.grad`` itself (0 + x is x), taken out for each piece's backward and put back by its
        #   AccumulateGrad, which adds in place or steals: no byte beyond ``.grad``.
        # * ``.grad`` holding a gradient (the second micro-batch of an accumulation;
        #   ``torch.autograd.grad``): plain autograd adds the sum once, ``grad + (a + b)``, so the
        #   sum is kept here and returned by the Function, and the engine adds it once. It is one
        #   buffer of the parameter's size (``p.numel() * p.element_size()`` bytes) per shared
        #   parameter, from its first piece's backward to the end of the step's backward, as
        #   autograd's input buffer is in the plain step; like ``.grad`` it is gradient memory,
        #   outside the activation budget and the chain model (the profile measures with zeroed
        #   gradients, where nothing is held).
        # Reading "zero" costs one pass over that gradient (a sync on CUDA). A parameter with
        # tensor hooks (``register_hook``) is not given a running sum (a hook must see each
        # piece's own gradient once): there the pieces' sums are added per piece, as before.
        for p in self.params:
            if id(p) in shared and self._mode[id(p)] == "accumulate" and _holds_gradient(p):
                self._mode[id(p)] = "return"
        self._shared = frozenset(id(p) for p in self.params if id(p) in shared and not p._backward_hooks)
        self._started: set[int] = set()  # shared parameters whose .grad holds this backward's sum
        self._returned: dict[int, torch.Tensor] = {}

    def targets(self, params: Iterable[torch.Tensor]) -> list[torch.Tensor]:
        """The parameters among ``params`` whose gradient this backward produces."""
        return [p for p in params if self._mode.get(id(p), "skip") != "skip"]

    @contextlib.contextmanager
    def collecting(
        self, params: Sequence[torch.Tensor], inject: bool = False
    ) -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
        """Around one inner ``torch.autograd.backward(..., inputs=[..., *params])``: the gradients of
        parameters the caller wants *returned* are taken from ``.grad`` into the sink, and the
        caller's ``.grad`` is left as it was.

        ``inject``: the caller hands the yielded ``(param, running sum)`` pairs to the backward as
        the first gradients of those parameters (``released_backward(..., inject=...)``, which
        pops them), so shared parameters sum as in plain autograd (NOTE [Shared parameters under
        gradient accumulation]). Without it each piece's sum is added to the previous ones."""
        returned = [p for p in params if self._mode.get(id(p)) == "return"]
        before = [p.grad for p in returned]
        for p in returned:
            p.grad = None
        seeds = self._running(params) if inject else []
        summed = {id(p) for p, _ in seeds}
        # NOTE [The running sum stays in .grad's buffer]: the engine is handed an alias of each
        # accumulated sum, and a hook puts the sum itself back as .grad after the AccumulateGrad
        own, hooks = {}, []
        for k, (p, running) in enumerate(seeds):
            if self._mode.get(id(p)) == "accumulate":
                own[id(p)], seeds[k] = running, (p, _alias(running))
                hooks.append(p.register_post_accumulate_grad_hook(functools.partial(_back_into, running)))
        try:
            yield seeds
        finally:
            for handle in hooks:
                handle.remove()
            for p, running in seeds:  # not injected (the backward had nothing to run): put back
                if self._mode.get(id(p)) == "return":
                    self._returned[id(p)] = running
                    summed.discard(id(p))
                else:
                    p.grad = own.get(id(p), running)
            own.clear()
            seeds.clear()
            for p, grad in zip(returned, before, strict=True):
                new, p.grad = p.grad, grad
                if new is not None:
                    old = None if id(p) in summed else self._returned.get(id(p))
                    self._returned[id(p)] = new if old is None else old + new
            if inject:
                self._started.update(
                    id(p) for p in params if id(p) in self._shared and self._mode.get(id(p)) == "accumulate"
                )

    def _running(self, params: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The running sums to inject for ``params`` (taken out of the sink and out of ``.grad``:
        the backward's input buffer then holds the only reference and adds in place)."""
        seeds = []
        for p in params:
            key = id(p)
            if key not in self._shared:
                continue
            if self._mode.get(key) == "return" and key in self._returned:
                seeds.append((p, self._returned.pop(key)))
            elif self._mode.get(key) == "accumulate" and key in self._started and p.grad is not None:
                running, p.grad = p.grad, None
                seeds.append((p, running))
        return seeds

    def returned(self) -> tuple[torch.Tensor | None, ...]:
        """The Function's gradient outputs for its parameter inputs."""
        return tuple(self._returned.pop(id(p), None) for p in self.params)


class ReplayFunction(torch.autograd.Function):
    """The autograd node of one replayed step: ``forward`` runs the schedule's forward phase,
    ``backward`` the rest. Inputs: the step, a 0-byte anchor (keeps the node in the graph when
    nothing else requires grad), the number of model inputs, the model inputs, the parameters.

    The step object provides ``forward_phase() -> Tensor``,
    ``backward_phase(grad_output, sink) -> tuple`` (one gradient or None per model input),
    ``params`` and ``shared`` (:func:`shared_params` of its stages or pieces).
    """

    @staticmethod
    def forward(ctx, step, anchor: torch.Tensor, count: int, *tensors: torch.Tensor) -> torch.Tensor:
        ctx.step = step
        ctx.count = count
        return step.forward_phase()

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        step = ctx.step
        ctx.step = None
        if step is None:
            raise RematError("executor: backward through a remat step twice is not supported (no retain_graph)")
        needed = ctx.needs_input_grad[3:]
        sink = GradSink(step.params, needed[ctx.count :], step.shared)
        input_grads = step.backward_phase(grad_output, sink)
        input_grads = tuple(g if need else None for g, need in zip(input_grads, needed[: ctx.count], strict=True))
        return (None, None, None, *input_grads, *sink.returned())


def grad_leaf(x: Boundary, grad: bool = True) -> Boundary:
    """``x`` detached, as the leaf a stage's recording forward starts from: it requires grad when
    ``grad`` and its dtype can carry one (floating or complex; token ids cannot). A tuple boundary
    (remat.trace.boundary) gives a tuple of such leaves, one per tensor."""
    return each(lambda t: t.detach().requires_grad_(grad and can_have_grad(t)), x)


def grad_input(leaf: Boundary) -> Boundary:
    """What a piece reads for ``leaf`` (a detached input that requires grad): under autocast a view
    of it, so that autocast treats it as the activation it is and does not cache its casts (see
    the module docstring); it shares the leaf's storage and the gradient reaches ``leaf.grad``
    unchanged. Without autocast, the leaf itself (nothing is cast; the measured profile holds).
    Each tensor of a tuple boundary alike."""
    return each(_grad_input, leaf)


def _grad_input(leaf: torch.Tensor) -> torch.Tensor:
    kind = leaf.device.type
    if not (leaf.requires_grad and torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind)):
        return leaf
    with torch.enable_grad():  # a view made under no_grad would cut the piece off the leaf
        return leaf.view_as(leaf)


# NOTE [Gradient layout at a cut]: a stage's input is a detached leaf, so its gradient g_i reaches
# the replay through AccumulateGrad, which lays a gradient out like its leaf (the layout contract):
# a channels-last boundary (timm ConvNeXt's block outputs, permuted back from NHWC) gets a
# channels-last g_i where plain autograd hands the producing op the contiguous gradient its
# consumer made. Same values, other strides, and the previous stage's backward then reduces in
# another order: ConvNeXt's layer-scale gradients differed from plain PyTorch in the last bit.
# The probe records the strides autograd produced (no reference kept, so AccumulateGrad still
# steals the gradient where the layouts agree) and g_i is laid out that way again where they
# differ: one copy of g_i, at a moment when AccumulateGrad's own copy and the gradient it copied
# were both alive, which the measured backward of the profile covers.
#
# An *expanded* gradient (a step ending in a bare ``.sum()``: its backward hands on the loss's
# gradient expanded to the summed tensor's shape, zero strides) cannot be rebuilt with those
# strides and copied into (its elements share memory). AccumulateGrad gave the leaf a dense copy
# D of it; every element along a zero-stride dimension is the same value, so the view of D that
# reads element 0 along those dimensions (stride 0 there, D's own strides elsewhere) holds
# autograd's values with autograd's strides wherever its other strides are D's (a sum over all or
# over leading dimensions), and the previous stage's backward sees what plain autograd hands it.
# The view keeps D's storage: the bytes of g_i the chain model and the profile count. Otherwise
# (strides that overlap in another way) D itself is handed on: the same values.
class GradLayout:
    """Records the strides of the gradient autograd produces for ``leaf`` (see the NOTE above)."""

    def __init__(self, leaf: torch.Tensor) -> None:
        self.stride: tuple[int, ...] | None = None
        self._handle = leaf.register_hook(self._record) if leaf.requires_grad else None

    def _record(self, grad: torch.Tensor) -> None:
        self.stride = grad.stride()

    def take(self, leaf: torch.Tensor) -> torch.Tensor | None:
        """``leaf.grad`` (then cleared), laid out as autograd produced it."""
        if self._handle is not None:
            self._handle.remove()
        grad, leaf.grad = leaf.grad, None
        if grad is None or self.stride is None or grad.stride() == self.stride:
            return grad
        if 0 in self.stride:
            return _expanded_like(grad, self.stride)
        laid = torch.empty_strided(grad.shape, self.stride, dtype=grad.dtype, device=grad.device)
        laid.copy_(grad)
        return laid


def _expanded_like(dense: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """``dense`` (a copy of an expanded gradient) as a view with the expanded gradient's ``stride``
    (zero along its expanded dimensions), or ``dense`` itself where that view would need other
    strides than ``dense``'s elsewhere (NOTE [Gradient layout at a cut])."""
    view = tuple(0 if s == 0 else d for s, d in zip(stride, dense.stride(), strict=True))
    same = all(a == b for a, b, n in zip(view, stride, dense.shape, strict=True) if n > 1)
    return dense.as_strided(dense.shape, stride, dense.storage_offset()) if same else dense


def shared_params(groups: Iterable[Iterable[torch.Tensor]]) -> frozenset[int]:
    """The ids of trainable parameters that more than one group reads (a group: one stage's or
    piece's parameters; tied weights; NOTE [Shared parameters under gradient accumulation])."""
    seen: set[int] = set()
    shared: set[int] = set()
    for group in groups:
        for p in {id(p) for p in group if p.requires_grad}:
            (shared if p in seen else seen).add(p)
    return frozenset(shared)


def trainable_params(modules: Iterable[torch.nn.Module]) -> list[torch.nn.Parameter]:
    """Distinct parameters that require grad, in first-seen order (tied weights once)."""
    found: dict[int, torch.nn.Parameter] = {}
    for module in modules:
        for p in module.parameters():
            if p.requires_grad:
                found.setdefault(id(p), p)
    return list(found.values())


__all__ = [
    "GradLayout",
    "grad_leaf",
    "AutocastState",
    "BufferSnapshots",
    "GradSink",
    "shared_params",
    "Recomputer",
    "ReplayFunction",
    "accelerator_devices",
    "grad_input",
    "release_output_grad",
    "trainable_params",
    "uncached_casts",
]
