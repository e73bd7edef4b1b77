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
     reference="the test's golden (fp32 RMSNorm, then MX quantisation of the [128, T, H/128] layout), restated; "
               "judged on out and out_scale, as the test's golden holds only those",
     source="test_rmsnorm_mx_quantize_tkg.py (32, 1, 512, None, fp16, fp16, float8_e4m3fn_x4), lnc=2, trn3",
     needs="mx")
def rmsnorm_mx_quantize_tkg(lib):
    import nki
    import nki.isa as nisa
    import nki.language as nl
    fn = lib.get("core.subkernels.rmsnorm_mx_quantize_tkg:rmsnorm_mx_quantize_tkg")

    # The test's wrapper: SBUF outputs, each core spilling its half of the tokens to HBM (the scale rows
    # only).
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
        # The test's host buffers start zeroed; here core 0 zeroes the 28 rows of each quadrant that hold
        # no scales, which no store touches, so no ordering between the cores is needed.
        zeros = nl.ndarray((28, hf // 4, t), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=zeros, value=0)
        if prg == 0:
            for quadrant in nl.affine_range(4):
                nisa.dma_copy(src=zeros, dst=sc[nl.ds(quadrant * 32 + 4, 28), :, :])
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

    # Judged as the test judges: its golden holds "out" and "out_scale" only (out_quant is left out of
    # the comparison on hardware), so out_quant is reported, not judged. The kernel rounds x * gamma to
    # fp16 before quantising, the golden quantises the fp32 value, so a few fp8 values sit one step apart.
    def check(outs):
        ok1, s1 = compare(outs[0], result, 1e-2, 1e-3)
        q = unpack_x4(outs[1])
        off = int((~np.isclose(q, want_q, rtol=1e-2, atol=1e-3)).sum())
        ok3 = np.array_equal(np.asarray(outs[2]), want_sc)
        return ok1 and ok3, (f"out: {s1}; out_scale: {'equal' if ok3 else 'differ'}; out_quant (not judged, "
                             f"as in the test): {off} of {q.size} fp8 values off the fp32-rounded golden")
    return Case(kernel, {"inp": x, "gamma": gamma}, None, lnc=2, check=check, target="trn3")


# -- the MXFP4 projections of the MLP's token-generation path --------------------------------------------
def _pack(values: np.ndarray, fmt, bits: int) -> np.ndarray:
    """Values already representable in ``fmt`` (an ml_dtypes dtype), four consecutive ones along the last
    axis packed little-endian into one element (uint32 of four fp8 bytes, uint16 of four fp4 nibbles),
    the layout the references' unpackers read."""
    codes = values.astype(np.float32).astype(fmt).view(np.uint8).astype(np.uint32) & ((1 << bits) - 1)
    codes = codes.reshape(values.shape[:-1] + (values.shape[-1] // 4, 4))
    packed = sum(codes[..., i] << (bits * i) for i in range(4))
    return packed.astype(np.uint32 if bits == 8 else np.uint16)


def _tagged(bits: np.ndarray, name: str) -> np.ndarray:
    """Packed bits as a host array of the MX dtype ``name`` (what a neuron_dtypes x4 array is to AWS)."""
    from nkihub.simulator.dtypes import packed_host_dtype
    return np.ascontiguousarray(bits).view(packed_host_dtype(name))


def _mx_operand(rng, rows: int, cols: int, fmt, bits: int, fmt_max: float):
    """Random MX data [rows, cols] (cols packed by 4) and E8M0 scales [rows // 8, cols // 4], scaled so the
    dequantised values stay below 1 in magnitude, as the tests' generator keeps them."""
    values = rng.uniform(-fmt_max, fmt_max, (rows, cols))
    top = int(np.log2(1.0 / fmt_max) + 127)
    scales = rng.integers(top - 10, top + 1, (rows // 8, cols // 4)).astype(np.uint8)
    return _pack(values, fmt, bits), scales


@row("mlp_gate_up_projection_mx",
     kernel="core.mlp.mlp_tkg.gate_up_projection_mx_shard_H:gate_up_projection_mx_tp_shard_H",
     reference="core.mlp.mlp_tkg.mlp_proj_mxfp4_torch:gate_up_proj_mxfp4_torch_ref",
     source="test_mlp_proj_mxfp4.py gate_up [BxS 4, H 3072, I 192], lnc=2, trn3", needs="mx")
def mlp_gate_up_projection_mx(lib):
    import nki
    import nki.isa as nisa
    import nki.language as nl
    proj = lib.get("core.mlp.mlp_tkg.gate_up_projection_mx_shard_H:gate_up_projection_mx_tp_shard_H")
    ProjConfig = lib.get("core.mlp.mlp_tkg.projection_mx_constants:ProjConfig")
    TensorView = lib.get("core.utils.tensor_view:TensorView")
    ref = lib.get("core.mlp.mlp_tkg.mlp_proj_mxfp4_torch:gate_up_proj_mxfp4_torch_ref")

    # The test's wrapper: each core loads its half of the H tiles of the hidden state and its scales (4
    # rows at the start of each quadrant), the bias zero-padded to 128 partitions; core 0 stores, and
    # zeroes the padding rows of the last tile.
    @nki.jit
    def kernel(hidden_qtz, hidden_scale, weight_qtz, weight_scale, bias, H, I, BxS):
        n, prg = nl.num_programs(0), nl.program_id(0)
        cfg = ProjConfig(H, I, BxS, n, prg)
        tiles = H // 512 // n
        mine = slice(prg * tiles, (prg + 1) * tiles)
        hidden_sb = nl.ndarray((128, tiles, BxS), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        nisa.dma_copy(dst=hidden_sb, src=hidden_qtz[:, mine, :])
        bias_sb = nl.ndarray((128, -(-I // 512), 4), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(dst=bias_sb, value=0.0)
        nisa.dma_copy(dst=bias_sb[:bias.shape[0], :, :], src=bias)
        scale_sb = nl.ndarray(hidden_sb.shape, dtype=nl.uint8, buffer=nl.sbuf)
        for q in nl.affine_range(4):
            nisa.dma_copy(dst=scale_sb[q * 32:q * 32 + 4, :, :], src=hidden_scale[q * 4:q * 4 + 4, mine, :])
        res = proj(hidden_qtz_sb=TensorView(hidden_sb), hidden_scale_sb=TensorView(scale_sb),
                   weight_qtz=TensorView(weight_qtz), weight_scale=TensorView(weight_scale),
                   bias_sb=TensorView(bias_sb), cfg=cfg)
        out = nl.ndarray(res.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        if prg == 0:
            nisa.dma_copy(dst=out, src=res)
            if I % 512:   # the rows past I in the last 512-row tile are padding: zeroed, as the test does
                pad = (512 - I % 512) // 4
                zeros = nl.ndarray([pad, 1, BxS, 4], dtype=out.dtype, buffer=nl.sbuf)
                nisa.memset(dst=zeros, value=0.0)
                nisa.dma_copy(dst=out[128 - pad:, I // 512, :, :], src=zeros)
        return out

    bxs, h, i = 4, 3072, 192
    rng = np.random.default_rng(42)
    hq, hs = _mx_operand(rng, 128, h // 128 * bxs, ml_dtypes.float8_e5m2, 8, 57344.0)
    wq, ws = _mx_operand(rng, 128, h // 128 * i, ml_dtypes.float4_e2m1fn, 4, 6.0)
    bias = rng.random((i // 4, 1, 4)).astype(np.float32).astype(ml_dtypes.bfloat16)
    inputs = {"hidden_qtz": _tagged(hq.reshape(128, -1, bxs), "float8_e5m2_x4"),
              "hidden_scale": hs.reshape(16, -1, bxs),
              "weight_qtz": _tagged(wq.reshape(128, -1, i), "float4_e2m1fn_x4"), "weight_scale": ws.reshape(16, -1, i), "bias": bias,
              "H": h, "I": i, "BxS": bxs}

    def expected():
        import torch
        out = ref(hidden_qtz=inputs["hidden_qtz"], hidden_scale=torch.from_numpy(inputs["hidden_scale"]),
                  weight_qtz=inputs["weight_qtz"], weight_scale=torch.from_numpy(inputs["weight_scale"]),
                  bias=torch.from_numpy(bias.astype(np.float32)), H=h, I=i, BxS=bxs)["out"]
        return [out.numpy().astype(ml_dtypes.bfloat16)]
    return Case(kernel, inputs, expected, lnc=2, rtol=2e-2, atol=1e-5, target="trn3")


@row("mlp_down_projection_mx", kernel="core.mlp.mlp_tkg.down_projection_mx_shard_H:down_projection_mx_shard_H",
     reference="core.mlp.mlp_tkg.mlp_proj_mxfp4_torch:down_proj_mxfp4_torch_ref",
     source="test_mlp_proj_mxfp4.py down [BxS 4, H 3072, I 192, stream-shuffle broadcast], lnc=2, trn3",
     needs="mx")
def mlp_down_projection_mx(lib):
    import nki
    import nki.isa as nisa
    import nki.language as nl
    proj = lib.get("core.mlp.mlp_tkg.down_projection_mx_shard_H:down_projection_mx_shard_H")
    ProjConfig = lib.get("core.mlp.mlp_tkg.projection_mx_constants:ProjConfig")
    ref = lib.get("core.mlp.mlp_tkg.mlp_proj_mxfp4_torch:down_proj_mxfp4_torch_ref")

    # The test's wrapper: the whole intermediate and this core's half of the bias on chip; core 0 stores.
    @nki.jit
    def kernel(inter, weight_qtz, weight_scale, bias, H, I, BxS, use_stream_shuffle_broadcast):
        n, prg = nl.num_programs(0), nl.program_id(0)
        cfg = ProjConfig(H, I, BxS, n, prg, use_stream_shuffle_broadcast=use_stream_shuffle_broadcast)
        hs = H // n
        inter_sb = nl.ndarray((128, -(-I // 512), BxS, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=inter_sb, src=inter)
        bias_sb = nl.ndarray((1, hs), dtype=bias.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=bias_sb, src=bias[:, prg * hs:(prg + 1) * hs])
        res = proj(inter_sb=inter_sb, weight=weight_qtz, weight_scale=weight_scale, bias_sb=bias_sb, cfg=cfg)
        out = nl.ndarray([BxS, H], dtype=nl.bfloat16, buffer=nl.shared_hbm)
        if prg == 0:
            for t in nl.affine_range(-(-BxS // 128)):
                rows = min(128, BxS - t * 128)
                nisa.dma_copy(dst=out[t * 128:t * 128 + rows, :], src=res[:rows, t, :])
        return out

    bxs, h, i = 4, 3072, 192
    rng = np.random.default_rng(43)
    # The intermediate: bf16 values exactly representable in MXFP8 (so quantising it loses nothing), in
    # the kernel's [128, I/512 tiles, BxS, 4] layout; rows past I/4 hold a filler the kernel must ignore.
    vals = rng.uniform(-1, 1, (i // 4, bxs, 4)).astype(np.float32).astype(ml_dtypes.float8_e5m2)
    inter = np.full((128, 1, bxs, 4), 6767, np.float32).astype(ml_dtypes.bfloat16)
    inter[:i // 4, 0] = vals.astype(np.float32).astype(ml_dtypes.bfloat16)
    wq, ws = _mx_operand(rng, i // 4, h * 4, ml_dtypes.float4_e2m1fn, 4, 6.0)
    bias = rng.random((1, h)).astype(np.float32).astype(ml_dtypes.bfloat16)
    inputs = {"inter": inter, "weight_qtz": _tagged(wq.reshape(i // 4, 1, h), "float4_e2m1fn_x4"), "weight_scale": ws.reshape(i // 32, 1, h),
              "bias": bias, "H": h, "I": i, "BxS": bxs, "use_stream_shuffle_broadcast": True}

    def expected():
        import torch
        out = ref(inter=torch.from_numpy(inter.astype(np.float32)), weight_qtz=inputs["weight_qtz"],
                  weight_scale=torch.from_numpy(inputs["weight_scale"]),
                  bias=torch.from_numpy(bias.astype(np.float32)), H=h, I=i, BxS=bxs)["out"]
        return [out.numpy().astype(ml_dtypes.bfloat16)]
    return Case(kernel, inputs, expected, lnc=2, rtol=2e-2, atol=1e-5, target="trn3")
