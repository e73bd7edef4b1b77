"""``nki.isa`` (nisa): one function per engine instruction, destination first, as in AWS NKI 0.3+.

Each call normalises its arguments and emits one instruction into the kernel being traced; it returns
``dst`` so calls can be chained. Immediates go to the instruction's attributes, tiles to its operands.
"""
from __future__ import annotations

from enum import Enum, IntEnum

from nkihub.nki import tracing
from nkihub.nki.ops import op_name
from nkihub.nki.tensor import NkiTensor
from nkihub.simulator.errors import KernelRuleError


class engine(Enum):
    """NeuronCore engines."""
    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    dma = "dma"
    sync = "sync"
    unknown = "unknown"


class reduce_cmd(Enum):
    """Accumulator register commands of the Vector/Scalar engines."""
    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"
    load_reduce = "load_reduce"


class nc_version(IntEnum):
    """NeuronCore generations: gen2 (trn1/inf2), gen3 (trn2), gen4 (trn3). Ordered, as kernels branch on
    ``get_nc_version() >= nc_version.gen3`` (or ``>= 3``); ``nc_version("gen3")`` maps a target's name."""
    gen2 = 2
    gen3 = 3
    gen4 = 4

    @classmethod
    def _missing_(cls, value):
        return cls.__members__.get(value) if isinstance(value, str) else None


class dge_mode(Enum):
    """DMA descriptor generation modes (the cost model paces hwdge DMAs by their DGE on v3+; the rest alike)."""
    unknown = "unknown"
    swdge = "swdge"
    hwdge = "hwdge"
    none = "none"


class oob_mode(Enum):
    """Out-of-bounds handling of indirect DMA."""
    error = "error"
    skip = "skip"


class matmul_perf_mode(Enum):
    """Tensor Engine performance modes."""
    none = "none"
    double_row = "double_row"


class dma_engine(Enum):
    """DMA engines that can carry a transfer."""
    dma = "dma"
    gpsimd_dma = "gpsimd_dma"


tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = (
    engine.tensor, engine.vector, engine.scalar, engine.gpsimd, engine.unknown)


class NkiValidationError(ValueError):
    """Raised when hardware constraints are violated (nkihub raises ``nki.errors.KernelRuleError``,
    a subclass of ValueError, for those)."""


def get_nc_version() -> nc_version:
    """The nc_version of the target being traced for (or of the default target)."""
    b = tracing.current()
    if b is not None:
        return nc_version(b.target.nc_version)
    from nkihub.simulator.targets import get_target
    return nc_version(get_target().nc_version)


# -- helpers -------------------------------------------------------------------------------------------
def refuse(rule: str, message: str, role: str | None = None, x=None) -> KernelRuleError:
    """The error for a call the nisa page does not allow, at the author's line (operand ``role``, tile ``x``)."""
    spec = x.spec if isinstance(x, NkiTensor) else None
    return KernelRuleError(rule, message, operand=role, shape=getattr(x, "shape", None),
                           dtype=spec.dtype if spec else None, buffer=spec.buffer if spec else None,
                           loc=tracing.caller_loc(), tensor=spec.label if spec else None)


def _tile(x, role: str) -> NkiTensor:
    if not isinstance(x, NkiTensor):
        raise TypeError(f"'{role}' must be a tile (NkiTensor), got {type(x).__name__}")
    return x


def _engine(e, default: str) -> str:
    if e is None:
        return default
    name = e.value if isinstance(e, Enum) else str(e)
    return default if name in ("unknown", "") else name


def _scalar_or_tile(value, role: str, src: dict, attrs: dict) -> None:
    if value is None:
        return
    if isinstance(value, NkiTensor):
        src[role] = value.to_ap()
    else:
        attrs[role] = float(value)


def _cmd(value) -> str:
    return value.value if isinstance(value, Enum) else str(value)


def emit(opcode: str, engine_name: str, dst: dict, src: dict, attrs: dict | None = None):
    """Emit one instruction into the kernel being traced (``dst``/``src`` map roles to tiles)."""
    b = tracing.require(f"nisa.{opcode}")
    return b.emit(opcode, engine_name, {k: v.to_ap() for k, v in dst.items()},
                  {k: (v.to_ap() if isinstance(v, NkiTensor) else v) for k, v in src.items()}, attrs or {})


