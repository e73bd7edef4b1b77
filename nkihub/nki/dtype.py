"""``nki.dtype``: the NeuronCore dtypes by name (the same objects as ``nki.language``'s), and ``DType``,
the annotation kernels write for a dtype parameter (``compute_dtype: nki.dtype = nl.bfloat16``)."""
from nkihub.nki.language import (DType, bfloat16, bool_, float4_e2m1fn_x4, float8_e4m3, float8_e4m3fn,  # noqa: F401
                          float8_e4m3fn_x4, float8_e5m2, float8_e5m2_x4, float8_e8m0fnu, float16, float32,
                          int8, int16, int32, tfloat32, uint8, uint16, uint32)
