"""More names of the ``neuronxcc.nki`` dialect: ``nl.all_reduce`` across SPMD programs, ``nl.loop_reduce``,
``nl.atomic_rmw``, the tile-returning ``nisa.local_gather`` / ``sequence_bounds`` /
``tensor_copy_dynamic_src`` / ``tensor_copy_dynamic_dst``, ``nki.FrameworkKernel``, and the names that
exist in neuronx-cc but cannot be simulated (they raise ``NotSimulatedError`` at the kernel line).
"""
from __future__ import annotations

import itertools

import numpy as np

import nkihub.nki.isa as _nisa
import nkihub.nki.language as _nl
from nkihub.nki import multicore, tracing, unsupported
from nkihub.nki.arrays import is_array, to_numpy
from nkihub.nki.dtypes import dtype_of
from nkihub.nki.ops import op_name
from nkihub.nki.tensor import NkiTensor


def not_simulated(qualname: str, why: str):
    """A stand-in for ``qualname`` that raises NotSimulatedError naming the kernel line that called it."""
    def stub(*args, **kwargs):
        raise unsupported.not_simulated(qualname, why)
    stub.__name__ = stub.__qualname__ = qualname.rsplit(".", 1)[-1]
    stub.__doc__ = f"``{qualname}``: exists in AWS NKI; not simulated ({why})."
    return stub


# -- nl ----------------------------------------------------------------------------------------------------
def all_reduce(x, op, program_axes, *, dtype=None, mask=None, parallel_reduce=True, asynchronous=False,
               **kwargs):
    """A new tile holding ``op`` (add, maximum or minimum) of ``x`` over the SPMD program instances that
    differ from this one only along ``program_axes`` (a collective between the launch's cores)."""
    b = tracing.require("nl.all_reduce")
    axes = {int(a) for a in (program_axes if isinstance(program_axes, (tuple, list)) else (program_axes,))}
    mine = tuple(b.program_ids)
    peers = [pid for pid in itertools.product(*(range(g) for g in b.grid))
             if all(pid[a] == mine[a] for a in range(len(mine)) if a not in axes)] if b.grid else [()]
    members = tuple(multicore.instance_index(b, b.rank, pid) for pid in peers)
    out = _nl.ndarray(x.shape, dtype if dtype is not None else x.dtype, buffer=_nl.sbuf, name="all_reduce")
    b.sync(multicore.Sync("all_reduce", ("all_reduce", members), members, {"dst0": out.to_ap()},
                          {"src0": x.to_ap()}, {"op": op_name(op), "k": 1}, "dma", tracing.caller_loc()))
    return out


class _LoopReduced:
    """``nl.loop_reduce(x, op, loop_indices)``: assigned to a tile, it folds ``x`` into it with ``op`` (one
    in-place Vector instruction per iteration; the tile holds the reduction over the loop)."""

    def __init__(self, x, op):
        self.x, self.op = x, op

    def _assign_into(self, dst: NkiTensor) -> None:
        _nisa.tensor_tensor(dst, dst, self.x, self.op)


def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, **kwargs):
    """Reduce ``x`` over the iterations of the loops ``loop_indices`` into the tile it is assigned to
    (``acc[...] = nl.loop_reduce(x, np.add, loop_indices=[i])``, ``acc`` set before the loop)."""
    return _LoopReduced(x, op)


def atomic_rmw(dst, value, op, *, mask=None, **kwargs):
    """dst (HBM) = op(dst, value), as one read-modify-write: dst is read into SBUF, combined on the
    Vector Engine and written back."""
    cur = _nl.ndarray(dst.shape, dst.dtype, buffer=_nl.sbuf, name="rmw")
    _nisa.dma_copy(dst=cur, src=dst)
    if isinstance(value, NkiTensor):
        _nisa.tensor_tensor(cur, cur, value, op)
    else:
        _nisa.tensor_scalar(cur, cur, op, value)
    _nisa.dma_copy(dst=dst, src=cur)


def gemm_grid():
    """The index grid ``(i_p, i_f)`` of a Tensor Engine matmul result tile, which is also the moving
    operand's tile: ``nl.mgrid[0:pmax, 0:gemm_moving_fmax]`` ([128, 512]). The AWS stub only calls it the
    tile definition of those operands; that it returns the index grid (as ``nl.mgrid`` does, usable as
    ``t[i_p, i_f]``) is nkihub's reading of "grid"."""
    from nkihub.nki.compat.affine import mgrid
    return mgrid[0:_nl.tile_size.pmax, 0:_nl.tile_size.gemm_moving_fmax]


def gemm_stationary_grid():
    """The index grid ``(i_p, i_f)`` of a matmul's stationary operand tile:
    ``nl.mgrid[0:pmax, 0:gemm_stationary_fmax]`` ([128, 128]); see ``gemm_grid`` for what the docs say."""
    from nkihub.nki.compat.affine import mgrid
    return mgrid[0:_nl.tile_size.pmax, 0:_nl.tile_size.gemm_stationary_fmax]


# -- nisa (tile-returning) ---------------------------------------------------------------------------------
def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None):
    """nisa.local_gather into a new tile [P, num_valid_indices * num_elem_per_idx] of src_buffer's dtype."""
    n = num_valid_indices if num_valid_indices is not None else index.size // max(1, index.shape[0]) * 16
    out = _nl.ndarray((src_buffer.shape[0], n * int(num_elem_per_idx)), src_buffer.dtype, buffer=_nl.sbuf,
                      name="local_gather")
    return _nisa.local_gather(out, src_buffer, index, num_elem_per_idx, num_valid_indices)


def sequence_bounds(*, segment_ids, dtype=None):
    """nisa.sequence_bounds into a new tile [1, 2, n] (float32 unless ``dtype``)."""
    out = _nl.ndarray((1, 2, segment_ids.size), dtype if dtype is not None else np.float32, buffer=_nl.sbuf,
                      name="sequence_bounds")
    return _nisa.sequence_bounds(out, segment_ids)


def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=None, **kwargs):
    """A copy of ``src`` (whose offset may come from loop indices: resolved at trace time) in a new tile."""
    out = _nl.ndarray(src.shape, dtype if dtype is not None else src.dtype, buffer=_nl.sbuf, name="copy")
    return _nisa.tensor_copy(out, src)


def tensor_copy_dynamic_dst(*, dst, src, mask=None, dtype=None, engine=None, **kwargs):
    """dst = src, dst's offset resolved at trace time."""
    _nisa.tensor_copy(dst, src)


builtin_custom_op = not_simulated("neuronxcc.nki.isa.builtin_custom_op",
                                  "it runs a custom GpSimd microcode library, which has no numpy model")


# -- nki --------------------------------------------------------------------------------------------------
class FrameworkKernel:
    """Framework integration of a kernel (what JAX / torch-xla bindings subclass): tells which arguments
    are framework tensors and maps them to shapes and NeuronCore dtypes."""

    def __init__(self, func=None, **config):
        self.func, self.config = func, dict(config)

    def dump_config(self, *args, **kwargs) -> dict:
        """The kernel's configuration (its keyword options)."""
        return dict(self.config)

    def is_framework_tensor(self, t) -> bool:
        """True for arrays the kernel takes as tensors (numpy arrays, torch tensors)."""
        return is_array(t)

    def map_framework_tensor(self, t):
        """(shape, dtype) of a framework tensor as a kernel sees it."""
        arr = to_numpy(t)
        return tuple(arr.shape), arr.dtype

    def translate_to_neuron_dtype(self, _dtype):
        """The NeuronCore dtype of a framework dtype (numpy or torch)."""
        return dtype_of(_dtype)
