"""Buffers, dtypes, tensor creation, load/store and copies of ``nki.language``."""
from __future__ import annotations

from enum import Enum

import numpy as np

from nkihub.nki import isa as nisa
from nkihub.nki import tracing
from nkihub.nki.dtypes import dtype_of
from nkihub.nki.ops import nki_op
from nkihub.nki.language.wide import per_instruction
from nkihub.nki.tensor import NkiTensor
from nkihub.simulator.errors import KernelRuleError
from nkihub.simulator.targets import get_target


class _Buffer:
    """A memory region a tensor lives in (``nl.sbuf``, ``nl.psum``, ``nl.shared_hbm`` ...)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    # Kernels compare buffers (``t.buffer == nl.sbuf``, ``t.buffer in (nl.hbm, nl.shared_hbm)``) where
    # t.buffer is the buffer's name; nl.MemoryRegion members are names too.
    def __eq__(self, other) -> bool:
        if isinstance(other, (str, _Buffer)):
            return _name_of(other) == self.name
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)


_NAMES = ("sbuf", "psum", "hbm", "shared_hbm", "private_hbm")


def _name_of(buffer):
    return buffer.value if isinstance(buffer, Enum) else getattr(buffer, "name", buffer)


sbuf, psum, hbm, shared_hbm, private_hbm = (_Buffer(n) for n in ("sbuf", "psum", "hbm", "shared_hbm",
                                                                  "private_hbm"))


def buffer_name(buffer) -> str:
    """Normalise a buffer argument (``nl.sbuf``, a string, or None for SBUF)."""
    if buffer is None:
        return "sbuf"
    name = _name_of(buffer)
    if name not in _NAMES:
        raise ValueError(f"unknown buffer {buffer!r}: use nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm or "
                         "nl.private_hbm")
    return name


def is_psum(buffer) -> bool:
    """True for PSUM."""
    return buffer_name(buffer) == "psum"


def is_sbuf(buffer) -> bool:
    """True for SBUF."""
    return buffer_name(buffer) == "sbuf"


def is_hbm(buffer) -> bool:
    """True for any HBM buffer."""
    return buffer_name(buffer).endswith("hbm")


def is_on_chip(buffer) -> bool:
    """True for SBUF and PSUM."""
    return buffer_name(buffer) in ("sbuf", "psum")


class _TileSize:
    """Hardware tile limits of the target being traced for (``nl.tile_size``)."""

    @property
    def _t(self):
        b = tracing.current()
        return b.target if b is not None else get_target()

    pmax = property(lambda self: self._t.partitions)
    gemm_stationary_fmax = property(lambda self: self._t.stationary_fmax)
    gemm_moving_fmax = property(lambda self: self._t.moving_fmax)
    bn_stats_fmax = property(lambda self: self._t.bn_stats_fmax)
    psum_num_banks = property(lambda self: self._t.psum_banks)
    psum_bank_fmax_bytes = property(lambda self: self._t.psum_bank_bytes)
    psum_bank_fmax = property(lambda self: self._t.psum_bank_bytes // 4)
    # NKI 0.4+ documents psum_fmax as the fp32 elements of one PSUM bank per partition (deprecated alias
    # of psum_bank_fmax), not the whole PSUM.
    psum_fmax = property(lambda self: self._t.psum_bank_bytes // 4)
    psum_min_align = property(lambda self: 4)
    sbuf_min_align = property(lambda self: 64)
    sbuf_fmax_bytes = property(lambda self: self._t.sbuf_bytes_per_partition)
    sbuf_fmax = property(lambda self: self._t.sbuf_bytes_per_partition // 4)
    sbuf_size_bytes = property(lambda self: self._t.sbuf_bytes)
    total_available_sbuf_size = property(lambda self: self._t.sbuf_bytes_per_partition)


tile_size = _TileSize()


def ndarray(shape, dtype, buffer=None, name=None, address=None) -> NkiTensor:
    """A new tensor of ``shape`` and ``dtype`` in ``buffer`` (default SBUF). Contents are undefined.

    On-chip tensors are tiles: dim 0 is the partition dim (<= 128). ``nl.shared_hbm`` tensors returned by
    the kernel are its outputs.
    """
    b = tracing.require("nl.ndarray")
    buf = buffer_name(buffer)
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if b.grid and buf == "shared_hbm":
        # SPMD: every program instance sees the same shared_hbm tensors, matched by creation order.
        if b._shared_cursor < len(b.shared_outputs):
            t = b.shared_outputs[b._shared_cursor]
            b._shared_cursor += 1
            return t
    spec = b.new_tensor(shape, _dtname(dtype), buf,
                        name=name or ("out" if buf == "shared_hbm" else buf))
    t = NkiTensor(spec)
    if buf == "shared_hbm" and b.grid:
        b.shared_outputs.append(t)
        b._shared_cursor += 1
    return t


def _dtname(dtype) -> str:
    from nkihub.simulator.dtypes import dtype_name
    # Names stay names: the packed MX dtypes are names (their storage dtype is an unsigned integer).
    return dtype_name(dtype if isinstance(dtype, str) else dtype_of(dtype))


def full(shape, fill_value, dtype, buffer=None, name=None) -> NkiTensor:
    """A new on-chip tile filled with ``fill_value``."""
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    if not t.spec.on_chip:
        raise KernelRuleError("engine-buffer", "nl.zeros/ones/full make on-chip tiles; fill an HBM tensor by "
                              "storing a tile", operand=t.name, shape=t.shape, buffer=t.buffer,
                              loc=tracing.caller_loc())
    per_instruction(nisa.memset, t, fill_value)
    return t


def zeros(shape, dtype, buffer=None, name=None) -> NkiTensor:
    """A new on-chip tile of zeros."""
    return full(shape, 0, dtype, buffer=buffer, name=name)


def ones(shape, dtype, buffer=None, name=None) -> NkiTensor:
    """A new on-chip tile of ones."""
    return full(shape, 1, dtype, buffer=buffer, name=name)


def zeros_like(x, dtype=None, buffer=None, name=None) -> NkiTensor:
    """A tile of zeros with ``x``'s shape (and dtype unless given)."""
    return zeros(x.shape, dtype or x.dtype, buffer=buffer or x.buffer, name=name)


