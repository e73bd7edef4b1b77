"""Dtypes as kernels see them: ``nl.bfloat16`` etc. are numpy dtypes; torch dtypes are accepted too."""
from __future__ import annotations

import numpy as np

from simulator.dtypes import as_dtype

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