# -- instructions ---------------------------------------------------------------------------------------
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(),
              perf_mode=matmul_perf_mode.none, name=None):
    """dst[M, N] (PSUM) = stationary[K, M].T @ moving[K, N] (SBUF) on the Tensor Engine.

    ``accumulate``: True adds to dst, False overwrites, None (default) overwrites on the first write to a
    PSUM location and accumulates afterwards. K <= 128, M <= 128, N <= 512 (fp32 dst).
    ``perf_mode=matmul_perf_mode.double_row`` (fp8 inputs, NeuronCore-v3 and newer): each partition
    carries two rows of the contraction, stationary [K, 2, M] and moving [K, 2, N], so dst[M, N] sums
    over 2K rows at twice the throughput.
    """
    b = tracing.require("nisa.nc_matmul")
    _tile(dst, "dst"), _tile(stationary, "stationary"), _tile(moving, "moving")
    perf_mode = "double_row" if _cmd(perf_mode) == "double_row_gen3" else perf_mode   # the 2.2x spelling
    if accumulate is None:
        accumulate = b.psum_accumulating(dst.to_ap()) if dst.buffer == "psum" else False
    emit("nc_matmul", "tensor", {"dst": dst}, {"stationary": stationary, "moving": moving},
         {"accumulate": bool(accumulate), "is_stationary_onezero": bool(is_stationary_onezero),
          "is_moving_onezero": bool(is_moving_onezero), "is_transpose": bool(is_transpose),
          "perf_mode": _cmd(perf_mode), "tile_position": list(tile_position), "tile_size": list(tile_size)})
    return dst


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    """dst[F, P] = data[P, F]: on the Tensor Engine (SBUF to PSUM, up to 128x128) or the Vector Engine
    (up to 32x32). The default picks the Vector Engine when the tile fits, else the Tensor Engine."""
    _tile(dst, "dst"), _tile(data, "data")
    default = "vector" if max(data.shape[0], data.size // max(1, data.shape[0])) <= 32 and \
        dst.buffer != "psum" else "tensor"
    emit("nc_transpose", _engine(engine, default), {"dst": dst}, {"data": data})
    return dst


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=reduce_cmd.idle, name=None):
    """dst = op(data * scale + bias) on the Scalar Engine. ``bias``: a [P, 1] tile or a number; ``scale``:
    a number or a [P, 1] tile. With ``reduce_res`` ([P, 1]) the result is also reduced along the free
    axes with ``reduce_op`` (default add)."""
    _tile(dst, "dst"), _tile(data, "data")
    src, attrs = {"data": data}, {"op": op_name(op)}
    _scalar_or_tile(bias, "bias", src, attrs)
    _scalar_or_tile(scale, "scale", src, attrs)
    dsts = {"dst": dst}
    if reduce_res is not None:
        dsts["reduce_res"] = _tile(reduce_res, "reduce_res")
        attrs["reduce_op"] = op_name(reduce_op) if reduce_op is not None else "add"
        attrs["reduce_cmd"] = _cmd(reduce_cmd)
    emit("activation", "scalar", dsts, src, attrs)
    return dst


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """activation with a reduction of the result into ``reduce_res``."""
    return activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                      reduce_cmd=reduce_cmd.reset_reduce)


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    """dst = data1 <op> data2 elementwise (Vector Engine, or GpSimd)."""
    _tile(dst, "dst"), _tile(data1, "data1"), _tile(data2, "data2")
    emit("tensor_tensor", _engine(engine, "vector"), {"dst": dst}, {"data1": data1, "data2": data2},
         {"op": op_name(op)})
    return dst


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None):
    """dst = (data <op0> operand0) <op1> operand1; operands are numbers or [P, 1] tiles; ``reverse``
    swaps an operator's operands."""
    _tile(dst, "dst"), _tile(data, "data")
    src, attrs = {"data": data}, {"op0": op_name(op0), "reverse0": bool(reverse0)}
    _scalar_or_tile(operand0, "operand0", src, attrs)
    if op1 is not None:
        attrs.update(op1=op_name(op1), reverse1=bool(reverse1))
        _scalar_or_tile(operand1, "operand1", src, attrs)
    emit("tensor_scalar", _engine(engine, "vector"), {"dst": dst}, src, attrs)
    return dst


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    """dst = reduce(op, data) along free ``axis`` (an int or tuple; not 0), optionally negated."""
    _tile(dst, "dst"), _tile(data, "data")
    axis = [int(a) for a in axis] if isinstance(axis, (tuple, list)) else int(axis)
    emit("tensor_reduce", "vector", {"dst": dst}, {"data": data},
         {"op": op_name(op), "axis": axis, "negate": bool(negate), "keepdims": bool(keepdims)})
    return dst


def tensor_copy(dst, src, engine=engine.unknown, name=None, dtype=None):
    """dst = src within SBUF/PSUM (Vector, Scalar or GpSimd engine); casts through fp32 if dtypes differ.

    ``dtype`` (as the matrix-multiplication tutorial passes it): the engine's output dtype; when it differs
    from ``dst.dtype`` the values are rounded to ``dtype`` and then written in ``dst``'s dtype."""
    _tile(dst, "dst"), _tile(src, "src")
    attrs = {}
    if dtype is not None:
        from nkihub.nki.dtypes import dtype_of
        from nkihub.simulator.dtypes import dtype_name
        out = dtype_name(dtype_of(dtype))
        if out != dst.spec.dtype:
            attrs["dtype"] = out
    emit("tensor_copy", _engine(engine, "vector"), {"dst": dst}, {"src": src}, attrs)
    return dst


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    """dst = src where predicate is nonzero (reversed by ``reverse_pred``); elsewhere dst is unchanged."""
    _tile(dst, "dst"), _tile(predicate, "predicate")
    srcs, attrs = {"predicate": predicate}, {"reverse_pred": bool(reverse_pred)}
    if isinstance(src, NkiTensor):
        srcs["src"] = src
    else:
        attrs["value"] = float(src)
    emit("tensor_copy_predicated", "vector", {"dst": dst}, srcs, attrs)
    return dst