def empty_like(x, dtype=None, buffer=None, name=None) -> NkiTensor:
    """An uninitialised tensor with ``x``'s shape (and dtype/buffer unless given)."""
    return ndarray(x.shape, dtype or x.dtype, buffer=buffer or x.buffer, name=name)


def load(src, dtype=None) -> NkiTensor:
    """Load an HBM view ``src`` [P, F...] into a new SBUF tile (cast to ``dtype`` if given)."""
    t = ndarray(src.shape, dtype or src.dtype, buffer=sbuf, name="load")
    if src.spec.on_chip and src.indirect is None:
        nisa.tensor_copy(t, src)
    else:
        nisa.dma_copy(dst=t, src=src)
    return t


def store(dst, value) -> None:
    """Store an on-chip tile ``value`` into the HBM view ``dst`` (shapes with equal element counts). A PSUM
    tile is first copied to SBUF (DMA engines do not read PSUM), as the compiler does."""
    _assign(dst, in_sbuf(value) if not dst.spec.on_chip else value)


def in_sbuf(x):
    """``x`` itself unless it is a PSUM tile; then a copy of it in a new SBUF tile (same dtype): what the
    ``nl`` convenience functions do for operands that must come from SBUF (AWS: "If the tile is in PSUM,
    an extra copy will be performed")."""
    if not isinstance(x, NkiTensor) or x.spec.buffer != "psum":
        return x
    t = ndarray(x.shape, x.dtype, buffer=sbuf, name=f"{x.name}_sbuf")
    nisa.tensor_copy(t, x)
    return t


