"""Compiled stages (opt-in): every stage of a chain run through ``torch.compile``.

:func:`compile_chain` wraps each stage of a chain in a :class:`CompiledStage` that runs it through
``torch.compile`` (inductor by default), so that the profiler, the recording forwards, the no-grad
forwards and every recomputation of a replay use the compiler's fused kernels: a schedule then
pays for recomputation at compiled speed, as ``torch.compile``'s own ``activation_memory_budget``
does. A stage's recording options (:mod:`remat.runtime.policies`) are compiled as
``checkpoint(stage, x, context_fn=<the option's selective policy>)`` functions: torch.compile
traces the checkpoint as one region and its partitioner keeps exactly what the policy keeps. (An
eager selective checkpoint around a compiled stage does not work: the compiled kernels mutate
buffers its cache holds, and torch refuses.)

**The check.** A compiled stage is not bit-exact: inductor fuses ops and reorders floating-point
reductions, so results differ from eager in the last bits (~1e-7 relative on fp32 here). Before
use, every stage and every option is run compiled and eager on its input for the example (a
no-grad forward; a recording forward and its backward with a fixed random output gradient), and each
output, the input gradient and every parameter gradient must agree within ``tolerance`` (largest
absolute difference at most ``tolerance`` times the eager tensor's largest absolute value; default
1e-4, some 800 fp32 roundings of the tensor's scale); otherwise it is refused with a one-line
error naming the stage. That is the same contract as ``torch.compile`` itself, which the user opts
into with ``compile=True``: the default path stays eager and bit-exact (docs/executor.md,
"Compiled stages").

**Caching.** Each stage and option is compiled once per grad mode (dynamo guards on it). A cut
stage (:class:`~remat.trace.stages.CutStage`) compiles its own graph module, whose code differs
per stage; option functions share one code object, so every compiled call runs with a raised
``recompile_limit`` and ``fail_on_recompile_limit_hit`` (a stage silently falling back to eager
would make the profile lie). Inductor's on-disk graph cache then makes identical blocks (a GPT-2's
layers) compile once.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from remat.measure.state import RngState, kept_buffers
from remat.runtime.core import grad_leaf
from remat.runtime.policies import _policy, applicable_policies, selective_forward
from remat.schedules import RematError
from remat.trace.chain import Chain, as_chain
from remat.trace.stages import CutStage

TOLERANCE = 1e-4
"""Largest compiled-vs-eager difference accepted, relative to the eager tensor's largest |value|."""

_RECOMPILE_LIMIT = 512  # per code object: option functions of every stage share one


@contextlib.contextmanager
def _compiling(compile_threads: int) -> Iterator[None]:
    """The dynamo/inductor settings every compiled call runs under (see the module doc)."""
    # deferred: importing dynamo's and inductor's configs takes ~2 s, paid only once a stage compiles
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    with (
        dynamo_config.patch(recompile_limit=_RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True),
        inductor_config.patch(compile_threads=max(1, compile_threads)),
    ):
        yield


def _option_call(stage: nn.Module, name: str) -> Callable[..., torch.Tensor]:
    """``stage``'s recording forward under option ``name``'s selective-checkpoint policy."""
    context = functools.partial(create_selective_checkpoint_contexts, _policy(name))

    def run(x: torch.Tensor, *sides: torch.Tensor) -> torch.Tensor:
        return checkpoint(stage, x, *sides, use_reentrant=False, context_fn=context)

    return run


