"""Head-sharded attention under torch.distributed: two processes on gloo, DTensor inputs sharded on the
heads dim, the kernel op's sharding rule keeps them sharded, and the result equals the unsharded one."""
from __future__ import annotations

import importlib
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

# (module, op, extra args after q, k, v): vit-attn when the library has it, flash-attn always
CANDIDATES = [("nkihub.kernels.library.vit_attn", "vit_attention", (0.125,)),
              ("nkihub.kernels.library.flash_attn", "flash_attention_with_lse", (False, 0.125))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, module: str, op: str, extra: tuple, placement: int):
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor, init_device_mesh

    from nkihub.kernels.distributed import register_attention_sharding

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        kernel = importlib.import_module(module)
        register_attention_sharding(kernel)
        fn = getattr(kernel.ops, op)
        mesh = init_device_mesh("cpu", (world,))
        gen = torch.Generator().manual_seed(0)  # every rank builds the same full tensors
        q, k, v = (torch.randn(2, 4, 17, 64, generator=gen) for _ in range(3))
        full = fn(q, k, v, *extra)
        full = full[0] if isinstance(full, tuple) else full
        sharded = fn(*(distribute_tensor(t, mesh, [Shard(placement)]) for t in (q, k, v)), *extra)
        sharded = sharded[0] if isinstance(sharded, tuple) else sharded
        assert isinstance(sharded, DTensor) and sharded.placements == (Shard(placement),), sharded.placements
        assert sharded.to_local().shape[placement] == q.shape[placement] // world  # each rank ran its half
        torch.testing.assert_close(sharded.full_tensor(), full, atol=1e-5, rtol=1e-5)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.125)
        torch.testing.assert_close(full, ref, atol=1e-4, rtol=1e-4)
    finally:
        dist.destroy_process_group()


def _available():
    out = []
    for module, op, extra in CANDIDATES:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        if hasattr(getattr(mod, "ops", None), op):
            out.append((module, op, extra))
    return out


@pytest.mark.parametrize("module, op, extra", _available())
@pytest.mark.parametrize("placement", [1, pytest.param(0, marks=pytest.mark.slow)], ids=["heads", "batch"])
def test_sharded_attention_matches_unsharded(module, op, extra, placement):
    mp.spawn(_worker, args=(2, _free_port(), module, op, extra, placement), nprocs=2, join=True)


def test_sequence_dim_is_not_sharded():
    from torch.distributed.tensor import Shard

    from nkihub.kernels.distributed import _rule

    strategies = _rule(3, 1)(None, None, None, 0.1)
    assert all(Shard(2) not in outs + ins and Shard(3) not in outs + ins for outs, ins in strategies)
    assert {type(p).__name__ + str(getattr(p, "dim", "")) for outs, _ in strategies for p in outs} == \
        {"Replicate", "Shard0", "Shard1"}
