"""Dtypes as kernels see them: ``nl.bfloat16`` etc. are numpy dtypes; torch dtypes are accepted too."""
from __future__ import annotations

import numpy as np

from nkihub.simulator.dtypes import as_dtype

_TORCH_NAMES = {"torch.float32": "float32", "torch.float": "float32", "torch.bfloat16": "bfloat16",
                "torch.float16": "float16", "torch.half": "float16", "torch.int8": "int8",
                "torch.int16": "int16", "torch.int32": "int32", "torch.uint8": "uint8", "torch.bool": "bool_",
                "torch.uint16": "uint16", "torch.uint32": "uint32",
                "torch.float8_e4m3fn": "float8_e4m3fn", "torch.float8_e5m2": "float8_e5m2"}


def dtype_of(dtype) -> np.dtype:
    """A numpy dtype for an nl dtype, a numpy dtype, a name, or a torch dtype."""
    if type(dtype).__module__ == "torch":
        name = _TORCH_NAMES.get(str(dtype))
        if name is None:
            raise TypeError(f"{dtype} has no NeuronCore dtype")
        return as_dtype(name)
    return as_dtype(dtype)


# What a simulated output may differ from a reference by, as max |error| / max |reference|, by the
# output's dtype (bf16 keeps 8 bits of mantissa, fp8 3 or 2): `nkihub simulate` and the autotuner's check.
TOLERANCE = {"bfloat16": 2e-2, "float16": 2e-3, "float32": 1e-4, "float8_e4m3": 1.3e-1, "float8_e4m3fn": 1.3e-1,
             "float8_e5m2": 2.6e-1}


def relative_error(got, want) -> float:
    """max |got - want| / max |want| in fp32 (inf when ``got`` has a NaN ``want`` lacks)."""
    g, w = np.asarray(got).astype(np.float32), np.asarray(want).astype(np.float32)
    if (np.isnan(g) & ~np.isnan(w)).any():
        return float("inf")
    err = float(np.nan_to_num(np.abs(g - w), nan=0.0).max(initial=0))
    return err / max(float(np.nan_to_num(np.abs(w)).max(initial=0)), 1e-30)
