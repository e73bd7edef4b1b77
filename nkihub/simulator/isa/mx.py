"""MX (microscaling) instructions of NeuronCore-v4: quantize_mx (Vector Engine) and nc_matmul_mx (Tensor
Engine). Numerics and the scale layout are in ``simulator.mx``.

Scale operands are recorded per SBUF quadrant (roles ``<name>0`` .. ``<name>3``, 4 partitions each at the
start of a quadrant) so the validator and the cost model see exactly the partitions written and read.
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator import mx
from nkihub.simulator.dtypes import PACKED
from nkihub.simulator.isa.activate import _gen4_only
from nkihub.simulator.isa.base import CROSS_PARTITION, ACCUMULATE, MATMUL, f32, register, store
from nkihub.simulator.rules import COMPUTE_RULES, Documented, documents, partitions

SCALE_DTYPES = frozenset({"uint8", "float8_e8m0fnu"})
QUANTIZE_SRC_DTYPES = frozenset({"bfloat16", "float16"})
QUANTIZE_DST_DTYPES = frozenset({"float8_e5m2_x4", "float8_e4m3fn_x4"})


def scale_roles(ins, name: str) -> list[str]:
    """The quadrant roles of scale operand ``name`` in ``ins``, in quadrant order."""
    ops = {**ins.src, **ins.dst}
    return [r for r in (f"{name}{q}" for q in range(4)) if r in ops]


def _gather_scales(ops: dict, roles: list[str], cols: int) -> np.ndarray:
    """The [rows, cols] E8M0 scales of the quadrant operands, in block-row order."""
    # Raw E8M0 codes: a float8_e8m0fnu view would read as the scale's value.
    return np.concatenate([np.asarray(ops[r]).view(np.uint8).reshape(ops[r].shape[0], -1)[:, :cols]
                           for r in roles], axis=0)


def _free(ap) -> int:
    return ap.size // max(1, partitions(ap))


# The quantize_mx and nc_matmul_mx pages' operand constraints (source None: the page of the instruction).
_DATA = ("src", "dst", "dst_scale", "stationary", "moving", "stationary_scale", "moving_scale")
MX_BUFFER = Documented("mx-buffer", _DATA, None, "MX data and scale tiles are in SBUF")
MX_DTYPE = Documented("mx-dtype", _DATA, None, "quantize_mx: src bfloat16/float16, dst float8_e5m2_x4 or "
                      "float8_e4m3fn_x4; nc_matmul_mx: 4-packed MX data; scales uint8 (E8M0)")
MX_SCALE_LAYOUT = Documented("mx-scale-layout", ("dst_scale", "stationary_scale", "moving_scale"), None,
                             "scales: 4 partitions at the start of each SBUF quadrant the data spans, one "
                             "column per packed data column")
MX_PARTITIONS = Documented("mx-partitions", ("src", "stationary"), None,
                           "the data spans a multiple of 32 partitions, at most 128")
MX_FREE = Documented("mx-free-size", ("src",), "nki.isa.quantize_mx", "src holds a multiple of 4 elements per "
                     "partition")
MX_SHAPE = Documented("mx-shape", ("dst",), "nki.isa.quantize_mx", "dst is [P, F / 4] for src [P, F]")
MM_CONTRACTION = Documented("matmul-contraction", ("moving",), "nki.isa.nc_matmul_mx",
                            "stationary and moving span the same partitions (the contraction dim)")
MM_STATIONARY = Documented("matmul-stationary-size", ("stationary",), "nki.isa.nc_matmul_mx",
                           "the stationary free size is even and at most 128")
MM_BUFFER = Documented("matmul-buffer", ("dst",), "nki.isa.nc_matmul_mx", "dst is a float32 or bfloat16 PSUM tile")
MM_MOVING = Documented("matmul-moving-size", ("moving",), "nki.isa.nc_matmul_mx",
                       "the moving free size is at most 4096 with a float32 dst, 8192 with a bfloat16 one (the "
                       "8 PSUM banks)")
MOVING_MAX = {"float32": 4096, "bfloat16": 8192}
MM_TILING = Documented("matmul-tile-position", ("stationary",), "nki.isa.nc_matmul_mx",
                       "row tiling: tile_position and tile_size both set or neither; tile_size (row_size, 128) with "
                       "row_size 128, 64 or 32; tile_position (start_row, 0), start_row a multiple of row_size "
                       "inside the 128 rows; the stationary tile fits the tile")
ROW_SIZES = (128, 64, 32)


def _tiling(ins, program, k: int, m: int) -> None:
    """nc_matmul_mx's row tiling mode (attrs ``tile_position``, ``tile_size``), for a [k, m] stationary."""
    pos, size = list(ins.attrs.get("tile_position") or ()), list(ins.attrs.get("tile_size") or ())
    if not pos and not size:
        return
    why = None
    if not pos or not size:
        why = "tile_position and tile_size must both be set (or neither: the whole 128 x 128 array)"
    elif len(size) != 2 or size[0] not in ROW_SIZES or size[1] != 128:
        why = f"tile_size {tuple(size)}: (row_size, 128) with row_size one of {ROW_SIZES}"
    elif len(pos) != 2 or pos[1] != 0 or pos[0] % size[0] or not 0 <= pos[0] < 128:
        why = f"tile_position {tuple(pos)}: (start_row, 0) with start_row a multiple of {size[0]} below 128"
    elif k > size[0] or m > size[1]:
        why = f"the stationary [{k}, {m}] does not fit the {tuple(size)} tile"
    if why:
        raise MM_TILING.fail(why, ins, program, "stationary")
