"""Rows for the projection kernels: QKV and output projections (context encoding and token generation)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from nkilib_compat.rows import Case, full_shape, randn, row, torch_reference

BF16 = ml_dtypes.bfloat16


def uniform(shape, dtype, seed):
    return np.random.default_rng(seed).random(shape).astype(np.float32).astype(dtype)


@row("output_projection_cte",
     kernel="core.output_projection.output_projection_cte.output_projection_cte:output_projection_cte",
     reference="core.output_projection.output_projection_cte.output_projection_cte_torch:"
               "output_projection_cte_torch_ref",
     source="test_output_proj_cte.py bf16 unit (1, 128, 3072, 16, 64, bias)")
def output_projection_cte(lib):
    base = "core.output_projection.output_projection_cte."
    kernel = lib.get(base + "output_projection_cte:output_projection_cte")
    ref = torch_reference(lib.get(base + "output_projection_cte_torch:output_projection_cte_torch_ref"),
                          cast_back=BF16)
    QT = lib.get("core.utils.common_types:QuantizationType")
    b, s, hidden, nh, dh = 1, 128, 3072, 16, 64
    inputs = {"attention": uniform((b, nh, dh, s), BF16, 1), "weight": uniform((nh * dh, hidden), BF16, 2),
              "bias": randn((1, hidden), BF16, 3, scale=100.0), "quantization_type": QT.NONE,
              "input_scales": None, "weight_scales": None}
    return Case(kernel, inputs, lambda: ref(**inputs), rtol=2e-2, atol=1e-5)


@row("output_projection_tkg", kernel="core.output_projection.output_projection_tkg:output_projection_tkg",
     reference="core.output_projection.output_projection_tkg_torch:output_projection_tkg_torch_ref",
     source="test_output_proj_tkg.py unit [4, 8, 4, 64, 3072, NONE, no bias, no transpose]")
def output_projection_tkg(lib):
    kernel = lib.get("core.output_projection.output_projection_tkg:output_projection_tkg")
    ref = torch_reference(lib.get("core.output_projection.output_projection_tkg_torch:"
                                  "output_projection_tkg_torch_ref"), cast_back=BF16)
    QT = lib.get("core.utils.common_types:QuantizationType")
    b, nh, s, dh, hidden = 4, 8, 4, 64, 3072
    inputs = {"attention": randn((dh, b, nh, s), BF16, 1), "weight": randn((dh * nh, hidden), BF16, 2),
              "bias": None, "quantization_type": QT.NONE, "weight_scale": None, "input_scale": None,
              "TRANSPOSE_OUT": False, "OUT_IN_SB": False}
    return Case(kernel, inputs, lambda: ref(**inputs), rtol=2e-2, atol=1e-5)


def _norm_qkv(lib, inputs, fused_add: bool):
    """The QKV tests' golden, restated: optional residual add (input + mlp_prev + attention_prev), RMS norm
    with the library's own torch RMSNorm reference, then the fused QKV matmul; with the residual add the
    token-generation path also returns the summed hidden state."""
    import torch
    rms = lib.get("core.subkernels.rmsnorm_torch:rms_norm_torch_ref")
    t = (lambda a: torch.from_numpy(a.astype(np.float32)))
    hidden = t(inputs["input"])
    if fused_add:
        hidden = hidden + t(inputs["mlp_prev"]) + t(inputs["attention_prev"])
    normed = rms(hidden, t(inputs["gamma_norm_weights"]), eps=inputs["norm_eps"]) \
        if inputs["gamma_norm_weights"] is not None else hidden
    out = (normed @ t(inputs["fused_qkv_weights"])).numpy().astype(BF16)
    return [out, hidden.numpy().astype(BF16)] if fused_add else [out]


def _qkv_inputs(lib, b, s, h, fused_dim, norm, fused_add, **extra):
    QT = lib.get("core.utils.common_types:QuantizationType")
    NormType = lib.get("core.utils.common_types:NormType")
    Layout = lib.get("core.utils.common_types:QKVOutputLayout")
    WLayout = lib.get("core.utils.common_types:QKVWeightLayout")
    inputs = {"input": randn((b, s, h), BF16, 1), "fused_qkv_weights": randn((h, fused_dim), BF16, 2),
              "output_layout": Layout.BSD, "bias": None, "quantization_type": QT.NONE, "qkv_w_scale": None,
              "qkv_in_scale": None, "fused_residual_add": fused_add,
              "mlp_prev": randn((b, s, h), BF16, 3) if fused_add else None,
              "attention_prev": randn((b, s, h), BF16, 4) if fused_add else None,
              "fused_norm_type": getattr(NormType, norm),
              "gamma_norm_weights": randn((1, h), BF16, 5) if norm == "RMS_NORM" else None,
              "layer_norm_bias": None, "norm_eps": 1e-6, "hidden_actual": None, "fused_rope": False,
              "cos_cache": None, "sin_cache": None, "store_output_in_sbuf": False, "sbm": None,
              "use_auto_allocation": False, "load_input_with_DMA_transpose": True,
              "weight_layout": WLayout.CONTIGUOUS, "is_h_dim_4h_transposed": False}
    inputs.update(extra)
    return inputs


@row("qkv_cte", kernel="core.qkv.qkv:qkv", reference="the test's golden (residual add, library RMSNorm, matmul)",
     source="test_qkv_cte.py accuracy [1, 1, 128, 512, None, 512, bf16, RMS_NORM, fused_add, no norm bias]")
def qkv_cte(lib):
    kernel = lib.get("core.qkv.qkv:qkv")
    inputs = _qkv_inputs(lib, 1, 128, 512, 512, "RMS_NORM", True, d_head=None, num_q_heads=None,
                         num_kv_heads=None)
    return Case(kernel, inputs, lambda: _norm_qkv(lib, inputs, True)[:1], rtol=2e-2, atol=1e-5)


@full_shape("qkv_cte", source="test_qkv_cte.py accuracy [1, 1, 512, 16384, None, 768, bf16, NO_NORM, no fused_add, "
            "no norm bias] (its largest)")
def qkv_cte_full(lib):
    kernel = lib.get("core.qkv.qkv:qkv")
    inputs = _qkv_inputs(lib, 1, 512, 16384, 768, "NO_NORM", False, d_head=None, num_q_heads=None,
                         num_kv_heads=None)
    return Case(kernel, inputs, lambda: _norm_qkv(lib, inputs, False)[:1], rtol=2e-2, atol=1e-5)


@row("qkv_tkg", kernel="core.qkv.qkv:qkv (token-generation path, qkv_tkg)",
     reference="the test's golden (residual add, library RMSNorm, matmul)",
     source="test_qkv_tkg.py accuracy [1, 1, 4, 4096, None, 512, 2, 1, 128, NO_NORM, NONE, fused_add]")
def qkv_tkg(lib):
    kernel = lib.get("core.qkv.qkv:qkv")
    inputs = _qkv_inputs(lib, 1, 4, 4096, 512, "NO_NORM", True, d_head=128, num_q_heads=2, num_kv_heads=1)
    return Case(kernel, inputs, lambda: _norm_qkv(lib, inputs, True), rtol=2e-2, atol=1e-5)