@nki_op("copy")  # nisa.activation(op=nl.copy, ...) is the identity activation, as in AWS NKI
def copy(x, dtype=None) -> NkiTensor:
    """A copy of tile ``x`` in a new SBUF tile (cast to ``dtype`` if given)."""
    t = ndarray(x.shape, dtype or x.dtype, buffer=sbuf, name="copy")
    _assign(t, x)
    return t


def ds(start, size) -> slice:
    """A slice of ``size`` elements from ``start`` (``nl.ds(i * 128, 128)``)."""
    return slice(start, start + size)


def broadcast_to(x, shape, dtype=None) -> NkiTensor:
    """Broadcast tile ``x`` to ``shape``: along the free dims from size 1 (Vector Engine copy), or along the
    partition dim from 1 partition (a DMA with a zero partition stride)."""
    shape = tuple(int(s) for s in shape)
    out = ndarray(shape, dtype or x.dtype, buffer=sbuf, name="broadcast")
    if x.shape[0] == 1 and shape[0] != 1:
        dims = [(0, shape[0])] + [(st if sz != 1 else 0, sh) for (st, sz), sh in zip(x.dims[1:], shape[1:])]
        nisa.dma_copy(dst=out, src=NkiTensor(x.spec, x.offset, dims))
    else:
        dims = [x.dims[0]] + [(st if sz != 1 else 0, sh) for (st, sz), sh in zip(x.dims[1:], shape[1:])]
        nisa.tensor_copy(out, NkiTensor(x.spec, x.offset, dims))
    return out


def device_print(print_prefix, tensor) -> None:
    """Print ``tensor``'s values when the simulator reaches this point."""
    nisa.emit("device_print", "vector" if tensor.spec.on_chip else "dma", {}, {"data": tensor},
              {"prefix": str(print_prefix)})


def engine_reachable(t: NkiTensor) -> bool:
    """Whether a compute engine may access on-chip view ``t``: its partitions start where the engines'
    start-partition rule allows (``simulator.rules.engine_start_partitions``)."""
    from nkihub.simulator.rules import engine_start_partitions
    n = t.dims[0][1] if t.dims else 1
    return t.offset // max(1, t.spec.free_size) in engine_start_partitions(n)


def _assign(dst: NkiTensor, value) -> None:
    """``dst[...] = value``: a copy (DMA for HBM, Vector Engine on chip) or a memset for a number."""
    if dst.indirect is not None:   # addressed by run-time indices: only the DMA engines can write it
        nisa.dma_copy(dst=dst, src=value)
        return
    if isinstance(value, NkiTensor) and value.to_ap() == dst.to_ap():
        return  # ``t[k] += x`` assigns the updated view to itself
    if hasattr(value, "_assign_into"):
        value._assign_into(dst)   # a value that writes itself (the old dialect's nl.loop_reduce)
        return
    if not isinstance(value, NkiTensor) and (not dst.spec.on_chip or not engine_reachable(dst)):
        # a number into HBM (nl.store(hbm, 100)), or into SBUF partitions an engine access cannot start
        # at (t[i, j] = 5 for any i, as AWS's examples write): one SBUF element is set and a DMA, which has
        # no start-partition rule, reads it for every element of dst (a source pattern of stride 0)
        one = ndarray((1, 1), dst.dtype, buffer=sbuf, name="fill")
        nisa.memset(one, value)
        nisa.dma_copy(dst=dst, src=NkiTensor(one.spec, one.offset, ((0, 1), (0, dst.size))))
    elif not isinstance(value, NkiTensor):
        per_instruction(nisa.memset, dst, value)
    elif tracing.require("assignment").write_in_place(value.to_ap(), dst.to_ap()):
        value.spec, value.offset, value.dims = dst.spec, dst.offset, dst.dims  # later reads see dst
    elif dst.spec.on_chip and value.spec.on_chip and engine_reachable(dst) and engine_reachable(value):
        per_instruction(nisa.tensor_copy, dst, value)
    else:
        nisa.dma_copy(dst=dst, src=value)
