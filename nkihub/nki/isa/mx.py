"""``nki.isa`` MX (microscaling) instructions of NeuronCore-v4: ``quantize_mx`` and ``nc_matmul_mx``.

Scale tiles follow the hardware layout (``simulator.mx``): the scales of data partitions 8r..8r+7 sit
in scale-tile partition (r // 4) * 32 + r % 4. Each quadrant's 4 scale partitions become one operand of
the instruction, so exactly the partitions read and written are recorded.
"""
from __future__ import annotations

from nkihub.nki import tracing
from nkihub.nki.isa import _tile, emit
from nkihub.nki.tensor import NkiTensor
from nkihub.simulator import mx
from nkihub.simulator.errors import KernelRuleError
from nkihub.simulator.isa.mx import MX_PARTITIONS, MX_SCALE_LAYOUT


def _free_flattened(t: NkiTensor) -> NkiTensor:
    """``t`` as [partitions, free elements]: its free dims must run back to back in memory (dims of size
    1 do not count, so a slice such as ``scale[:, i:i+1, a:b]`` of a bigger tile qualifies)."""
    free = [(st, n) for st, n in t.dims[1:] if n != 1]
    if any(outer[0] != inner[0] * inner[1] for outer, inner in zip(free, free[1:])):
        return t.reshape((t.shape[0], t.size // max(1, t.shape[0])))   # refused with the view's strides
    step = free[-1][0] if free else 1
    return NkiTensor(t.spec, t.offset, (t.dims[0], (step, t.size // max(1, t.shape[0]))))


def _scale_operands(scale: NkiTensor, role: str, data_partitions: int, cols: int, whole: bool = False,
                    opcode: str = "nc_matmul_mx") -> dict:
    """{role0: scale[0:r0, :cols], role1: scale[32:32+r1, :cols], ...} for data of ``data_partitions``;
    with ``whole`` (a written scale tile), each quadrant's operand spans all of the quadrant the tile has
    (up to 32 partitions): the partitions past the scales are written too (see quantize_mx)."""
    if data_partitions % mx.QUADRANT:
        raise KernelRuleError("mx-partitions", f"MX data spans {data_partitions} partitions; a multiple of 32 "
                              f"(source: {MX_PARTITIONS.page(opcode)})", operand=role, shape=scale.shape,
                              loc=tracing.caller_loc())
    flat = scale if scale.ndim == 2 else _free_flattened(scale)
    out = {}
    for q, (start, rows) in enumerate(mx.scale_rows(data_partitions)):
        if start + rows > flat.shape[0] or cols > flat.shape[1]:
            raise KernelRuleError("mx-scale-layout", f"{role} of shape {scale.shape} has no [{rows}, {cols}] "
                                  f"scales at partition {start} (quadrant {q}); scales of data spanning "
                                  f"{data_partitions} partitions take 4 partitions at the start of each quadrant "
                                  f"(source: {MX_SCALE_LAYOUT.page(opcode)})",
                                  operand=role, shape=scale.shape, dtype=scale.spec.dtype, buffer=scale.buffer,
                                  loc=tracing.caller_loc())
        end = min(start + mx.QUADRANT, flat.shape[0]) if whole else start + rows
        out[f"{role}{q}"] = flat[start:end, 0:cols]
    return out


def quantize_mx(dst, src, dst_scale, name=None):
    """Quantize ``src`` [P, F] (bfloat16/float16, SBUF; P a multiple of 32 up to 128, F of 4) to MXFP8:
    ``dst`` [P, F/4] float8_e5m2_x4 or float8_e4m3fn_x4 and one E8M0 scale (uint8 or float8_e8m0fnu)
    per block of 8 partitions x 4 elements in ``dst_scale`` ([P/8, F/4] for 32 partitions, else
    [P, F/4] with 4 scale partitions per quadrant). Vector Engine, NeuronCore-v4.

    The rest of each quadrant of ``dst_scale`` (partitions 4..31 of it, over the same columns) is written
    with zeros: the ISA page only says those partitions receive no scales; nki-library's tests (mxfp_load)
    read the whole scale tile and expect zeros there, which is what is assumed here."""
    _tile(dst, "dst"), _tile(src, "src"), _tile(dst_scale, "dst_scale")
    cols = dst.size // max(1, dst.shape[0])
    dsts = {"dst": dst, **_scale_operands(dst_scale, "dst_scale", src.shape[0], cols, whole=True,
                                          opcode="quantize_mx")}
    emit("quantize_mx", "vector", dsts, {"src": src}, {"dst_dtype": dst.spec.dtype})
    return dst


def nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None, tile_size=None,
                 accumulate=None, name=None):
    """dst[M, N] (PSUM, float32 or bfloat16) = stationary[K, M].T @ moving[K, N] for 4-packed MX data
    (float8_e5m2_x4, float8_e4m3fn_x4 or float4_e2m1fn_x4, SBUF), contracting over K partitions and the 4
    packed elements, each block of 8 partitions x 1 packed element scaled by its E8M0 scale. K a multiple
    of 32 up to 128; M even, up to 128; N up to 4096 (8192 with a bfloat16 dst: the 8 PSUM banks).
    ``accumulate`` as for nc_matmul. Tensor Engine, NeuronCore-v4."""
    b = tracing.require("nisa.nc_matmul_mx")
    for t, role in ((dst, "dst"), (stationary, "stationary"), (moving, "moving"),
                    (stationary_scale, "stationary_scale"), (moving_scale, "moving_scale")):
        _tile(t, role)
    if accumulate is None:
        accumulate = b.psum_accumulating(dst.to_ap()) if dst.buffer == "psum" else False
    k = stationary.shape[0]
    src = {"stationary": stationary, "moving": moving,
           **_scale_operands(stationary_scale, "stationary_scale", k, stationary.size // max(1, k)),
           **_scale_operands(moving_scale, "moving_scale", k, moving.size // max(1, k))}
    emit("nc_matmul_mx", "tensor", {"dst": dst}, src,
         {"accumulate": bool(accumulate), "stationary_dtype": stationary.spec.dtype,
          "moving_dtype": moving.spec.dtype, "tile_position": list(tile_position or ()),
          "tile_size": list(tile_size or ())})
    return dst
