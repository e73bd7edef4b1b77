"""Rows for the experimental blockwise MoE kernels (shard-on-hidden forward, backward), checked against a
torch restatement of the blockwise MoE the library's tests define: block b holds ``block`` token slots of
expert ``block_to_expert[b]``; each slot's token goes through gate/up projection (+bias), clamps, the
activation (SiLU, or Swish = x * sigmoid(1.702 x)), times up, the down projection (+bias), and is added to
its token's output scaled by the token's affinity for that expert. Gradients come from torch autograd."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

import nki.language as nl

from nkilib_compat.catalogue.moe import moe_problem
from nkilib_compat.rows import Case, full_shape, row

BF16 = ml_dtypes.bfloat16


def blockwise_moe(hidden, affinity, w_gu, w_down, pos_to_id, block_to_expert, block, act="SiLU", clamps=None,
                  b_gu=None, b_down=None, clamp_masks=None):
    """Torch tensors in fp32: hidden [T+1, H] (last row zero), affinity [T+1, E], w_gu [E, H, 2, I],
    w_down [E, I', H]. Returns (output [T+1, H], gate_up_T [N, 2, I, B], down [N, B, H]).
    ``clamp_masks`` (per block, (gate, up) boolean [B, I]): where the clamps pass the gradient, as the
    backward test decides it from the checkpointed (bf16) activations; torch's own rule otherwise."""
    import torch
    n = len(block_to_expert)
    ids = torch.as_tensor(pos_to_id.reshape(n, block)).long()
    inter = w_gu.shape[-1]
    out = torch.zeros_like(hidden)
    gu_t, downs = [], []
    for b in range(n):
        e = int(block_to_expert[b])
        x = hidden[ids[b]]
        gu = (x @ w_gu[e].reshape(w_gu.shape[1], 2 * inter)).reshape(block, 2, inter)
        gate, up = gu[:, 0], gu[:, 1]
        if b_gu is not None:
            gate, up = gate + b_gu[e, 0], up + b_gu[e, 1]
        if clamps is not None:
            lin_hi, lin_lo, nl_hi, nl_lo = clamps
            if clamp_masks is None:
                gate = torch.clamp(gate, min=nl_lo, max=nl_hi)
                up = torch.clamp(up, min=lin_lo, max=lin_hi)
            else:
                gm, um = clamp_masks[b]
                gate = torch.where(gm, gate, torch.clamp(gate, min=nl_lo, max=nl_hi).detach())
                up = torch.where(um, up, torch.clamp(up, min=lin_lo, max=lin_hi).detach())
        gu_t.append(torch.stack([gate, up], 1).permute(1, 2, 0))
        a = gate * torch.sigmoid(gate if act == "SiLU" else 1.702 * gate)
        down = (a * up) @ w_down[e, :inter]
        if b_down is not None:
            down = down + b_down[e]
        downs.append(down)
        out = out.index_add(0, ids[b], down * affinity[ids[b], e:e + 1])
    return out, torch.stack(gu_t), torch.stack(downs)


@row("blockwise_mm_bwd", kernel="experimental.moe.bwd.blockwise_mm_backward:blockwise_mm_bwd",
     reference="torch autograd through the tests' blockwise MoE forward (restated)",
     source="test_bwmm_bwd.py [6144, T, 1, 512, 1, 128, bf16, 0, clamps 7/-7/7/-7, no bias, SiLU], T cut from "
            "4096 to 512, lnc=2", needs="lnc2")
def blockwise_mm_bwd(lib):
    import torch
    kernel = lib.get("experimental.moe.bwd.blockwise_mm_backward:blockwise_mm_bwd")
    params = lib.module("experimental.moe.bwd.moe_bwd_parameters")
    h, t, e, b, k, i = 6144, 512, 1, 512, 1, 128
    p = moe_problem(t, h, e, b, k, i, seed=1)
    hidden, aff, w_gu, w_down = p["hidden"], p["aff"], p["w_gu"], p["w_down"]
    pos_to_id, block_to_expert = p["pos_to_id"], p["block_to_expert"]
    grad = p["rng"].uniform(-1, 1, (t + 1, h)).astype(BF16)
    grad[t] = 0
    f = (lambda a, g=False: torch.tensor(np.asarray(a, np.float32), requires_grad=g))
    tens = [f(hidden, True), f(aff, True), f(w_gu, True), f(w_down, True)]
    clamps = (7.0, -7.0, 7.0, -7.0)
    out, gu_t, down = blockwise_moe(*tens, pos_to_id, block_to_expert, b, "SiLU", clamps)
    inputs = {"hidden_states": hidden, "expert_affinities_masked": aff.reshape(-1, 1), "gate_up_proj_weight": w_gu,
              "down_proj_weight": w_down, "gate_up_proj_act_checkpoint_T": gu_t.detach().numpy().astype(BF16),
              "down_proj_act_checkpoint": down.detach().numpy().astype(BF16), "token_position_to_id": pos_to_id,
              "block_to_expert": block_to_expert, "output_hidden_states_grad": grad, "block_size": b,
              "skip_dma": params.SkipMode(False, False), "compute_dtype": nl.bfloat16,
              "is_tensor_update_accumulating": k != 1, "clamp_limits": params.ClampLimits(*clamps), "bias": False,
              "activation_type": params.ActFnType.SiLU}

    def expected():
        # The test's golden passes the clamps' gradient where the checkpointed (bf16) activation lies
        # strictly inside the limits; autograd through the fp32 forward would decide it from fp32 values.
        ck = inputs["gate_up_proj_act_checkpoint_T"].astype(np.float32)      # [N, 2, I, B]
        masks = [(torch.from_numpy((ck[b, 0].T > clamps[3]) & (ck[b, 0].T < clamps[2])),
                  torch.from_numpy((ck[b, 1].T > clamps[1]) & (ck[b, 1].T < clamps[0]))) for b in range(len(ck))]
        again = [f(hidden, True), f(aff, True), f(w_gu, True), f(w_down, True)]
        out2, _, _ = blockwise_moe(*again, pos_to_id, block_to_expert, b, "SiLU", clamps, clamp_masks=masks)
        out2.backward(f(grad))
        gh, ga, ggu, gd = (x.grad.numpy().astype(BF16) for x in again)
        return [gh, ga.reshape(-1, 1), ggu, gd]
    return Case(kernel, inputs, expected, lnc=2, rtol=2e-2, atol=1e-5)


@row("bwmm_shard_on_H", kernel="experimental.moe.forward.bwmm_shard_on_H:blockwise_mm_baseline_shard_hidden",
     reference="the tests' blockwise MoE forward (restated in torch)",
     source="test_bwmm_shard_on_H.py [6144, T, 16, 512, 4, 336, bf16, 0, POST_SCALE], T cut from 4096 to 512, "
            "lnc=2", needs="lnc2")
def bwmm_shard_on_h(lib, t: int = 512):
    import torch
    kernel = lib.get("experimental.moe.forward.bwmm_shard_on_H:blockwise_mm_baseline_shard_hidden")
    SkipMode = lib.get("core.moe.moe_cte.moe_cte_utils:SkipMode")
    Scale = lib.get("core.utils.common_types:ExpertAffinityScaleMode")
    h, e, b, k, i = 6144, 16, 512, 4, 336
    p = moe_problem(t, h, e, b, k, i, down_rows=math.ceil(i / 16) * 16)
    hidden, aff, w_gu, w_down = p["hidden"], p["aff"], p["w_gu"], p["w_down"]
    pos_to_id, block_to_expert = p["pos_to_id"], p["block_to_expert"]
    inputs = {"hidden_states": hidden, "expert_affinities_masked": aff.reshape(-1, 1), "gate_up_proj_weight": w_gu,
              "down_proj_weight": w_down, "block_size": b, "token_position_to_id": pos_to_id,
              "block_to_expert": block_to_expert.reshape(-1, 1), "skip_dma": SkipMode(False, False),
              "compute_dtype": nl.bfloat16, "is_tensor_update_accumulating": True,
              "expert_affinities_scaling_mode": Scale.POST_SCALE}

    def expected():
        f = (lambda a: torch.from_numpy(np.asarray(a, np.float32)))
        out = blockwise_moe(f(hidden), f(aff), f(w_gu), f(w_down), pos_to_id, block_to_expert, b)[0]
        return [out.numpy().astype(BF16)]
    return Case(kernel, inputs, expected, lnc=2, rtol=2e-2, atol=1e-5)


@full_shape("bwmm_shard_on_H", source="test_bwmm_shard_on_H.py [6144, 4096, 16, 512, 4, 336, bf16, 0, POST_SCALE], "
            "lnc=2 (T not cut)")
def bwmm_shard_on_h_full(lib):
    return bwmm_shard_on_h(lib, 4096)