class CompiledStage(nn.Module):
    """One stage run through ``torch.compile``; ``original`` is the eager stage (parameters and
    buffers are its own: shared, not copied). A :class:`CutStage` compiles its graph module."""

    def __init__(self, stage: nn.Module, backend: str | Callable = "inductor", compile_threads: int = 1) -> None:
        super().__init__()
        self.original = stage
        self._backend = backend  # what torch.compile takes: a name or a dynamo backend callable
        self.backend = backend if isinstance(backend, str) else getattr(backend, "__name__", "custom")
        self.compile_threads = compile_threads
        cut = isinstance(stage, CutStage)
        target = stage.body if cut else stage
        # a dict, not an attribute: the compiled wrappers are not submodules (no second copy of
        # the parameters in .modules())
        self._compiled = {None: torch.compile(target, backend=backend)}
        self._checked: set[str] = set()

    def _sides(self) -> list[torch.Tensor]:
        stage = self.original
        if not isinstance(stage, CutStage):
            return []
        values = stage.context.values
        return [values[name] for name in stage.sides]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled():
            x = x.detach()  # one no-grad graph whether or not the input requires grad (a view)
        with _compiling(self.compile_threads):
            return self._compiled[None](x, *self._sides())

    def add_option(self, name: str) -> None:
        """Compile option ``name`` (a policy of :mod:`remat.runtime.policies`); it runs only
        once :func:`check_stage` has accepted it."""
        if name not in self._compiled:
            body = self.original.body if isinstance(self.original, CutStage) else self.original
            self._compiled[name] = torch.compile(_option_call(body, name), backend=self._backend)

    @property
    def remat_eager(self) -> nn.Module:
        """The eager stage, whose ops the recording policies are chosen from (NOTE [Stage kinds],
        remat/runtime/policies.py)."""
        return self.original

    def remat_option_forward(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """The recording forward of ``x`` under option ``name``, compiled (checked first): what
        :func:`~remat.runtime.policies.selective_forward` runs for this stage kind."""
        if name not in self._checked:
            raise RematError(f"compiled stage: option '{name}' was not compiled and checked (compile_chain options=)")
        with _compiling(self.compile_threads), torch.enable_grad():
            return self._compiled[name](x, *self._sides())


def _grads(
    run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, params: Sequence[nn.Parameter], grad: bool = True
) -> list:
    """Output, input gradient (if ``grad``) and parameter gradients of ``run`` on ``x`` (a fixed
    random output gradient)."""
    leaf = grad_leaf(x, grad)
    with torch.enable_grad():
        out = run(leaf)
    wrt = ([leaf] if leaf.requires_grad else []) + list(params)
    if not out.requires_grad or not wrt:
        return [out.detach()]
    # a random output gradient: with ones, a LayerNorm's input gradient is 0 up to rounding
    generator = torch.Generator(out.device).manual_seed(0)
    grad = torch.randn(out.shape, generator=generator, dtype=out.dtype, device=out.device)
    grads = torch.autograd.grad(out, wrt, grad, allow_unused=True)
    return [out.detach(), *grads]


def _difference(got: torch.Tensor | None, want: torch.Tensor | None) -> float:
    """Largest |got - want| relative to want's largest |value| (inf on a shape/dtype mismatch)."""
    if got is None or want is None:
        return 0.0 if got is None and want is None else float("inf")
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    if not (want.is_floating_point() or want.is_complex()):
        return 0.0 if torch.equal(got, want) else float("inf")
    scale = want.abs().max().item() if want.numel() else 0.0
    diff = (got - want).abs().max().item() if want.numel() else 0.0
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def _results(what: str, run: Callable, x: torch.Tensor, stage: nn.Module, params: list, rng: RngState) -> list:
    """What ``run`` computes on ``x`` for check ``what``, from the RNG state ``rng``, with the
    stage's buffers put back afterwards (compiled and eager runs start alike)."""
    with kept_buffers(stage):
        rng.restore()
        if what == "no-grad forward":
            with torch.no_grad():
                return [run(x)]
        return _grads(run, x, params, grad=what != "recording forward of an input without gradient")


def _worst(got: list, want: list) -> float:
    """The largest :func:`_difference` over the tensors of two runs (inf if they differ in count)."""
    if len(got) != len(want):
        return float("inf")
    return max((_difference(a, b) for a, b in zip(got, want, strict=True)), default=0.0)


def check_stage(compiled: CompiledStage, x: torch.Tensor, name: str, options: Sequence[str], tolerance: float) -> None:
    """Refuse (one-line :class:`RematError`) unless ``compiled`` computes what its eager stage does
    on ``x``, within ``tolerance`` (see the module doc): no-grad forward; recording forward and
    backward; the same for each option in ``options`` (which it compiles). The RNG and the
    stage's buffers are left as they were."""
    stage = compiled.original
    params = [p for p in stage.parameters() if p.requires_grad]
    runs: list[tuple[str, Callable, Callable]] = [
        ("no-grad forward", lambda v: compiled(v), lambda v: stage(v)),
        ("recording forward and backward", compiled, stage),
    ]
    if x.is_floating_point() or x.is_complex():  # a plain model's first stage: no input gradient
        runs.append(("recording forward of an input without gradient", compiled, stage))
    for option in options:
        compiled.add_option(option)
        compiled._checked.add(option)
        runs.append((f"option '{option}'", functools.partial(compiled.remat_option_forward, name=option),
                     functools.partial(selective_forward, stage, name=option)))  # fmt: skip
    rng = RngState.current()
    try:
        for what, got_run, want_run in runs:
            got, want = (_results(what, run, x, stage, params, rng) for run in (got_run, want_run))
            worst = _worst(got, want)
            if worst > tolerance:
                compiled._checked.difference_update(options)
                # far beyond rounding: most often active dropout (inductor draws its own random numbers)
                hint = "; active dropout? inductor draws its own random numbers" if worst > 1e-2 else ""
                raise RematError(
                    f"stage '{name}': compiled ({compiled.backend}) {what} differs from the eager stage by "
                    f"{worst:.2e} of its scale (tolerance {tolerance:g}); refused{hint}"
                )
    finally:
        rng.restore()


class CompiledChain(Chain):
    """A chain whose stages are :class:`CompiledStage` s; ``source`` is the eager chain. ``bind``,
    ``run`` and ``context`` are the source's (a cut chain's side values)."""

    def __init__(self, source: Chain, stages: Sequence[nn.Module], backend: str | Callable) -> None:
        super().__init__(list(zip(source.names, stages, strict=True)))
        self.source = source
        self.backend = next((s.backend for s in stages if isinstance(s, CompiledStage)), str(backend))

    def bind(self, *args, **kwargs) -> torch.Tensor:
        return self.source.bind(*args, **kwargs)

    def run(self, *args, target=None, **kwargs) -> torch.Tensor:
        return self(self.bind(*args, target=target, **kwargs))

    @property
    def context(self):
        return self.source.context

    def remat_outside_tensors(self) -> list[torch.Tensor]:
        """The source's (:meth:`remat.trace.stages.CutChain.remat_outside_tensors`): the bound
        call's inputs and side values, which no stage allocates; none for another chain."""
        outside = getattr(self.source, "remat_outside_tensors", None)
        return [] if outside is None else outside()

    @property
    def compiled_label(self) -> str:
        """``"torch.compile (<backend>)"``: a profile's ``compiled`` metadata."""
        return f"torch.compile ({self.backend})"


def compiled_label(chain: nn.Module) -> str | None:
    """``"torch.compile (<backend>)"`` for a :class:`CompiledChain` (a profile's ``compiled``
    metadata), None for an eager chain."""
    return getattr(chain, "compiled_label", None)


def compile_chain(
    model: nn.Module | Sequence[nn.Module] | Chain,
    example_input: torch.Tensor,
    options: bool = False,
    backend: str | Callable = "inductor",
    tolerance: float = TOLERANCE,
    compile_threads: int = 1,
) -> CompiledChain:
    """``model``'s chain (:func:`as_chain`) with every stage compiled and checked on its input for
    ``example_input`` (the chain input a_0; for a cut chain, what ``bind`` returned), within
    ``tolerance`` (see the module doc). ``options``: also compile and check every recording
    option that applies to each stage (for ``profile_chain(..., options=True)``). Compiling takes
    seconds per distinct stage (inductor, CPU); ``compile_threads`` bounds inductor's workers."""
    chain = as_chain(model)
    if isinstance(chain, CompiledChain):
        return chain
    stages = []
    x = example_input.detach()
    for name, stage in zip(chain.names, chain.stages, strict=True):
        if isinstance(x, tuple):  # a tuple boundary (remat.trace.boundary): compiled stages take one tensor
            raise RematError(
                f"compile: stage '{name}' takes {len(x)} tensors from the stage before (a cut between blocks that"
                " hand on several tensors); compiled stages take one: run it without compile=True"
            )
        if getattr(stage, "remat_keep_eager", False):  # a loss TorchDynamo cannot trace (remat.trace.stages.LossTail)
            stages.append(stage)
        else:
            compiled = CompiledStage(stage, backend, compile_threads)
            check_stage(compiled, x, name, applicable_policies(stage, x) if options else (), tolerance)
            stages.append(compiled)
        with torch.no_grad():
            x = stage(x)
    return CompiledChain(chain, stages, backend)


__all__ = ["TOLERANCE", "CompiledChain", "CompiledStage", "check_stage", "compile_chain", "compiled_label"]
