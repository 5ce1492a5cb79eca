"""The child process of test_capped.py: a residual MLP trained under an address-space cap
(``resource.setrlimit(RLIMIT_AS)``: past it, torch's CPU allocator raises "can't allocate memory"),
the emulation of a device whose memory the plain step does not fit.

``python capped_child.py MODE ALLOWANCE BUDGET``: warm up (imports, thread pools, one small
remat.checkpoint), cap the address space at its size then plus ALLOWANCE bytes, then run MODE:
``plain`` (one plain step), ``remat`` (remat.checkpoint at BUDGET bytes, then 3 AdamW steps) or
``compile`` (remat.compile at BUDGET bytes, its first call and 3 AdamW steps; inductor compiles in
this process, one thread).
Prints one JSON line: {"ok": bool, "error": first line or null, "lines": lines of the error,
"out_of_memory": bool}.
"""

from __future__ import annotations

import gc
import json
import resource
import sys

import torch
from torch import nn

WIDTH, BATCH, DEPTH, WARM_BATCH = 32, 32768, 32, 64


class Block(nn.Module):
    """A gated residual block: its backward needs three activations of its own beside its input."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(WIDTH, WIDTH)
        self.b = nn.Linear(WIDTH, WIDTH)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        u = self.a(h)
        return h + self.b(torch.tanh(u) * torch.sigmoid(u))


class ResidualMLP(nn.Module):
    """DEPTH residual blocks: the plain step holds every block's activations, per-block
    checkpointing only the blocks' inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def build(batch: int = BATCH) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return ResidualMLP().train(), torch.randn(batch, WIDTH)


def plain_step(model: nn.Module, x: torch.Tensor) -> None:
    (model(x) ** 2).mean().backward()


def _vm_size() -> int:
    """Bytes of this process's address space (/proc/self/status VmSize)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmSize:"))
    return int(line.split()[1]) * 1024


def main(mode: str, allowance: int, budget: int) -> dict:
    import remat
    from remat.measure.oom import is_out_of_memory

    model, x = build()
    loss = lambda out: (out**2).mean()  # noqa: E731 - the plain step's loss
    small = torch.randn(WARM_BATCH, WIDTH)
    plain_step(model, small)  # thread pools, allocator arenas, autograd's engine
    if mode == "compile":  # inductor's imports and its compile of a small shape
        from torch._inductor import config as inductor

        inductor.compile_threads = 1  # no compile workers: their address space is not the step's
        loss(remat.compile(nn.Sequential(nn.Linear(WIDTH, WIDTH)).train(), budget=1.0, repeats=1)(small)).backward()
    else:
        remat.checkpoint(model, small, budget=1.0, loss=loss, repeats=1, warmup=0)  # dynamo's imports and caches
    model.zero_grad(set_to_none=True)
    gc.collect()
    cap = _vm_size() + allowance
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
    try:
        if mode == "plain":
            plain_step(model, x)
        elif mode == "compile":
            compiled = remat.compile(model, budget=budget, repeats=1)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            for _ in range(3):
                loss(compiled(x)).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        else:
            wrapped = remat.checkpoint(model, x, budget=budget, loss=loss, repeats=1, warmup=0)
            opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-3)
            for _ in range(3):
                wrapped(x).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
    except Exception as error:  # noqa: BLE001 - reported to the parent as one line
        lines = str(error).strip().splitlines() or [type(error).__name__]
        return {"ok": False, "error": lines[0], "lines": len(lines), "out_of_memory": is_out_of_memory(error)}
    return {"ok": True, "error": None, "lines": 0, "out_of_memory": False}


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