MM_OUTPUT = Documented("matmul-output-shape", ("dst",), "nki.isa.nc_matmul_mx",
                       "dst is [stationary free size, moving free size]")


def _data_rules(ins, program, role: str, dtypes, what: str) -> None:
    spec = program.tensor_of(ins.src.get(role) or ins.dst.get(role))
    if spec.buffer != "sbuf":
        raise MX_BUFFER.fail(f"{what} must be in SBUF", ins, program, role)
    if spec.dtype not in dtypes:
        raise MX_DTYPE.fail(f"{what} must be one of {', '.join(sorted(dtypes))}", ins, program, role)


def _scale_rules(ins, program, name: str, data_partitions: int, cols: int, whole: bool = False) -> None:
    roles = scale_roles(ins, name)
    want = mx.scale_rows(data_partitions)
    if len(roles) != len(want):
        raise MX_SCALE_LAYOUT.fail(f"{name}: {len(want)} quadrant(s) of scales expected for {data_partitions} "
                                   "data partitions", ins, program, roles[0] if roles else None)
    for role, (_, rows) in zip(roles, want):
        _data_rules(ins, program, role, SCALE_DTYPES, f"{name} (the E8M0 scales)")
        ap = ins.src.get(role) or ins.dst.get(role)
        if partitions(ap) not in ((rows, mx.QUADRANT) if whole else (rows,)) or _free(ap) != cols:
            raise MX_SCALE_LAYOUT.fail(f"{name}: each quadrant holds [{rows}, {cols}] scales, got "
                                       f"{list(ap.shape)}", ins, program, role)


