"""Indirect DMA: a copy whose source or destination address depends on values in memory at run time
(AWS NKI's ``tensor.ap(..., scalar_offset=, vector_offset=, indirect_dim=)``, executed by the DMA engines'
descriptor generation).

The indirectly addressed tensor is the operand ``table``: the whole tensor as a flat view of all its
elements, a source (a gather, into ``dst``) or a destination (a scatter, from ``src``). ``attrs`` holds the
access pattern over it: ``offset`` and ``pattern`` ([[step, size], ...] in elements), ``mode`` and
``stride``. The operand ``offsets`` holds the run-time indices:

- ``mode="scalar"``: one value v (a [1, 1] tile or a register); every element's address moves by
  ``v * stride``.
- ``mode="vector"``: one value per index of the pattern's first dim ([N, 1]); index i of that dim
  addresses ``idx[i] * stride`` instead of ``i * step`` (the other dims keep their steps).

``stride`` is the element stride of the tensor dim the offsets count along (``indirect_dim``).
Addresses outside the tensor (negative ones too) raise an ``IndexError`` naming the first such flat element
index and the tensor's element count, as AWS's simulator does, or are skipped with ``oob="skip"`` (the
element is not read, its destination left as it was; or not written). A scatter with ``dst_rmw_op="add"``
adds into the table (dst = dst + src; indices that repeat add up, as the DMA page says the compiler
serialises duplicated offsets); read-modify-write allows only ``oob="error"``.
"""
from __future__ import annotations

import math

import numpy as np

from nkihub.simulator.errors import index_fault
from nkihub.simulator.isa.base import DMA, INDIRECT, f32, register, store
from nkihub.simulator.isa.dma import DMA_BUFFER, DMA_PARTITIONS, DMA_SIZE, contiguous_bytes, dma_partitions
from nkihub.simulator import cost_rules as cr
from nkihub.simulator.rules import Documented, documents, partitions


def addresses(attrs: dict, offsets: np.ndarray) -> np.ndarray:
    """Flat element addresses, shaped like the pattern, for run-time ``offsets`` (any numeric dtype)."""
    pattern = [(int(st), int(n)) for st, n in attrs["pattern"]]
    shape = tuple(n for _, n in pattern)
    idx = np.trunc(np.asarray(offsets, dtype=np.float64).reshape(-1)).astype(np.int64)
    addr = np.full(shape, int(attrs["offset"]), dtype=np.int64)
    for d, (step, n) in enumerate(pattern):
        if d == 0 and attrs["mode"] == "vector":
            if idx.size < n:
                raise ValueError(f"vector_offset holds {idx.size} indices for a first dim of {n}")
            term = idx[:n] * int(attrs["stride"])
        else:
            term = np.arange(n, dtype=np.int64) * step
        addr = addr + term.reshape((n,) + (1,) * (len(shape) - d - 1))
    if attrs["mode"] == "scalar":
        addr = addr + idx[0] * int(attrs["stride"])
    return addr


def _plain(ins):
    """(role, access pattern) of the directly addressed operand."""
    return ("dst", ins.dst["dst"]) if "table" in ins.src else ("src", ins.src["src"])


def _execute(ins, src, dst, ctx):
    """A DMA copy from or to ``table`` addressed through run-time offsets; dtypes convert through fp32."""
    gather = "table" in src
    whole = (src["table"] if gather else dst["table"]).reshape(-1)   # a contiguous view of the whole tensor
    side = "src" if gather else "dst"
    addr = addresses(ins.attrs, src["offsets"])
    inside = (addr >= 0) & (addr < whole.size)
    if not inside.all() and ins.attrs.get("oob", "error") != "skip":
        bad = int(addr[~inside].reshape(-1)[0])
        raise index_fault(bad, whole.size, ins.loc, f"dma_copy: an indirect {side} address falls outside the "
                          "tensor (oob_mode=error); pass oob_mode=nisa.oob_mode.skip to skip such elements")
    if gather:
        out = dst["dst"]
        picked = whole[np.where(inside, addr, 0)].reshape(out.shape)
        keep = inside.reshape(out.shape)
        if out.dtype != whole.dtype:
            picked = f32(picked).astype(out.dtype)
        out[keep] = picked[keep]
    elif ins.attrs.get("dst_rmw_op"):
        where, values = addr[inside], f32(src["src"]).reshape(addr.shape)[inside]
        touched, back = np.unique(where, return_inverse=True)
        acc = f32(whole[touched]).copy()
        np.add.at(acc, back, values)
        tmp = np.empty(touched.shape, whole.dtype)
        store(tmp, acc)
        whole[touched] = tmp
    else:
        values = src["src"].reshape(addr.shape)
        if values.dtype != whole.dtype:
            tmp = np.empty(values.shape, whole.dtype)
            store(tmp, f32(values))
            values = tmp
        whole[addr[inside]] = values[inside]


