"""Rows for the MX (microscaling) kernels of trn3: MXFP8 data packed four to an element
(``float8_e4m3fn_x4``) with one uint8 scale per 8 partitions x 4 elements. The goldens restate the
library tests' formula (OCP MX: the scale is the block's largest fp32 exponent minus the format's largest
exponent; data = value / 2^(scale - 127), clipped to the format's largest normal, rounded to fp8), and
place the 16 scale rows of a 128-partition tile at partitions 0-3, 32-35, 64-67, 96-99 as quantize_mx does.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from nkilib_compat.compare import compare
from nkilib_compat.rows import Case, randn, row

FP8 = ml_dtypes.float8_e4m3fn
E4M3_MAX, E4M3_MAX_EXP = 448.0, 8
SCALE_ROWS = (np.arange(4)[:, None] * 32 + np.arange(4)).ravel()   # 4 rows in each 32-partition quadrant


def mx_quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[P, F] fp32 -> (fp8 values [P, F], scales [P // 8, F // 4] uint8), the tests' golden formula."""
    p, f = x.shape
    exp = (x.astype(np.float32).view(np.uint32) >> 23) & 0xFF
    scale = exp.reshape(p // 8, 8, f // 4, 4).max(axis=(1, 3)).astype(np.uint8) - E4M3_MAX_EXP
    factor = np.repeat(np.repeat(2.0 ** (scale.astype(np.int32) - 127), 8, axis=0), 4, axis=1)
    data = np.clip(x / factor, -E4M3_MAX, E4M3_MAX).astype(np.float32).astype(FP8)
    return data, scale.astype(np.uint8)


def unpack_x4(a) -> np.ndarray:
    """A float8_e4m3fn_x4 array (four fp8 bytes per element) as fp32 values, four per element."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).view(FP8).astype(np.float32).reshape(a.shape[:-1] + (a.shape[-1] * 4,))


@row("mxfp_load", kernel="experimental.mxfp_subkernels.mxfp_load_utils:mxfp_load_performance_wrapper",
     reference="the test's golden (swizzle per 512-column block, then MX quantisation), restated",
     source="test_mxfp_load.py K=1024 (M=128, bf16), trn3", needs="mx")
def mxfp_load(lib):
    kernel = lib.get("experimental.mxfp_subkernels.mxfp_load_utils:mxfp_load_performance_wrapper")
    m, k = 128, 1024
    x = randn((m, k), ml_dtypes.bfloat16)
    datas, scales = [], np.zeros((128, m * (k // 512)), np.uint8)
    for b in range(k // 512):
        block = x[:, b * 512:(b + 1) * 512].astype(np.float32)
        swz = block.reshape(m, 128, 4).transpose(1, 0, 2).reshape(128, m * 4)
        d, s = mx_quantize(swz)
        datas.append(d)
        scales[SCALE_ROWS, b * m:(b + 1) * m] = s
    want_data = np.concatenate(datas, axis=1).astype(np.float32)

    def check(outs):
        data, scale = unpack_x4(outs[0]), np.asarray(outs[1])
        ok1 = np.array_equal(data, want_data, equal_nan=True)
        ok2 = np.array_equal(scale, scales)
        return ok1 and ok2, (f"data {'equal' if ok1 else f'{int((data != want_data).sum())} differ'}, "
                             f"scales {'equal' if ok2 else f'{int((scale != scales).sum())} differ'} (exact)")
    return Case(kernel, {"tensor": x}, None, check=check, target="trn3")


@row("rmsnorm_mx_quantize_tkg", kernel="core.subkernels.rmsnorm_mx_quantize_tkg:rmsnorm_mx_quantize_tkg",
     reference="the test's golden (fp32 RMSNorm, then MX quantisation of the [128, T, H/128] layout), restated",
     source="test_rmsnorm_mx_quantize_tkg.py (32, 1, 512, None, fp16, fp16, float8_e4m3fn_x4), lnc=2, trn3",
     needs="mx")
def rmsnorm_mx_quantize_tkg(lib):
    import nki
    import nki.isa as nisa
    import nki.language as nl
    fn = lib.get("core.subkernels.rmsnorm_mx_quantize_tkg:rmsnorm_mx_quantize_tkg")

    # The test's wrapper: SBUF outputs, each core spilling its half of the tokens to HBM (the scale rows
    # only; the test's output buffers start zeroed, so this one is zeroed first).
    @nki.jit
    def kernel(inp, gamma):
        prg = nl.program_id(0)
        b, s, h = inp.shape
        t, hf = b * s, h // 128
        out_sb = nl.ndarray((128, t, hf), dtype=inp.dtype, buffer=nl.sbuf)
        q_sb = nl.ndarray((128, hf // 4, t), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        sc_sb = nl.ndarray((128, hf // 4, t), dtype=nl.uint8, buffer=nl.sbuf)
        fn(input=inp, gamma=gamma, output=out_sb, output_quant=q_sb, output_scale=sc_sb)
        out = nl.ndarray((128, t, hf), dtype=inp.dtype, buffer=nl.shared_hbm)
        q = nl.ndarray((128, hf // 4, t), dtype=nl.float8_e4m3fn_x4, buffer=nl.shared_hbm)
        sc = nl.ndarray((128, hf // 4, t), dtype=nl.uint8, buffer=nl.shared_hbm)
        zeros = nl.ndarray((128, hf // 4, t), dtype=nl.uint8, buffer=nl.sbuf)   # the test's outputs start zeroed
        nisa.memset(dst=zeros, value=0)
        if prg == 0:
            nisa.dma_copy(src=zeros, dst=sc)
        nisa.core_barrier(sc, cores=[0, 1])   # zeroed before either core writes its rows
        half = t // 2
        nisa.dma_copy(src=out_sb[:, nl.ds(half * prg, half), :], dst=out[:, nl.ds(half * prg, half), :])
        other = nl.ds(half * (1 - prg), half)
        nisa.dma_copy(src=q_sb[:, :, other], dst=q[:, :, other])
        for quadrant in nl.affine_range(4):
            nisa.dma_copy(src=sc_sb[nl.ds(quadrant * 32, 4), :, other], dst=sc[nl.ds(quadrant * 32, 4), :, other])
        return out, q, sc

    b, s, h = 32, 1, 512
    x, gamma = randn((b, s, h), np.float16, 1), randn((1, h), np.float16, 2)
    t, hf = b * s, h // 128
    x32 = x.astype(np.float32)
    rms = np.sqrt(np.mean(np.square(x32), axis=-1, keepdims=True) + 1e-6).astype(np.float32)
    norm = x32 * np.reciprocal(rms) * gamma.astype(np.float32)
    result = norm.reshape(t, hf, 128).transpose(2, 0, 1).astype(np.float16)
    tiles = hf // 4
    q_in = result.astype(np.float32).reshape(128, t, 4, tiles).transpose(0, 3, 1, 2).reshape(128, -1)
    data, scale = mx_quantize(q_in)
    want_q = data.astype(np.float32).reshape(128, tiles, t * 4)
    want_sc = np.zeros((128, tiles, t), np.uint8)
    want_sc[SCALE_ROWS] = scale.reshape(16, tiles, t)

    def check(outs):
        ok1, s1 = compare(outs[0], result, 1e-2, 1e-3)
        ok2, s2 = compare(unpack_x4(outs[1]), want_q, 1e-2, 1e-3)
        ok3 = np.array_equal(np.asarray(outs[2]), want_sc)
        return ok1 and ok2 and ok3, f"out: {s1}; out_quant: {s2}; out_scale: {'equal' if ok3 else 'differ'}"
    return Case(kernel, {"inp": x, "gamma": gamma}, None, lnc=2, check=check, target="trn3")
