"""The replay wrapper inside DistributedDataParallel (gloo, 2 CPU processes): same gradients as without remat."""

from __future__ import annotations

import copy
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank: int, world: int, init_file: str, results: str) -> None:
    import tests.solver.chain.chain_ops as chain_ops
    from remat.replay.chain import RematChain
    from remat.zoo import small

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = small.cnn()
        plain = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model))
        n = 6
        wrapped = torch.nn.parallel.DistributedDataParallel(
            RematChain(copy.deepcopy(model), chain_ops.segments(n, [2, 4]))
        )
        torch.manual_seed(100 + rank)  # each rank its own batch
        x = torch.randn(4, 3, 16, 16)
        target = torch.arange(4) % 10
        for module in (plain, wrapped):
            loss = torch.nn.functional.cross_entropy(module(x), target)
            loss.backward()
        grads_plain = [p.grad.clone() for p in plain.parameters()]
        grads_remat = [p.grad.clone() for p in wrapped.parameters()]
        torch.save({"plain": grads_plain, "remat": grads_remat}, os.path.join(results, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_gradients_equal_plain_ddp(tmp_path):
    world = 2
    mp.spawn(_worker, args=(world, str(tmp_path / "init"), str(tmp_path)), nprocs=world, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    for result in ranks:
        assert len(result["plain"]) == len(result["remat"]) > 0
        for a, b in zip(result["plain"], result["remat"], strict=True):
            assert torch.equal(a, b)
    # the gradients were all-reduced: both ranks hold the same (averaged) gradients
    for a, b in zip(ranks[0]["remat"], ranks[1]["remat"], strict=True):
        assert torch.equal(a, b)
