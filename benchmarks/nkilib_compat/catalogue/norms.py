"""Rows for the normalisation kernels: RMSNorm / LayerNorm for token generation, RMSNorm + fp8 quantisation."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from nkilib_compat.rows import Case, randn, row, torch_reference


@row("rmsnorm_tkg", kernel="core.subkernels.rmsnorm_tkg:rmsnorm_tkg",
     reference="core.subkernels.rmsnorm_torch:rmsnorm_tkg_torch_ref_lnc1",
     source="test_rmsnorm_tkg.py (1, 1, 4, 2048, 2048, False, False, float16)")
def rmsnorm_tkg(lib):
    kernel = lib.get("core.subkernels.rmsnorm_tkg:rmsnorm_tkg")
    ref = torch_reference(lib.get("core.subkernels.rmsnorm_torch:rmsnorm_tkg_torch_ref_lnc1"),
                          cast_back=np.float16)
    b, s, h = 1, 4, 2048
    inputs = {"input": randn((b, s, h), np.float16, 1), "gamma": randn((1, h), np.float16, 2),
              "output": np.zeros((128, b * s, h // 128), np.float16), "hidden_actual": 2048,
              "hidden_dim_tp": False, "shard_on_h": False}
    return Case(kernel, inputs, lambda: ref(**inputs), rtol=2e-2, atol=1e-5)


@row("layernorm_tkg", kernel="core.subkernels.layernorm_tkg:layernorm_tkg",
     reference="core.subkernels.layernorm_torch:layernorm_tkg_torch_ref_lnc1",
     source="test_layernorm_tkg.py (1, 1, 1, 8192, False, float16)")
def layernorm_tkg(lib):
    kernel = lib.get("core.subkernels.layernorm_tkg:layernorm_tkg")
    ref = torch_reference(lib.get("core.subkernels.layernorm_torch:layernorm_tkg_torch_ref_lnc1"),
                          cast_back=np.float16)
    b, s, h = 1, 1, 8192
    inputs = {"input": randn((b, s, h), np.float16, 1), "gamma": randn((1, h), np.float16, 2),
              "output": np.zeros((128, b * s, h // 128), np.float16), "beta": randn((1, h), np.float16, 3),
              "shard_on_h": False}
    return Case(kernel, inputs, lambda: ref(**inputs), rtol=2e-2, atol=1e-5)


def _rmsnorm_fp8_rows(x, gamma, eps):
    """What rmsnorm_quant computes with ROW quantisation, restated from its test's numpy reference:
    x / (rms(x) + eps) * gamma, then each row scaled so its largest magnitude is 240 (the fp8 e4m3 range),
    rounded to fp8; the per-row dequantisation scale is max|row| / 240."""
    x = x.astype(np.float32)
    rms = np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True))
    norm = x * np.reciprocal(rms + eps) * gamma.astype(np.float32)
    deq = np.abs(norm).max(axis=-1, keepdims=True) / 240.0
    q = (norm * np.reciprocal(deq)).astype(ml_dtypes.float8_e4m3)
    return q.astype(np.float32), deq.astype(np.float32)


@row("rmsnorm_quant", kernel="core.rmsnorm.rmsnorm_quant:rmsnorm_quant_kernel",
     reference="the test's own numpy reference (restated)",
     source="test_rmsnorm_quant.py row sweep (seqlen 128, hidden 1024, batch 1, lower_bound 0, ROW, bf16)")
def rmsnorm_quant(lib):
    kernel = lib.get("core.rmsnorm.rmsnorm_quant:rmsnorm_quant_kernel")
    Args = lib.get("core.rmsnorm.rmsnorm_quant:RmsNormQuantKernelArgs")
    NormType = lib.get("core.utils.common_types:NormType")
    QuantizationType = lib.get("core.utils.common_types:QuantizationType")
    b, s, h = 1, 128, 1024
    x = randn((b, s, h), ml_dtypes.bfloat16, 1)
    gamma = randn((h,), ml_dtypes.bfloat16, 2)
    kargs = Args(quantization_type=QuantizationType.ROW, lower_bound=0.0, norm_type=NormType.RMS_NORM, eps=1e-6)
    inputs = {"hidden": x, "ln_w": gamma, "kargs": kargs, "input_dequant_scale": None}

    def check(outs):
        from nkilib_compat.compare import compare
        raw = np.ascontiguousarray(outs[0]).view(np.uint8).reshape(b, s, h + 4)
        got_q = raw[:, :, :h].copy().view(ml_dtypes.float8_e4m3).astype(np.float32)
        got_scale = raw[:, :, h:].copy().view(np.float32)
        want_q, want_scale = _rmsnorm_fp8_rows(x, gamma, 1e-6)
        ok1, s1 = compare(got_q, want_q, 0.072, 1e-8)
        ok2, s2 = compare(got_scale, want_scale, 0.007, 1e-8)
        return ok1 and ok2, f"values: {s1}; scales: {s2}"
    return Case(kernel, inputs, None, check=check)
