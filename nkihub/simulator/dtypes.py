"""The data types of the NeuronCore, as numpy dtypes (bf16 and fp8 through ml_dtypes).

Names are the NKI names (``bfloat16``, ``float8_e4m3`` ...); programs store the name, the executor
uses the numpy dtype.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

_DTYPES: dict[str, np.dtype] = {
    "bool_": np.dtype(np.bool_),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "float16": np.dtype(np.float16),
    "float32": np.dtype(np.float32),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    # NKI's legacy float8_e4m3 is the IEEE-style e4m3 (with infinities); OCP's is float8_e4m3fn.
    "float8_e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "float4_e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
}
_NAMES: dict[np.dtype, str] = {v: k for k, v in _DTYPES.items()}
# The MX (microscaling) 4-packed dtypes of NeuronCore-v4: four fp8 values in 32 bits, or four fp4 values
# in 16 bits, element 0 in the lowest bits. They are not arithmetic types: the executor stores their bits
# as unsigned integers of the same width, and only the MX instructions (quantize_mx, nc_matmul_mx) and
# bit copies read them. Name -> (storage dtype, element dtype, bits per element).
PACKED: dict[str, tuple[np.dtype, np.dtype, int]] = {
    "float8_e5m2_x4": (np.dtype(np.uint32), np.dtype(ml_dtypes.float8_e5m2), 8),
    "float8_e4m3fn_x4": (np.dtype(np.uint32), np.dtype(ml_dtypes.float8_e4m3fn), 8),
    "float4_e2m1fn_x4": (np.dtype(np.uint16), np.dtype(ml_dtypes.float4_e2m1fn), 4),
}
_DTYPES.update({k: v[0] for k, v in PACKED.items()})
_ALIASES = {"bool": "bool_", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
            "float": "float32", "tfloat32": "float32"}

FLOAT_NAMES = frozenset(n for n, d in _DTYPES.items() if n.startswith(("float", "bfloat")) and n not in PACKED)


def as_dtype(dtype) -> np.dtype:
    """Return the numpy dtype for an NKI dtype name, a numpy dtype or anything ``np.dtype`` accepts.

    Torch dtypes are converted by the caller (this package does not import torch).
    """
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
        if name in _DTYPES:
            return _DTYPES[name]
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"not a NeuronCore dtype: {dtype!r}") from exc
    if dt not in _NAMES:
        raise TypeError(f"dtype {dt} is not supported by the NeuronCore (supported: {', '.join(_DTYPES)})")
    return dt


def dtype_name(dtype) -> str:
    """The NKI name of a dtype (``'bfloat16'``, ``'float32'`` ...). A name is returned as it is known (so
    the packed MX names, stored as unsigned integers, keep their own name), as is the name a host dtype
    of :func:`packed_host_dtype` carries."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
        if name in _DTYPES:
            return name
    tagged = getattr(dtype, "metadata", None)
    if tagged and tagged.get("nki_dtype") in PACKED:
        return tagged["nki_dtype"]
    return _NAMES[as_dtype(dtype)]


def packed_host_dtype(name: str) -> np.dtype:
    """The numpy dtype of host arrays holding a packed MX dtype (``'float8_e5m2_x4'``, ...): its storage
    integer (uint32 for fp8 x4, uint16 for fp4 x4) tagged with the name, so an array viewed as it
    (``bits.view(packed_host_dtype('float4_e2m1fn_x4'))``) reaches a kernel as that dtype, as AWS's
    ``neuron_dtypes`` arrays do, instead of as a plain integer."""
    if name not in PACKED:
        raise ValueError(f"{name!r} is not a packed MX dtype ({', '.join(PACKED)})")
    return np.dtype(PACKED[name][0], metadata={"nki_dtype": name})


def is_float(dtype) -> bool:
    """True for floating-point dtypes (including bf16 and fp8)."""
    return dtype_name(dtype) in FLOAT_NAMES


def all_dtype_names() -> tuple[str, ...]:
    """Every dtype name this machine represents."""
    return tuple(_DTYPES)
