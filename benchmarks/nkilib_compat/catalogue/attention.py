"""Rows for the attention kernels: context encoding, token generation, backward, TKG mask generation."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import nki.language as nl

from nkilib_compat.rows import Case, full_shape, randn, row, torch_reference

BF16 = ml_dtypes.bfloat16


@row("attention_cte", kernel="core.attention.attention_cte:attention_cte",
     reference="core.attention.attention_cte_torch:attention_cte_torch_ref",
     source="test_attention_cte.py no_cp unit [1, 128, 128, 128, 1.0, bf16, causal, tp_q=False, tp_out=True]")
def attention_cte(lib):
    return _attention_cte(lib, 128, 128, tp_q=False, tp_out=True)


@full_shape("attention_cte", source="test_attention_cte.py no_cp unit [1, 9216, 9216, 64, 1.0, bf16, causal, "
            "tp_q=True, tp_out=False] (the largest of its bf16 causal cases the test validates)")
def attention_cte_full(lib):
    return _attention_cte(lib, 9216, 64, tp_q=True, tp_out=False)


def _attention_cte(lib, s: int, d: int, tp_q: bool, tp_out: bool):
    """attention_cte, batch 1, causal, q = kv length ``s``, head size ``d``, bf16 (q [1, s, d] with ``tp_q``,
    else [1, d, s]; the output laid out alike by ``tp_out``)."""
    import torch
    kernel = lib.get("core.attention.attention_cte:attention_cte")
    ref = torch_reference(lib.get("core.attention.attention_cte_torch:attention_cte_torch_ref"), cast_back=BF16,
                          drop=("mm_out_dtype",))
    bs = 1
    inputs = {"q": randn((bs, s, d) if tp_q else (bs, d, s), BF16, 1), "k": randn((bs, d, s), BF16, 2),
              "v": randn((bs, s, d), BF16, 3),
              "scale": 1.0, "causal_mask": True, "k_prior": None, "v_prior": None, "prior_used_len": None,
              "sink": None, "sliding_window": 0, "tp_q": tp_q, "tp_k": False, "tp_out": tp_out,
              "cp_offset": None, "global_cp_deg": None, "cp_strided_q_slicing": False, "cache_softmax": False,
              "softmax_dtype": nl.float32, "mm_out_dtype": nl.float32, "bound_min": None, "bound_max": None}

    def expected():
        return ref(**{**inputs, "softmax_dtype": torch.float32})
    return Case(kernel, inputs, expected, rtol=2e-2, atol=1e-5)


@row("attention_bwd", kernel="core.attention.attention_bwd:attention_bwd",
     reference="core.attention.attention_bwd_torch:attention_bwd_torch_ref",
     source="test_attention_bwd.py sequence packing fast (1, 1, 128, bf16, [128, 128], causal), one packed "
            "sequence of 256")
def attention_bwd(lib):
    import torch
    kernel = lib.get("core.attention.attention_bwd:attention_bwd")
    ref_fn = lib.get("core.attention.attention_bwd_torch:attention_bwd_torch_ref")
    compute_o_lse = lib.get("core.attention.attention_bwd_torch:compute_o_lse")
    b, h, d, s = 1, 1, 128, 256
    q, k, v, dy = (randn((b, h, d, s), BF16, i) for i in (1, 2, 3, 4))
    as_t = (lambda a: torch.from_numpy(a.astype(np.float32)))
    o, lse, _ = compute_o_lse(as_t(q), as_t(k), as_t(v), True, True, softmax_scale=1.0)
    inputs = {"q_ref": q, "k_ref": k, "v_ref": v, "o_ref": o.float().numpy().astype(BF16), "dy_ref": dy,
              "lse_ref": lse.float().numpy(), "sinks_ref": None, "use_causal_mask": True,
              "mixed_precision": True, "softmax_scale": 1.0, "sliding_window": -1, "bound_min": None,
              "bound_max": None}
    ref = torch_reference(ref_fn, cast_back=BF16)
    return Case(kernel, inputs, lambda: ref(**inputs), rtol=2e-2, atol=1e-5)


@row("gen_mask_tkg", kernel="core.attention.gen_mask_tkg:gen_mask_tkg_hbm",
     reference="core.attention.gen_mask_tkg_torch:gen_mask_tkg_hbm_torch_ref",
     source="test_gen_mask_tkg.py hbm flat_kv (4, 1, 256, 1, strided, lnc=1)")
def gen_mask_tkg(lib):
    kernel = lib.get("core.attention.gen_mask_tkg:gen_mask_tkg_hbm")
    ref = lib.get("core.attention.gen_mask_tkg_torch:gen_mask_tkg_hbm_torch_ref")
    batch, q_head, s_ctx, s_active = 4, 1, 256, 1
    cache_lens = np.random.default_rng(42).integers(1, s_ctx, size=batch).astype(np.float32)
    pos_ids = np.repeat(cache_lens, s_active)[None, :].astype(np.float32)
    inputs = {"pos_ids_hbm": pos_ids, "bs": batch, "q_head": q_head, "s_active": s_active, "s_prior": s_ctx,
              "block_len": 0}

    def expected():
        import torch
        args = {**inputs, "pos_ids_hbm": torch.from_numpy(pos_ids)}
        return [ref[1](**args).numpy().astype(np.float32)]
    return Case(kernel, inputs, expected, rtol=0, atol=0)


@row("attention_tkg", kernel="core.attention.attention_tkg:attention_tkg",
     reference="core.attention.attention_tkg_torch:attention_tkg_torch_ref",
     source="test_attention_tkg.py fast AttnTKGConfig(4, 2, 7, 256, 16384, 128, 0, use_pos_id, fuse_rope), lnc=1")
def attention_tkg(lib):
    import nki
    import nki.language as nl
    fn = lib.get("core.attention.attention_tkg:attention_tkg")
    Cfg = lib.get("core.attention.attention_tkg_utils:AttnTKGConfig")
    SbufManager = lib.get("core.utils.allocator:SbufManager")
    Logger = lib.get("core.utils.logging:Logger")
    ref = lib.get("core.attention.attention_tkg_torch:attention_tkg_torch_ref")
    cfg = Cfg(4, 2, 7, 256, 16384, 128, 0, use_pos_id=True, fuse_rope=True)
    bs, qh, sa, sp, full, d = 4, 2, 7, 256, 16384, 128
    out_shape, k_out_shape = (bs, qh, d, sa), (bs, 1, d, sa)

    # The library's test drives the routine from a kernel that owns the SBUF manager and the outputs.
    @nki.jit
    def kernel(q, k_active, v_active, k_prior, v_prior, mask, inv_freqs, rope_pos_ids, cfg):
        sbm = SbufManager(0, nl.tile_size.total_available_sbuf_size - 16 * 1024, Logger("SBM"))
        sbm.open_scope()
        out = nl.ndarray(out_shape, dtype=q.dtype, buffer=nl.shared_hbm)
        k_out = nl.ndarray(k_out_shape, dtype=q.dtype, buffer=nl.shared_hbm)
        res, k_res = fn(q, k_active, v_active, k_prior, v_prior, mask, out, cfg, sbm, inv_freqs, rope_pos_ids,
                        None, None, None, k_out)
        sbm.close_scope()
        return res, k_res

    pos_id = ((np.arange(bs) * 3 + (sp // 4 * 3)) % (sp - sa))[:, None]
    tril = np.tril(np.ones((sa, sa), np.float32))
    mask = np.broadcast_to(tril[None, None], (bs, qh, sa, sa)).transpose(3, 0, 1, 2).astype(np.uint8)
    inputs = {"q": randn((bs, qh, sa, d), BF16, 1), "k_active": randn((bs, 1, sa, d), BF16, 2),
              "v_active": randn((bs, 1, sa, d), BF16, 3), "k_prior": randn((bs, 1, d, full), BF16, 4),
              "v_prior": randn((bs, 1, full, d), BF16, 5), "mask": np.ascontiguousarray(mask),
              "inv_freqs": np.random.default_rng(6).random((d // 2, 1)).astype(np.float32),
              "rope_pos_ids": np.broadcast_to(pos_id, (bs, sa)).astype(np.float32), "cfg": cfg}

    def expected():
        import torch
        t = (lambda a: torch.from_numpy(np.asarray(a, np.float32)))
        out, k_out = ref[1](q=t(inputs["q"]), k_active=t(inputs["k_active"]), v_active=t(inputs["v_active"]),
                            k_prior=t(inputs["k_prior"]), v_prior=t(inputs["v_prior"]), mask=t(inputs["mask"]),
                            out=torch.zeros(out_shape), cfg=cfg, sbm=None, inv_freqs=t(inputs["inv_freqs"]),
                            rope_pos_ids=t(inputs["rope_pos_ids"]), start_pos_ids=None, sink=None,
                            active_blocks_table=None, k_out=torch.zeros(k_out_shape), DBG_TENSORS=None)
        return [out.numpy().astype(BF16), k_out.numpy().astype(BF16)]
    return Case(kernel, inputs, expected, rtol=1e-2, atol=1e-5)


@row("attention_block_tkg", kernel="experimental.transformer.attention_block_tkg:attention_block_tkg",
     reference="experimental.transformer.attention_block_tkg_torch:AttentionBlockTkgTorchRef",
     source="test_attention_block_tkg.py AttnBlkTestConfig(batch=32, q_heads=1, d_head=64, H=3072, S_ctx=128, "
            "S_tkg=1, rmsnorm_X=False, test_bias=True), HBM in and out, cache updated in place, lnc=2")
def attention_block_tkg(lib):
    kernel = lib.get("experimental.transformer.attention_block_tkg:attention_block_tkg")
    Ref = lib.get("experimental.transformer.attention_block_tkg_torch:AttentionBlockTkgTorchRef")
    Quant = lib.get("core.utils.common_types:QuantizationType")
    full_mask = lib.get("core.attention.gen_mask_tkg_torch:build_full_attention_mask")
    import torch
    b, heads, d, h, s_ctx, s_tkg, lnc, eps = 32, 1, 64, 3072, 128, 1, 2, 1e-3
    g = np.random.default_rng(0)

    # Magnitudes as the test chooses them (its comment: keep attention scores O(1) so bf16 rounding cannot
    # flip which cache position wins): activations, caches and cos/sin uniform in [-1, 1], the QKV weight
    # N(0, 1/sqrt(H)), the output weight N(0, 0.5), biases uniform in [-0.1, 0.1].
    def uniform(shape, lo=-1.0, hi=1.0):
        return g.uniform(lo, hi, shape).astype(np.float32).astype(BF16)

    def normal(shape, std):
        return g.normal(0.0, std, shape).astype(np.float32).astype(BF16)

    x = uniform((b, s_tkg, h))
    w_qkv = normal((h, (heads + 2) * d), 1 / np.sqrt(h))
    bias_qkv = uniform((1, (heads + 2) * d), -0.1, 0.1)
    cos, sin = uniform((d // 2, b, s_tkg)), uniform((d // 2, b, s_tkg))
    k_cache, v_cache = uniform((b, 1, s_ctx, d)), uniform((b, 1, s_ctx, d))
    w_out = normal((heads * d, h), 0.5)
    bias_out = uniform((1, h), -0.1, 0.1)
    # Each sequence's filled length: spread over the cache, leaving room for the new tokens.
    cache_len = ((np.arange(b) * 3 + s_ctx * 3 // 4) % (s_ctx - s_tkg))[:, None]
    mask = full_mask(cache_lens=torch.from_numpy(cache_len.ravel()).float(), batch=b, num_heads=heads,
                     s_active=s_tkg, s_ctx=s_ctx, lnc=lnc, include_active_mask=True, transposed=True)
    mask = np.ascontiguousarray(mask.numpy()).astype(np.uint8)
    common = {"X": x, "X_hidden_dim_actual": h, "rmsnorm_X_enabled": False, "rmsnorm_X_eps": eps,
              "rmsnorm_X_gamma": None, "W_qkv": w_qkv, "bias_qkv": bias_qkv, "quantization_type_qkv": Quant.NONE,
              "weight_dequant_scale_qkv": None, "input_dequant_scale_qkv": None, "cos": cos, "sin": sin,
              "rope_contiguous_layout": True, "rmsnorm_QK_post_rope_enabled": False,
              "rmsnorm_QK_post_rope_eps": eps, "K_cache_transposed": False, "active_blocks_table": None,
              "K_cache": k_cache, "V_cache": v_cache, "attention_mask": mask, "sink": None,
              "update_cache": True, "kv_cache_update_idx": cache_len.astype(np.uint32), "W_out": w_out,
              "bias_out": bias_out, "quantization_type_out": Quant.NONE, "weight_dequant_scale_out": None,
              "input_dequant_scale_out": None, "transposed_out": False, "out_in_sb": False,
              "softmax_scale": None, "k_scale": None, "v_scale": None, "skip_attention": False}
    # The kernel and its reference name the Q/K RMSNorm arguments differently (the test maps them).
    inputs = {**common, "rmsnorm_QK_pre_rope_enabled": False, "rmsnorm_QK_pre_rope_eps": eps,
              "rmsnorm_QK_pre_rope_W_Q": None, "rmsnorm_QK_pre_rope_W_K": None,
              "rmsnorm_QK_post_rope_W_Q": None, "rmsnorm_QK_post_rope_W_K": None}
    ref_args = {**common, "rmsnorm_QK_enabled": False, "rmsnorm_QK_eps": eps, "W_rmsnorm_Q_pre_rope": None,
                "W_rmsnorm_K_pre_rope": None, "W_rmsnorm_Q_post_rope": None, "W_rmsnorm_K_post_rope": None}
    ref = torch_reference(Ref(lnc), cast_back=BF16)
    # The test validates each output by cosine similarity >= 0.99 and its range-relative allclose (rtol
    # 0.015 of the largest reference value, atol 1e-5), which compare() restates; cosine is not repeated.
    return Case(kernel, inputs, lambda: ref(**ref_args), lnc=lnc, rtol=0.015, atol=1e-5)
