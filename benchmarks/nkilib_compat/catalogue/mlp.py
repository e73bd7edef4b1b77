"""Rows for the MLP kernel (one entry point, ``mlp``, with a context-encoding and a token-generation path)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import nki.language as nl

from nkilib_compat.rows import Case, full_shape, randn, row

BF16 = ml_dtypes.bfloat16


def _mlp_inputs(lib, b, s, h, i, fused_add, store_add):
    Act = lib.get("core.utils.common_types:ActFnType")
    NormType = lib.get("core.utils.common_types:NormType")
    QT = lib.get("core.utils.common_types:QuantizationType")
    gamma = np.random.default_rng(42).uniform(-0.1, 0.1, (1, h)).astype(np.float32).astype(BF16)
    return {"hidden_tensor": randn((b, s, h), BF16, 1), "gate_proj_weights_tensor": randn((h, i), BF16, 2),
            "up_proj_weights_tensor": randn((h, i), BF16, 3), "down_proj_weights_tensor": randn((i, h), BF16, 4),
            "normalization_weights_tensor": gamma, "gate_proj_bias_tensor": None, "up_proj_bias_tensor": None,
            "down_proj_bias_tensor": None, "normalization_bias_tensor": None,
            "fused_add_tensor": randn((b, s, h), BF16, 5) if fused_add else None,
            "store_fused_add_result": store_add, "activation_fn": Act.SiLU, "normalization_type": NormType.RMS_NORM,
            "quantization_type": QT.NONE, "output_dtype": nl.bfloat16, "store_output_in_sbuf": False, "eps": 1e-6,
            "skip_gate_proj": False}


def _mlp_reference(lib, inputs):
    """The MLP tests' golden, restated: hidden (+ fused_add) -> RMS norm (the library's torch RMSNorm) ->
    silu(x @ gate) * (x @ up) -> @ down; with ``store_fused_add_result`` the summed input is an output too."""
    import torch
    rms = lib.get("core.subkernels.rmsnorm_torch:rms_norm_torch_ref")
    t = (lambda a: torch.from_numpy(np.asarray(a, np.float32)))
    x = t(inputs["hidden_tensor"])
    if inputs["fused_add_tensor"] is not None:
        x = x + t(inputs["fused_add_tensor"])
    summed = x
    x = rms(x, t(inputs["normalization_weights_tensor"]), eps=inputs["eps"])
    act = torch.nn.functional.silu(x @ t(inputs["gate_proj_weights_tensor"])) * (x @ t(inputs["up_proj_weights_tensor"]))
    out = (act @ t(inputs["down_proj_weights_tensor"])).numpy().astype(BF16)
    return [out, summed.numpy().astype(BF16)] if inputs["store_fused_add_result"] else [out]


@row("mlp_cte", kernel="core.mlp.mlp:mlp (context-encoding path)",
     reference="the test's golden (library RMSNorm, SiLU-gated MLP)",
     source="test_mlp_cte.py unit [1, 1, 512, 1024, 448, RMS_NORM, NONE, fused_add, no store_add, SiLU]")
def mlp_cte(lib):
    kernel = lib.get("core.mlp.mlp:mlp")
    inputs = _mlp_inputs(lib, 1, 512, 1024, 448, fused_add=True, store_add=False)
    return Case(kernel, inputs, lambda: _mlp_reference(lib, inputs), rtol=2e-2, atol=1e-5)


@full_shape("mlp_cte", source="test_mlp_cte.py unit [1, 1, 8192, 8192, 448, RMS_NORM, NONE, fused_add, no store_add, "
            "SiLU] (its largest)")
def mlp_cte_full(lib):
    kernel = lib.get("core.mlp.mlp:mlp")
    inputs = _mlp_inputs(lib, 1, 8192, 8192, 448, fused_add=True, store_add=False)
    return Case(kernel, inputs, lambda: _mlp_reference(lib, inputs), rtol=2e-2, atol=1e-5)


@row("mlp_tkg", kernel="core.mlp.mlp:mlp (token-generation path)",
     reference="the test's golden (library RMSNorm, SiLU-gated MLP)",
     source="test_mlp_tkg.py vnc1 [1, 1, 1, 8192, 448, bf16, NONE, RMS_NORM, fused_add, store_add, SiLU]")
def mlp_tkg(lib):
    kernel = lib.get("core.mlp.mlp:mlp")
    inputs = _mlp_inputs(lib, 1, 1, 8192, 448, fused_add=True, store_add=True)
    return Case(kernel, inputs, lambda: _mlp_reference(lib, inputs), rtol=2e-2, atol=1e-5)
