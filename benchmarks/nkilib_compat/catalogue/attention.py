"""Rows for the attention kernels: context encoding, token generation, backward, TKG mask generation."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import nki.language as nl

from nkilib_compat.rows import Case, randn, row, torch_reference

BF16 = ml_dtypes.bfloat16


@row("attention_cte", kernel="core.attention.attention_cte:attention_cte",
     reference="core.attention.attention_cte_torch:attention_cte_torch_ref",
     source="test_attention_cte.py no_cp unit [1, 128, 128, 128, 1.0, bf16, causal, tp_q=False, tp_out=True]")
def attention_cte(lib):
    import torch
    kernel = lib.get("core.attention.attention_cte:attention_cte")
    ref = torch_reference(lib.get("core.attention.attention_cte_torch:attention_cte_torch_ref"), cast_back=BF16,
                          drop=("mm_out_dtype",))
    bs, s, d = 1, 128, 128
    inputs = {"q": randn((bs, d, s), BF16, 1), "k": randn((bs, d, s), BF16, 2), "v": randn((bs, s, d), BF16, 3),
              "scale": 1.0, "causal_mask": True, "k_prior": None, "v_prior": None, "prior_used_len": None,
              "sink": None, "sliding_window": 0, "tp_q": False, "tp_k": False, "tp_out": True,
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