@documents(MX_BUFFER, MX_DTYPE, MX_PARTITIONS, MX_FREE, MX_SHAPE, MX_SCALE_LAYOUT)
def _quantize_rules(ins, program, target):
    """SBUF data and scales of the page's dtypes; [P, F] with P a multiple of 32, F of 4; dst [P, F/4]."""
    src, dst = ins.src["src"], ins.dst["dst"]
    _data_rules(ins, program, "src", QUANTIZE_SRC_DTYPES, "the quantize_mx input")
    _data_rules(ins, program, "dst", QUANTIZE_DST_DTYPES, "the quantize_mx output (4-packed FP8)")
    p, f = partitions(src), _free(src)
    if p % mx.QUADRANT or p > target.partitions:
        raise MX_PARTITIONS.fail(f"the input spans {p} partitions; a multiple of 32, at most {target.partitions}",
                                 ins, program, "src")
    if f % mx.PACK:
        raise MX_FREE.fail(f"the input has {f} elements per partition; a multiple of 4", ins, program, "src")
    if partitions(dst) != p or _free(dst) != f // mx.PACK:
        raise MX_SHAPE.fail(f"the output must be [{p}, {f // mx.PACK}] (4 input elements per packed element)",
                            ins, program, "dst")
    _scale_rules(ins, program, "dst_scale", p, f // mx.PACK, whole=True)


def _quantize(ins, src, dst, ctx):
    """dst = the src tile [P, F] (bf16/fp16) MX-quantized to 4-packed FP8 [P, F/4], one E8M0 scale per
    block of 8 partitions x 4 elements written to dst_scale (4 partitions per SBUF quadrant); a quadrant
    operand spanning the whole quadrant gets zeros past its scales (an assumption: the ISA page says only
    that those partitions receive no scales; nki-library's mxfp_load test expects zeros there)."""
    x = f32(src["src"]).reshape(src["src"].shape[0], -1)
    bits, scale = mx.quantize(x, ins.attrs["dst_dtype"])
    out = dst["dst"]
    out[...] = bits.reshape(out.shape).view(out.dtype)
    row = 0
    for role in scale_roles(ins, "dst_scale"):
        view = dst[role]
        n = min(view.shape[0], mx.SCALES_PER_QUADRANT, scale.shape[0] - row)
        view[:n] = scale[row:row + n].reshape((n,) + view.shape[1:]).view(view.dtype)
        view[n:].view(np.uint8)[...] = 0     # E8M0 code 0 (a float8_e8m0fnu zero would be NaN)
        row += n


def _quantize_cost(ins, program, target):
    # Not published: one Vector pass over the input (the block max and the division stream with it).
    src = ins.src["src"]
    return cr.seconds(cr.vector_cycles(_free(src) * cr.stride_slowdown(ins, program)), target, "vector")


register("quantize_mx", engines={"vector"}, execute=_quantize, cost=_quantize_cost,
         rules=COMPUTE_RULES + (_gen4_only, _quantize_rules), categories={CROSS_PARTITION})


@documents(MX_BUFFER, MX_DTYPE, MM_CONTRACTION, MX_PARTITIONS, MM_STATIONARY, MM_BUFFER, MM_MOVING, MM_OUTPUT,
           MX_SCALE_LAYOUT, MM_TILING)
def _matmul_mx_rules(ins, program, target):
    """Packed SBUF data of the same K (a multiple of 32), M even <= 128, N within PSUM, a PSUM dst [M, N]."""
    st, mv, dst = ins.src["stationary"], ins.src["moving"], ins.dst["dst"]
    for role in ("stationary", "moving"):
        _data_rules(ins, program, role, frozenset(PACKED), f"the {role} matrix (4-packed MX data)")
    k = partitions(st)
    if partitions(mv) != k:
        raise MM_CONTRACTION.fail(f"the contraction (partition) dims differ: stationary has {k}, moving has "
                                  f"{partitions(mv)}", ins, program, "moving")
    if k % mx.QUADRANT or k > target.partitions:
        raise MX_PARTITIONS.fail(f"the contraction dim spans {k} partitions; a multiple of 32, at most "
                                 f"{target.partitions}", ins, program, "stationary")
    m, n = _free(st), _free(mv)
    if m > target.stationary_fmax or m % 2:
        raise MM_STATIONARY.fail(f"the stationary free size is {m}; even, at most {target.stationary_fmax}",
                                 ins, program, "stationary")
    dspec = program.tensor_of(dst)
    if dspec.buffer != "psum" or dspec.dtype not in ("float32", "bfloat16"):
        raise MM_BUFFER.fail("the output must be a float32 or bfloat16 PSUM tile", ins, program, "dst")
    n_max = MOVING_MAX[dspec.dtype]
    if n > n_max:
        raise MM_MOVING.fail(f"the moving free size is {n}; at most {n_max} with a {dspec.dtype} output",
                             ins, program, "moving")
    if partitions(dst) != m or _free(dst) != n:
        raise MM_OUTPUT.fail(f"the output must be [{m}, {n}] (stationary free x moving free)", ins, program, "dst")
    _scale_rules(ins, program, "stationary_scale", k, m)
    _scale_rules(ins, program, "moving_scale", k, n)
    _tiling(ins, program, k, m)


def _scaled(bits: np.ndarray, dtype: str, scales: np.ndarray) -> np.ndarray:
    """[K * 4, F] float32 contraction rows of packed [K, F] data with E8M0 block scales [K / 8, F]."""
    k, f = bits.shape
    vals = mx.unpack(bits, dtype).reshape(k, f, mx.PACK)
    factor = np.repeat(mx.scales_to_factors(scales), mx.BLOCK_PARTITIONS, axis=0)[:, :, None]
    return (vals * factor).astype(np.float32).transpose(0, 2, 1).reshape(k * mx.PACK, f)


def _matmul_mx(ins, src, dst, ctx):
    """dst[M, N] (PSUM) = sum over partitions k and packed lanes q of stationary[k, m, q] * moving[k, n, q],
    each element times its block's E8M0 scale (blocks of 8 partitions x one packed element); fp32
    accumulation; ``accumulate`` adds to dst."""
    st, mv, out = src["stationary"], src["moving"], dst["dst"]
    k = st.shape[0]
    st_bits, mv_bits = np.asarray(st).reshape(k, -1), np.asarray(mv).reshape(k, -1)
    a = _scaled(st_bits, ins.attrs["stationary_dtype"],
                _gather_scales(src, scale_roles(ins, "stationary_scale"), st_bits.shape[1]))
    b = _scaled(mv_bits, ins.attrs["moving_dtype"],
                _gather_scales(src, scale_roles(ins, "moving_scale"), mv_bits.shape[1]))
    res = a.T @ b
    if ins.attrs.get("accumulate"):
        res = f32(out).reshape(res.shape) + res
    store(out, res.reshape(out.shape))


def _matmul_mx_cost(ins, program, target):
    # Each packed element carries 4 products, so the array streams the moving operand at the bf16 rate
    # while doing 4x the work (hardware.md: ~315 MX TFLOPS against ~79 bf16 on trn3).
    n = _free(ins.src["moving"]) * cr.stride_slowdown(ins, program, roles=("moving", "dst"))
    return cr.seconds(cr.matmul_cycles(n, fp32=False), target, "tensor")


register("nc_matmul_mx", engines={"tensor"}, execute=_matmul_mx, cost=_matmul_mx_cost,
         rules=(_matmul_mx_rules,) + COMPUTE_RULES + (_gen4_only,), categories={MATMUL, ACCUMULATE},
         reads_dst=lambda ins: bool(ins.attrs.get("accumulate")))
