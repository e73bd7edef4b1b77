"""Rows for mixture-of-experts blocks: blockwise MoE for context encoding and the fused MoE block."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

import nki.language as nl

from nkilib_compat.rows import Case, row, torch_reference

BF16 = ml_dtypes.bfloat16


def block_routing(tokens: int, top_k: int, experts: int, block: int, n_blocks: int, seed: int = 0,
                  skip_token: bool = False):
    """Token routing in the blockwise layout the MoE CTE kernels read: each token picks ``top_k`` distinct
    experts; expert e owns ceil(count_e / block) consecutive blocks (padding blocks go to the last
    expert, up to ``n_blocks``); ``token_position_to_id[p]`` is the token placed at slot p (tokens in
    order within their expert's blocks) and ``tokens`` (or -1 with ``skip_token``) for empty slots.

    Returns (mask [T, E] of 0/1, token_position_to_id [N*B] int32, block_to_expert [N] int32)."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((tokens, experts), np.float32)
    for t in range(tokens):
        mask[t, rng.choice(experts, size=min(top_k, experts), replace=False)] = 1
    counts = mask.sum(0).astype(int)
    blocks = -(-counts // block)
    blocks[-1] += n_blocks - blocks.sum()
    block_to_expert = np.repeat(np.arange(experts), blocks).astype(np.int32)
    pos_to_id = np.full(n_blocks * block, -1 if skip_token else tokens, np.int32)
    start = np.concatenate([[0], np.cumsum(blocks)[:-1]]) * block
    for e in range(experts):
        ids = np.nonzero(mask[:, e])[0]
        pos_to_id[start[e]:start[e] + len(ids)] = ids
    return mask, pos_to_id, block_to_expert


def moe_problem(t, h, e, b, k, i, *, blocks_multiple=1, skip_token=False, seed=0, down_rows=None):
    """A blockwise MoE problem as the library's MoE tests build one: routing (see :func:`block_routing`,
    with n_blocks = ceil((T*k - (E-1)) / B) + E - 1 rounded up to ``blocks_multiple``), hidden states
    [T(+1), H] in [0, 1), affinities [T(+1), E] masked by the routing, gate/up weights [E, H, 2, I] and down
    weights [E, down_rows or I, H] in [-0.1, 0.1), all bf16. Without ``skip_token`` a zero token T is
    appended (the slot every padding position points at)."""
    n = math.ceil((t * k - (e - 1)) / b) + e - 1
    n = blocks_multiple * math.ceil(n / blocks_multiple)
    mask, pos_to_id, block_to_expert = block_routing(t, k, e, b, n, skip_token=skip_token)
    rng = np.random.default_rng(seed)
    rows = t if skip_token else t + 1
    hidden = rng.random((rows, h)).astype(np.float32)
    aff = rng.random((rows, e)).astype(np.float32)
    aff[:t] *= mask
    if not skip_token:
        hidden[t], aff[t] = 0, 0
    return {"n": n, "pos_to_id": pos_to_id, "block_to_expert": block_to_expert, "hidden": hidden.astype(BF16),
            "aff": aff.astype(BF16), "w_gu": rng.uniform(-0.1, 0.1, (e, h, 2, i)).astype(BF16),
            "w_down": rng.uniform(-0.1, 0.1, (e, down_rows or i, h)).astype(BF16), "rng": rng}


@row("moe_cte", kernel="core.moe.moe_cte.moe_cte:moe_cte", reference="core.moe.moe_cte.moe_cte_torch:moe_cte_torch_ref",
     source="test_moe_cte.py lnc2 SHARD_ON_BLOCK (3072, T, 8, 256, 4, 384, bf16, skip token, bias, Swish, "
            "POST_SCALE, clamps 7/-/8/-9) with T cut from 1024 to 256", needs="lnc2")
def moe_cte(lib):
    base = "core.moe.moe_cte."
    kernel = lib.get(base + "moe_cte:moe_cte")
    spec_cls = lib.get(base + "moe_cte:MoECTESpec")
    impl = lib.get(base + "moe_cte:MoECTEImplementation")
    SkipMode = lib.get(base + "moe_cte_utils:SkipMode")
    Act = lib.get("core.utils.common_types:ActFnType")
    Scale = lib.get("core.utils.common_types:ExpertAffinityScaleMode")
    import sys
    bwmm = sys.modules["test.integration.nkilib.core.moe.moe_cte.test_moe_cte_common"].BWMMFunc
    ref = torch_reference(lib.get(base + "moe_cte_torch:moe_cte_torch_ref"), cast_back=BF16)
    lnc, h, t, e, b, k, i = 2, 3072, 256, 8, 256, 4, 384
    p = moe_problem(t, h, e, b, k, i, blocks_multiple=lnc, skip_token=True, down_rows=math.ceil(i / 16) * 16)
    rng = p["rng"]
    inputs = {"hidden_states": p["hidden"], "expert_affinities_masked": p["aff"].reshape(-1, 1),
              "gate_up_proj_weight": p["w_gu"], "down_proj_weight": p["w_down"],
              "token_position_to_id": p["pos_to_id"], "block_to_expert": p["block_to_expert"], "block_size": b,
              "gate_and_up_proj_bias": rng.uniform(-1, 1, (e, 2, i)).astype(BF16),
              "down_proj_bias": rng.uniform(-1.632, 1.4375, (e, h)).astype(BF16),
              "activation_function": Act.Swish, "skip_dma": SkipMode(True, False), "compute_dtype": nl.bfloat16,
              "is_tensor_update_accumulating": True, "expert_affinities_scaling_mode": Scale.POST_SCALE,
              "gate_clamp_upper_limit": 7.0, "gate_clamp_lower_limit": None, "up_clamp_upper_limit": 8.0,
              "up_clamp_lower_limit": -9.0}
    kernel_inputs = {**inputs, "spec": spec_cls(implementation=impl.shard_on_block)}

    def expected():
        return ref(**inputs, bwmm_func=bwmm.SHARD_ON_BLOCK, lnc_degree=lnc, top_k=k)
    return Case(kernel, kernel_inputs, expected, lnc=lnc, rtol=2e-2, atol=1e-5)


@row("moe_block_tkg", kernel="core.moe_block.moe_block_tkg:moe_block_tkg",
     reference="core.moe_block.moe_block_tkg_torch:moe_block_tkg_torch_ref",
     source="test_moe_block_tkg.py unit [2, all-expert, 19, 1, 3072, None, 128, 128, 1, 4, SOFTMAX, Swish, "
            "POST_SCALE, fp16, fp16, bias, clamp]", needs="lnc2")
def moe_block_tkg(lib):
    kernel = lib.get("core.moe_block.moe_block_tkg:moe_block_tkg")
    Act = lib.get("core.utils.common_types:ActFnType")
    RAct = lib.get("core.utils.common_types:RouterActFnType")
    Scale = lib.get("core.utils.common_types:ExpertAffinityScaleMode")
    ref = torch_reference(lib.get("core.moe_block.moe_block_tkg_torch:moe_block_tkg_torch_ref"),
                          cast_back=np.float16)
    b, s, h, i, eg, el, k = 19, 1, 3072, 128, 128, 1, 4
    rng = np.random.default_rng(42)
    f16 = (lambda shape, lo=-0.1, hi=0.1: rng.uniform(lo, hi, shape).astype(np.float32).astype(np.float16))
    inputs = {"inp": f16((b, s, h)), "gamma": f16((1, h)), "router_weights": f16((h, eg)),
              "expert_gate_up_weights": rng.normal(size=(el, h, 2, i)).astype(np.float16),
              "expert_down_weights": rng.normal(size=(el, i, h)).astype(np.float16),
              "expert_gate_up_weights_scale": None, "expert_down_weights_scale": None,
              "router_bias": f16((1, eg)), "expert_gate_up_bias": rng.normal(size=(el, 2, i)).astype(np.float16),
              "expert_down_bias": rng.normal(size=(el, h)).astype(np.float16), "top_k": k,
              "router_act_fn": RAct.SOFTMAX, "router_pre_norm": False, "norm_topk_prob": False,
              "expert_affinities_scaling_mode": Scale.POST_SCALE, "hidden_act_fn": Act.Swish,
              "gate_clamp_upper_limit": 7.0, "gate_clamp_lower_limit": None, "up_clamp_upper_limit": 8.0,
              "up_clamp_lower_limit": -6.0, "router_mm_dtype": nl.float16, "hidden_actual": None,
              "skip_router_logits": False, "is_all_expert": True,
              "rank_id": np.array([[np.random.RandomState(42).randint(0, eg // el)]], np.uint32)}
    return Case(kernel, inputs, lambda: ref(**inputs), lnc=2, rtol=1e-2, atol=1e-5)