def memset(dst, value, engine=engine.unknown, name=None):
    """Fill dst with a constant (Vector or GpSimd engine)."""
    _tile(dst, "dst")
    emit("memset", _engine(engine, "vector"), {"dst": dst}, {}, {"value": float(value)})
    return dst


def reciprocal(dst, data, name=None):
    """dst = 1 / data (Vector Engine)."""
    _tile(dst, "dst"), _tile(data, "data")
    emit("reciprocal", "vector", {"dst": dst}, {"data": data})
    return dst


def _pattern(pattern) -> list:
    return [[int(s), int(n)] for s, n in pattern]


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """dst[p, i...] = offset + channel_multiplier * p + sum(step_k * i_k), ``pattern`` = [[step, num], ...]
    (GpSimd Engine)."""
    _tile(dst, "dst")
    emit("iota", "gpsimd", {"dst": dst}, {}, {"pattern": _pattern(pattern), "offset": int(offset),
                                               "channel_multiplier": int(channel_multiplier)})
    return dst


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op="equal", offset=0,
                  name=None):
    """dst = on_true_tile where cmp_op(offset + channel_multiplier * p + sum(step_k * i_k), 0), else
    on_false_value (GpSimd Engine). Used for causal masks."""
    _tile(dst, "dst"), _tile(on_true_tile, "on_true_tile")
    emit("affine_select", "gpsimd", {"dst": dst}, {"on_true_tile": on_true_tile},
         {"pattern": _pattern(pattern), "offset": int(offset), "channel_multiplier": int(channel_multiplier),
          "cmp_op": op_name(cmp_op), "on_false_value": float(on_false_value)})
    return dst


def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             engine=engine.unknown, name=None, dst_rmw_op=None):
    """dst = src through a DMA queue (HBM <-> SBUF or within either); equal element counts; dtypes
    convert through fp32. One side may be an indirect view (``t.ap(..., scalar_offset=/vector_offset=)``):
    its addresses come from run-time offsets, and ``oob_mode=oob_mode.skip`` skips the elements that fall
    outside the tensor (``error``, the default, stops the run). ``dst_rmw_op=nl.add`` (np.add) adds src
    into dst instead of overwriting it (2.28's page; only with ``oob_mode.error``)."""
    from nkihub.nki.ops import op_name
    _tile(dst, "dst"), _tile(src, "src")
    rmw = {"dst_rmw_op": op_name(dst_rmw_op)} if dst_rmw_op is not None else {}
    if dst.indirect is not None or src.indirect is not None:
        from nkihub.nki import indirect
        indirect.dma_copy(dst, src, _cmd(oob_mode), _cmd(dge_mode), **rmw)
        return dst
    emit("dma_copy", "dma", {"dst": dst}, {"src": src}, {"dge_mode": _cmd(dge_mode), **rmw})
    return dst


def bn_stats(dst, data, name=None):
    """dst[P, 6] = (count, mean, var*count) of the even and of the odd elements of data[P, F<=512]."""
    _tile(dst, "dst"), _tile(data, "data")
    emit("bn_stats", "vector", {"dst": dst}, {"data": data})
    return dst


def bn_aggr(dst, data, name=None):
    """dst[P, 2] = (mean, variance) aggregated from bn_stats results data[P, 6k]."""
    _tile(dst, "dst"), _tile(data, "data")
    emit("bn_aggr", "vector", {"dst": dst}, {"data": data})
    return dst


from nkihub.nki.isa.extra import (dma_transpose, dropout, max8, nc_find_index8, nc_match_replace8,  # noqa: E402,F401
                           nc_n_gather, nc_stream_shuffle, range_select, rng, scalar_tensor_tensor,
                           select_reduce, set_rng_seed, tensor_partition_reduce, tensor_scalar_reduce,
                           tensor_tensor_scan, topk)
from nkihub.nki.isa.extra import (activate2, dma_compute, exponential, local_gather, nonzero_with_count,  # noqa: E402,F401
                           sequence_bounds)
from nkihub.nki.isa.mx import nc_matmul_mx, quantize_mx  # noqa: E402,F401
from nkihub.nki.isa.multicore import core_barrier, sendrecv  # noqa: E402,F401
from nkihub.nki.isa.registers import (VirtualRegister, register_alloc, register_load, register_move,  # noqa: E402,F401
                               register_store)
from nkihub.nki.isa.state import (NkiInstruction, get_nc_sub_version, rand2, rand_get_state, rand_set_state,  # noqa: E402,F401
                           tensor_scalar_cumulative)


from nkihub.nki import unsupported as _unsupported  # noqa: E402

__getattr__ = _unsupported.module_getattr("nki.isa")  # AWS NKI names not simulated: a clear error