RMW_OOB = Documented("dma-rmw-oob", ("table",), "nki.isa.dma_copy",
                     "with dst_rmw_op, only oob_mode=oob_mode.error is allowed")
OFFSETS = Documented("indirect-offsets", ("offsets",), "nki.isa.dma_copy",
                     "a scalar_offset is one index (a 1x1 tile or a register), a vector_offset a (P, 1) tile: one "
                     "index per partition, for each index of the pattern's first dim")
OFFSETS_BUFFER = Documented("indirect-offsets-buffer", ("offsets",), "nki.isa.dma_copy", "the offsets are in SBUF")
TABLE_BUFFER = Documented("indirect-table-buffer", ("table",), "nki.isa.dma_copy",
                          "with vector_offset, the tensor .ap() is called on is in HBM")
INDIRECT_BUFFER = Documented("dma-buffer", ("table", "dst", "src"), "nki.isa.dma_copy", DMA_BUFFER.what)
INDIRECT_RMW = Documented("dma-rmw-op", ("table", "dst"), "nki.isa.dma_copy",
                          "dst_rmw_op is nl.add (np.add), read-modify-writing the destination")
INDIRECT_SIZE = Documented("dma-size", ("dst", "src"), "nki.isa.dma_copy", DMA_SIZE.what)


@documents(INDIRECT_BUFFER, INDIRECT_RMW, RMW_OOB, INDIRECT_SIZE, OFFSETS, OFFSETS_BUFFER, TABLE_BUFFER,
           DMA_PARTITIONS)
def _rules(ins, program, target):
    """The indirect copy's buffers, read-modify-write, element counts and offsets (the dma_copy page)."""
    plain_role, plain = _plain(ins)
    for role, ap in (("table", ins.src.get("table") or ins.dst.get("table")), (plain_role, plain)):
        if program.tensor_of(ap).buffer == "psum":
            raise INDIRECT_BUFFER.fail("DMA cannot access PSUM; copy PSUM to SBUF with nisa.tensor_copy first",
                                       ins, program, role, ap)
    rmw = ins.attrs.get("dst_rmw_op")
    if rmw and (rmw != "add" or "table" not in ins.dst):
        raise INDIRECT_RMW.fail(f"dst_rmw_op {rmw!r}: a DMA read-modify-write adds (np.add / nl.add) into its "
                                "destination", ins, program, "table" if "table" in ins.dst else "dst")
    if rmw and ins.attrs.get("oob", "error") != "error":
        raise RMW_OOB.fail("dst_rmw_op allows only oob_mode=oob_mode.error", ins, program, "table")
    n = math.prod(int(s) for _, s in ins.attrs["pattern"])
    if n != plain.size:
        raise INDIRECT_SIZE.fail(f"the indirect access pattern has {n} elements, the {plain_role} {plain.size}; "
                                 "a DMA moves equal element counts", ins, program, plain_role, plain)
    offsets, vector = ins.src["offsets"], ins.attrs["mode"] == "vector"
    if program.tensor_of(offsets).buffer != "sbuf":
        raise OFFSETS_BUFFER.fail(f"{ins.attrs['mode']}_offset must be an SBUF tile", ins, program, "offsets")
    if vector and program.tensor_of(ins.src.get("table") or ins.dst["table"]).on_chip:
        raise TABLE_BUFFER.fail("vector_offset indexes a tensor in HBM; this one is on chip", ins, program,
                                "table")
    want = int(ins.attrs["pattern"][0][1]) if vector else 1
    if (offsets.size != want if not vector else partitions(offsets) < want or offsets.size != partitions(offsets)):
        raise OFFSETS.fail(f"{ins.attrs['mode']}_offset must be a ({want}, 1) tile"
                           f"{', one index per partition' if vector else ''}; it has shape {tuple(offsets.shape)}",
                           ins, program, "offsets")
    dma_partitions(ins, program, target, roles=(plain_role,))


def _cost(ins, program, target):
    _, plain = _plain(ins)
    spec = program.tensor_of(plain)
    parts = partitions(plain) if spec.on_chip else target.partitions
    # Descriptor-generated gathers move one contiguous run per index: the innermost run of the pattern.
    run = 1
    for step, n in reversed(ins.attrs["pattern"]):
        if int(n) == 1:
            continue
        if int(step) != run:
            break
        run *= int(n)
    run = min(run * spec.np_dtype.itemsize, contiguous_bytes(plain, spec))
    return cr.dma_transfer_s(plain.size * spec.np_dtype.itemsize, parts, run, target)


# A scatter leaves the table's other elements as they were; a skipped gather leaves dst's.
register("dma_copy_indirect", engines={"dma"}, execute=_execute, cost=_cost, rules=(_rules,),
         categories={DMA, INDIRECT}, dynamic_reads={"table"}, reads_dst=lambda ins: ("table",) if "table" in ins.dst else
         (("dst",) if ins.attrs.get("oob") == "skip" else ()))
