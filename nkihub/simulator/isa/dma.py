"""DMA instructions: dma_copy between HBM and SBUF (and within either)."""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.convert import F32, caster
from nkihub.simulator.isa.base import DMA, f32, register, store
from nkihub.simulator.isa.fast import fitted, reader, understands, view_as, writer
from nkihub.simulator.rules import Documented, documents, partitions


# The DMA pages' operand constraints (source None: the page of the instruction, dma_copy or dma_transpose).
DMA_BUFFER = Documented("dma-buffer", ("dst", "src"), None, "src and dst are tiles in HBM or SBUF (not PSUM)")
DMA_RMW = Documented("dma-rmw-op", ("dst",), "nki.isa.dma_copy", "dst_rmw_op is nl.add (np.add) or None")
DMA_SIZE = Documented("dma-size", ("src",), None, "src and dst hold the same number of elements")
DMA_PARTITIONS = Documented("partition-dim-limit", ("dst", "src"), "nki.language.tile_size",
                            "an SBUF tile spans at most tile_size.pmax (128) partitions")


def dma_buffers(ins, program, roles=("dst", "src")) -> None:
    """Refuse a PSUM operand among ``roles`` (DMA reaches HBM and SBUF only)."""
    for role in roles:
        ap = ins.dst.get(role) or ins.src.get(role)
        if program.tensor_of(ap).buffer == "psum":
            raise DMA_BUFFER.fail("DMA cannot access PSUM; copy PSUM to SBUF with nisa.tensor_copy first",
                                  ins, program, role, ap)


def dma_partitions(ins, program, target, roles=("dst", "src")) -> None:
    """Refuse an on-chip operand among ``roles`` spanning more than ``target.partitions`` partitions."""
    for role in roles:
        ap = ins.dst.get(role) or ins.src.get(role)
        if program.tensor_of(ap).on_chip and partitions(ap) > target.partitions:
            raise DMA_PARTITIONS.fail(f"the partition dim (dim 0) is {partitions(ap)}; at most "
                                      f"{target.partitions} partitions", ins, program, role, ap)


@documents(DMA_BUFFER, DMA_RMW, DMA_SIZE, DMA_PARTITIONS)
def _dma_rules(ins, program, target):
    """HBM/SBUF operands of equal element counts, dst_rmw_op add, at most 128 partitions on chip."""
    d, s = ins.dst["dst"], ins.src["src"]
    dma_buffers(ins, program)
    rmw = ins.attrs.get("dst_rmw_op")
    if rmw and rmw not in RMW_OPS:
        raise DMA_RMW.fail(f"dst_rmw_op {rmw!r}: a DMA read-modify-write only adds (np.add / nl.add)",
                           ins, program, "dst")
    if d.size != s.size:
        raise DMA_SIZE.fail(f"src has {s.size} elements, dst {d.size} (shape {d.shape}); a DMA moves equal "
                            "element counts", ins, program, "src")
    dma_partitions(ins, program, target)


RMW_OPS = ("add",)   # dst_rmw_op: the DMA page names nl.add (np.add) as the only read-modify-write op


def _dma_copy(ins, src, dst, ctx):
    """dst = src through a DMA queue; element counts match, shapes may differ (row-major order);
    dtypes convert through fp32. With ``dst_rmw_op="add"``: dst = dst + src (in fp32)."""
    s, out = src["src"], dst["dst"]
    if ins.attrs.get("dst_rmw_op"):
        store(out, f32(out) + f32(s).reshape(out.shape))
    elif s.dtype == out.dtype:
        out[...] = s.reshape(out.shape)
    else:
        store(out, f32(s).reshape(out.shape))


def copy_step(s: np.ndarray, out: np.ndarray, sc):
    """The step of ``out = s`` reshaped to out's shape (DMA and engine copies): bit-exact for equal
    dtypes, through fp32 otherwise, as ``_dma_copy`` and ``tensor_copy`` do."""
    if s.dtype == out.dtype:
        get = fitted(s, out.shape)
        return lambda ctx: np.copyto(out, get())
    if s.dtype == F32 or (out.dtype == F32 and s.dtype.kind != "b"):
        v = view_as(s, out.shape)
        if v is not None and out.dtype.kind not in "iub":
            cast = caster(out, v)
            return lambda ctx: cast()
        get, write = fitted(s, out.shape), writer(out)
        return lambda ctx: write(get())
    arr, refresh = reader(s, sc, 0)
    get, write = fitted(arr, out.shape), writer(out)
    return lambda ctx: (refresh(), write(get()))


def _dma_bind(ins, src, dst, sc):
    understands(ins, "dge_mode")
    return copy_step(src["src"], dst["dst"], sc)


def contiguous_bytes(ap, spec) -> int:
    """Bytes in the innermost contiguous run of an access pattern."""
    run = 1
    for stride, size in reversed(ap.dims):
        if size == 1:
            continue
        if stride == run:
            run *= size
        else:
            break
    return run * spec.np_dtype.itemsize


def _dma_cost(ins, program, target):
    d, s = ins.dst["dst"], ins.src["src"]
    sd, ss = program.tensor_of(d), program.tensor_of(s)
    on_chip = d if sd.on_chip else s
    parts = partitions(on_chip) if (sd.on_chip or ss.on_chip) else target.partitions
    run = min(contiguous_bytes(d, sd), contiguous_bytes(s, ss))
    return cr.dma_transfer_s(max(d.size * sd.np_dtype.itemsize, s.size * ss.np_dtype.itemsize), parts, run,
                             target)


register("dma_copy", engines={"dma"}, execute=_dma_copy, cost=_dma_cost, rules=(_dma_rules,),
         categories={DMA}, bind=_dma_bind, reads_dst=lambda ins: bool(ins.attrs.get("dst_rmw_op")),
         # dge_mode picks the descriptor generator, not the values
         copies=lambda ins: "src" if set(ins.attrs) <= {"dge_mode"} else None)
