"""Rows for routing: router top-k, rotational top-k, mixture-of-experts for token generation."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import nki.language as nl

from nkilib_compat.compare import compare
from nkilib_compat.rows import Case, randn, row, torch_reference

BF16 = ml_dtypes.bfloat16


@row("router_topk", kernel="core.router_topk.router_topk:router_topk",
     reference="core.router_topk.router_topk_torch:router_topk_torch_ref",
     source="test_router_topk.py (4, 3072, 128, 4, SOFTMAX, bias, x in HBM [H, T]), lnc=2 (trn2's default)")
def router_topk(lib):
    import nki
    fn = lib.get("core.router_topk.router_topk:router_topk")
    mod = lib.module("core.router_topk.router_topk")
    Act = lib.get("core.utils.common_types:RouterActFnType")
    ref = torch_reference(lib.get("core.router_topk.router_topk_torch:router_topk_torch_ref"))

    # The library's test wraps the routine in a kernel that returns the three tensors it writes.
    @nki.jit
    def kernel(x, w, w_bias, router_logits, expert_affinities, expert_index, act_fn, k, x_hbm_layout,
               x_sb_layout):
        fn(x=x, w=w, w_bias=w_bias, router_logits=router_logits, expert_affinities=expert_affinities,
           expert_index=expert_index, act_fn=act_fn, k=k, x_hbm_layout=x_hbm_layout, x_sb_layout=x_sb_layout,
           router_pre_norm=False)
        return [router_logits, expert_index, expert_affinities]

    t, h, e, k = 4, 3072, 128, 4
    u = (lambda shape, seed: np.random.default_rng(seed).uniform(-0.1, 0.1, shape).astype(np.float32).astype(BF16))
    inputs = {"x": u((h, t), 1), "w": u((h, e), 2), "w_bias": u((1, e), 3),
              "router_logits": np.zeros((t, e), BF16), "expert_affinities": np.zeros((t, e), BF16),
              "expert_index": np.zeros((t, k), np.uint32), "act_fn": Act.SOFTMAX, "k": k,
              "x_hbm_layout": mod.XHBMLayout_H_T__0, "x_sb_layout": mod.XSBLayout_tp102__0}

    def expected():
        return ref(**inputs, router_pre_norm=False)
    return Case(kernel, inputs, expected, lnc=2, rtol=2e-2, atol=1e-5)


@row("rotational_topk", kernel="core.topk.rotational_topk:rotational_topk",
     reference="core.topk.torch_ref:topk_torch_ref",
     source="test_topk.py unit [1, 1, 7, 3999, 256, float32] (values compared sorted, as the test does)")
def rotational_topk(lib):
    mod = lib.module("core.topk.rotational_topk")
    ref = torch_reference(lib.get("core.topk.torch_ref:topk_torch_ref"))
    batch, seqlen, vocab, k = 1, 7, 3999, 256
    x = randn((batch * seqlen, vocab), np.float32)
    topk_cfg = mod.create_topk_config(inp_shape=(batch, seqlen, vocab), inp_dtype=np.float32, k=k, sorted=True,
                                      num_programs=1)
    cfg = mod.prepare_rotational_constants(mod.create_rotational_topk_config(inp_shape=x.shape,
                                                                             topk_config=topk_cfg))
    inputs = {"inp": x, "config": cfg}

    def check(outs):
        want = ref(inp=x, config=cfg)[0]
        ok1, s1 = compare(np.sort(np.asarray(outs[0], np.float32), -1), np.sort(want, -1), 1e-5, 1e-8)
        picked = np.take_along_axis(x, np.asarray(outs[1]).astype(np.int64), axis=-1)
        ok2, s2 = compare(np.sort(picked, -1), np.sort(want, -1), 1e-5, 1e-8)
        return ok1 and ok2, f"values: {s1}; values at indices: {s2}"
    return Case(mod.rotational_topk, inputs, None, check=check)


@row("moe_tkg", kernel="core.moe.moe_tkg.moe_tkg:moe_tkg", reference="core.moe.moe_tkg.moe_tkg_torch:moe_tkg_torch_ref",
     source="test_moe_tkg.py bf16 selective (2, 2, 512, 128, 2, 1, SiLU, POST_SCALE, fp16, clamp, no bias), lnc=2")
def moe_tkg(lib):
    kernel = lib.get("core.moe.moe_tkg.moe_tkg:moe_tkg")
    Act = lib.get("core.utils.common_types:ActFnType")
    Scale = lib.get("core.utils.common_types:ExpertAffinityScaleMode")
    ref = torch_reference(lib.get("core.moe.moe_tkg.moe_tkg_torch:moe_tkg_torch_ref"), cast_back=np.float16)
    t, h, i, e, top_k = 2, 512, 128, 2, 1
    rng = np.random.default_rng(0)
    idx = rng.integers(0, e, size=(t, top_k)).astype(np.int32)
    aff = np.zeros((t, e), np.float32)
    weights = rng.random((t, top_k))
    weights /= weights.sum(axis=1, keepdims=True)
    for r in range(t):
        aff[r, idx[r]] = weights[r]
    inputs = {"hidden_input": randn((t, h), np.float16, 1), "expert_gate_up_weights": randn((e, h, 2, i), np.float16, 2),
              "expert_down_weights": randn((e, i, h), np.float16, 3), "expert_affinities": aff, "expert_index": idx,
              "is_all_expert": False, "rank_id": None, "mask_unselected_experts": False,
              "expert_gate_up_bias": None, "expert_down_bias": None, "expert_gate_up_weights_scale": None,
              "expert_down_weights_scale": None, "gate_up_input_scale": None, "down_input_scale": None,
              "expert_affinities_eager": None, "expert_affinities_scaling_mode": Scale.POST_SCALE,
              "activation_fn": Act.SiLU, "output_dtype": nl.float16, "gate_clamp_upper_limit": 7.0,
              "gate_clamp_lower_limit": None, "up_clamp_upper_limit": 8.0, "up_clamp_lower_limit": -6.0,
              "is_all_expert_dynamic": False, "block_size": None}
    return Case(kernel, inputs, lambda: ref(**inputs), lnc=2, rtol=2e-2, atol=1e-5)
