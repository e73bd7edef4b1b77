"""dma_compute: the DMA engines' compute logic, dst = reduce_op(srcs[0] * scales[0], srcs[1] * scales[1], ...).

Sources are operand roles ``src0`` .. ``src{k-1}`` (at most 16). Only the direct form is modelled: the
read-modify-write scatter/gather forms need ``vector_offset`` access patterns, which nkihub does not trace.
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa.base import DMA, f32, register, store
from nkihub.simulator.isa.dma import DMA_PARTITIONS, contiguous_bytes, dma_partitions
from nkihub.simulator.rules import Documented, documents, partitions

MAX_SOURCES = 16
REDUCE_OPS = ("add",)        # the docs: only nl.add is supported for now


def source_roles(ins) -> list:
    """The source roles of a dma_compute instruction, in order."""
    return sorted((r for r in ins.src if r.startswith("src")), key=lambda r: int(r[3:]))


def _scales(ins, k: int) -> list:
    scales = ins.attrs.get("scales")
    return [1.0] * k if scales is None else [float(s) for s in scales]


def _dma_compute(ins, src, dst, ctx):
    """dst = sum_i srcs[i] * scales[i] in fp32 (element counts match; shapes may differ, row-major),
    cast once to dst's dtype, through a DMA queue."""
    out = dst["dst"]
    roles = source_roles(ins)
    acc = np.zeros(out.size, np.float32)
    for role, scale in zip(roles, _scales(ins, len(roles))):
        acc += f32(src[role]).reshape(-1) * np.float32(scale)
    store(out, acc.reshape(out.shape))


# The dma_compute page's constraints (sources are roles src0, src1, ...; the tests name them "src").
SOURCES = Documented("dma-compute-sources", ("dst",), "nki.isa.dma_compute", "1 to 16 source tensors")
BUFFER = Documented("dma-buffer", ("dst", "src"), "nki.isa.dma_compute", "every tensor is in HBM or SBUF")
SIZE = Documented("dma-size", ("src",), "nki.isa.dma_compute", "every source has dst's element count")
REDUCE = Documented("reduce-op", ("dst",), "nki.isa.dma_compute", "reduce_op is nl.add (the only one supported)")
SCALES = Documented("dma-compute-scales", ("dst",), "nki.isa.dma_compute",
                    "one scale per source, each 1.0 (the only value supported)")


@documents(SOURCES, BUFFER, SIZE, REDUCE, SCALES, DMA_PARTITIONS)
def _dma_compute_rules(ins, program, target):
    """1..16 sources with dst's element count, no PSUM, reduce_op add, every scale 1.0."""
    roles, d = source_roles(ins), ins.dst["dst"]
    if not 1 <= len(roles) <= MAX_SOURCES:
        raise SOURCES.fail(f"{len(roles)} sources; 1 to {MAX_SOURCES}", ins, program, "dst")
    for role in ("dst", *roles):
        ap = ins.dst.get(role) or ins.src[role]
        if program.tensor_of(ap).buffer == "psum":
            raise BUFFER.fail("DMA cannot access PSUM; copy PSUM to SBUF with nisa.tensor_copy first",
                              ins, program, role)
        if ap.size != d.size:
            raise SIZE.fail(f"{role} has {ap.size} elements, dst {d.size}; every tensor has the same element "
                            "count", ins, program, role)
    dma_partitions(ins, program, target, roles=("dst", *roles))
    if ins.attrs.get("reduce_op", "add") not in REDUCE_OPS:
        raise REDUCE.fail(f"reduce_op {ins.attrs.get('reduce_op')!r}; dma_compute supports only add",
                          ins, program, "dst")
    scales = _scales(ins, len(roles))
    if len(scales) != len(roles) or any(s != 1.0 for s in scales):
        raise SCALES.fail(f"scales {scales}: one scale per source, each 1.0 (the only value the DMA engines "
                          "support)", ins, program, "dst")


def _dma_compute_cost(ins, program, target):
    # Estimate: one transfer moving every source's bytes (the DMA reads each source once).
    aps = [ins.dst["dst"], *(ins.src[r] for r in source_roles(ins))]
    specs = [program.tensor_of(ap) for ap in aps]
    on_chip = [ap for ap, s in zip(aps, specs) if s.on_chip]
    parts = max((partitions(ap) for ap in on_chip), default=target.partitions)
    run = min(contiguous_bytes(ap, s) for ap, s in zip(aps, specs))
    total = sum(ap.size * s.np_dtype.itemsize for ap, s in zip(aps[1:], specs[1:]))
    return cr.dma_transfer_s(total, parts, run, target)


register("dma_compute", engines={"dma"}, execute=_dma_compute, cost=_dma_compute_cost,
         rules=(_dma_compute_rules,), categories={DMA})
