"""``nki.language`` (nl): tensors, buffers, dtypes, loops and tile-level math, as in AWS NKI 0.3+.

Functions that return tiles emit ``nki.isa`` instructions into the kernel being traced.
"""
from nkihub.nki.dtypes import dtype_of as _dtype_of
from nkihub.nki.language.elementwise import *  # noqa: F401,F403
from nkihub.nki.language.elementwise import BINARY as _BINARY, UNARY as _UNARY, invert, logical_not, reciprocal, where
from nkihub.nki.language.loops import (affine_range, dynamic_range, fori_loop, num_programs, program_id, program_ndim,
                                sequential_range, static_range, while_loop)
from nkihub.nki.language.loops import range  # noqa: A004 (nl.range, as nki-library uses it)
from nkihub.nki.language.memory import (_assign, broadcast_to, copy, device_print, ds, empty_like, full, hbm, is_hbm,
                                 is_on_chip, is_psum, is_sbuf, load, ndarray, ones, private_hbm, psum,
                                 sbuf, shared_hbm, store, tile_size, zeros, zeros_like)
from nkihub.nki.language.reductions import matmul, max, mean, min, prod, softmax, sum, transpose
from nkihub.nki.ops import OpConstant as _OpConstant
from nkihub.nki.tensor import NkiTensor
from nkihub.nki.language.objects import DType, MemoryRegion, NKIObject  # noqa: F401

# Operators that are constants, not functions (activate2: prelu as the activation, bypass as op0/op1;
# average, an undocumented stub constant, names the mean as a reduction operator).
prelu, bypass, average = _OpConstant("prelu"), _OpConstant("bypass"), _OpConstant("average")
from nkihub.nki.language.extra import (all, dropout, expand_dims, gather_flattened, load_transpose2d,  # noqa: F401
                                no_reorder, rand, random_seed, rms_norm, shared_constant, shared_identity_matrix, var)

bool_ = _dtype_of("bool_")
int8, int16, int32 = _dtype_of("int8"), _dtype_of("int16"), _dtype_of("int32")
uint8, uint16, uint32 = _dtype_of("uint8"), _dtype_of("uint16"), _dtype_of("uint32")
float16, float32, bfloat16 = _dtype_of("float16"), _dtype_of("float32"), _dtype_of("bfloat16")
# tfloat32 is stored as float32 (the Tensor Engine's tf32 rounding is not modelled).
tfloat32 = float32
float8_e4m3, float8_e5m2 = _dtype_of("float8_e4m3"), _dtype_of("float8_e5m2")
float8_e4m3fn, float8_e8m0fnu = _dtype_of("float8_e4m3fn"), _dtype_of("float8_e8m0fnu")
# MX (microscaling) 4-packed dtypes of NeuronCore-v4 are names, as in AWS NKI (numpy has no such types).
float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4 = "float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4"


from nkihub.nki import unsupported as _unsupported  # noqa: E402

__getattr__ = _unsupported.module_getattr("nki.language")  # AWS NKI names not simulated: a clear error
