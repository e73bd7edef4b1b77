"""DTensor sharding rules for the attention ops, so tensor-parallel attention runs under torch.distributed.

Attention is independent per batch element and per head, so q, k, v ``(B, H, S, D)`` may be sharded on
the batch dim (0) or the heads dim (1) as long as all three (and every output) are sharded the same way;
the sequence and head dims are not shardable (a softmax row spans all keys; a dot product spans D).
With grouped heads (k, v with fewer heads) a contiguous head shard keeps each query head with its
key/value head when both head counts divide by the mesh size. Rules are registered on the op overloads
with ``torch.distributed.tensor.experimental.register_sharding``:

    from nkihub.kernels.library import vit_attn
    from nkihub.kernels.distributed import register_attention_sharding
    register_attention_sharding(vit_attn)
    out = vit_attn.ops.vit_attention(q_dt, k_dt, v_dt, scale)   # DTensors sharded Shard(1) -> Shard(1)
"""
from __future__ import annotations

# op name -> (number of leading tensor inputs that are (B, H, S, D)-like, number of tensor outputs)
ATTENTION_OPS = {
    "vit_attention": 3,
    "vit_attention_with_lse": 3,
    "vit_attention_backward": 7,    # q, k, v, out, grad_out, lse, grad_lse -> dq, dk, dv
    "flash_attention_with_lse": 3,
    "flash_attention_backward": 7,  # q, k, v, out, grad_out, lse, grad_lse -> dq, dk, dv
}

_registered: set[str] = set()


def _rule(n_tensors: int, n_outputs: int):
    from torch.distributed.tensor import Replicate, Shard

    def strategies(*args, **kwargs):
        rest = [None] * (len(args) - n_tensors)
        # every tensor (inputs (B, H, S, D), lse (B, H, S)) shares its batch and head dims, so one
        # placement applies to all of them; the non-tensor arguments (causal, scale) take None
        return [([p] * n_outputs, [p] * n_tensors + rest) for p in (Replicate(), Shard(0), Shard(1))]

    return strategies


def _outputs(op) -> int:
    return len(op._schema.returns)


def register_attention_sharding(kernel) -> list[str]:
    """Register batch/head sharding for the attention ops of a kernel module (vit-attn, flash-attn);
    returns the qualified names registered now (each op once per process)."""
    from torch.distributed.tensor.experimental import register_sharding

    from .torch_ops import library_of

    lib = library_of(kernel)
    done = []
    for name, n_tensors in ATTENTION_OPS.items():
        if name not in lib.registered or lib.qualname(name) in _registered:
            continue
        overload = getattr(lib.ops, name).default
        register_sharding(overload)(_rule(n_tensors, _outputs(overload)))
        _registered.add(lib.qualname(name))
        done.append(lib.qualname(name))
    return done
