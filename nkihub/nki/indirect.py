"""Indirect access patterns: ``t.ap(pattern, offset, scalar_offset=..., vector_offset=..., indirect_dim=d)``
(AWS NKI), views whose addresses depend on values in memory when the kernel runs.

- ``scalar_offset``: a one-element tile (SBUF, e.g. ``idx[0:1, 0:1]``) or a ``nisa.VirtualRegister`` holding
  v; the whole pattern moves by ``v`` elements of dim ``d`` of ``t`` (``v * t.strides[d]``).
- ``vector_offset``: an [N, 1] tile of per-row indices; row i of the pattern's first dim starts at
  ``idx[i] * t.strides[d]`` instead of ``i * step`` (a gather or a scatter of rows).

Such a view is an operand of ``nisa.dma_copy`` (the DMA engines generate its descriptors at run time),
which records one ``dma_copy_indirect`` instruction reading the offsets when it executes, so a Program
keeps working for any index values. A gathering view may also be a source of ``nisa.dma_compute``: the
gather is recorded as a ``dma_copy_indirect`` into an HBM staging tensor that the reduction then reads
(the same values: the gather moves elements unchanged; the cost model sees one more DMA pass than the
hardware's fused descriptors). Indexing or reshaping an indirect view, or passing it to a compute
instruction, is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

from nkihub.nki import tracing
from nkihub.simulator.errors import KernelRuleError
from nkihub.simulator.isa.dma_indirect import OFFSETS
from nkihub.simulator.program import AccessPattern


@dataclass(frozen=True)
class Indirect:
    """How an indirect view finds its addresses: ``mode`` (scalar or vector), the tile holding the
    run-time ``offsets``, and the element ``stride`` one unit of offset moves."""

    mode: str
    offsets: object      # NkiTensor
    stride: int


def _offsets_tile(value, what: str):
    from nkihub.nki.tensor import NkiTensor
    reg = getattr(value, "storage", None)   # a nisa.VirtualRegister keeps its value in a one-element tile
    if reg is not None:
        return reg
    if not isinstance(value, NkiTensor):
        raise TypeError(f"ap({what}=...) takes a tile (or a nisa.VirtualRegister for scalar_offset), got "
                        f"{type(value).__name__}")
    return value


def make(view, base, scalar_offset, vector_offset, indirect_dim):
    """Turn the static ``view`` (the pattern over ``base``) into an indirect one."""
    if scalar_offset is not None and vector_offset is not None:
        raise KernelRuleError("indirect-offsets", "ap(): pass scalar_offset or vector_offset, not both (they are "
                              f"mutually exclusive; source: {OFFSETS.source})", operand="offsets",
                              loc=tracing.caller_loc())
    d = 0 if indirect_dim is None else int(indirect_dim)
    if not 0 <= d < base.ndim:
        raise KernelRuleError("indirect-dim", f"ap(indirect_dim={indirect_dim}): the tensor has {base.ndim} dims "
                              f"{base.shape}", operand="table", loc=tracing.caller_loc())
    stride = base.dims[d][0]
    if scalar_offset is not None and isinstance(scalar_offset, int):
        return type(view)(view.spec, view.offset + scalar_offset * stride, view.dims)   # known now: static
    mode = "scalar" if scalar_offset is not None else "vector"
    offsets = _offsets_tile(scalar_offset if mode == "scalar" else vector_offset, f"{mode}_offset")
    if mode == "vector" and offsets.shape[0] < view.shape[0]:
        raise KernelRuleError("indirect-offsets", f"vector_offset has {offsets.shape[0]} indices for a first "
                              f"pattern dim of {view.shape[0]} (source: {OFFSETS.source})", operand="offsets",
                              shape=offsets.shape, dtype=offsets.spec.dtype, buffer=offsets.buffer,
                              loc=tracing.caller_loc(), tensor=offsets.spec.label)
    view.indirect = Indirect(mode, offsets, stride)
    return view


def refuse(t) -> KernelRuleError:
    """The error for using an indirect view where only a DMA operand may be."""
    return KernelRuleError("indirect-access", "an access pattern with scalar_offset/vector_offset is addressed "
                           "at run time by the DMA engines: use it as a nisa.dma_copy operand (not in a compute "
                           "instruction, and not sliced or reshaped further)", operand=t.name, shape=t.shape,
                           dtype=t.spec.dtype, buffer=t.buffer, loc=tracing.caller_loc())


def dma_copy(dst, src, oob_mode: str, dge_mode: str, dst_rmw_op: str | None = None) -> None:
    """Emit the ``dma_copy_indirect`` instruction for a copy with one indirect side."""
    from nkihub.nki.isa import emit
    if dst.indirect is not None and src.indirect is not None:
        raise KernelRuleError("indirect-access", "dma_copy: only one side of a copy can be indirectly addressed",
                              operand="dst", shape=dst.shape, loc=tracing.caller_loc())
    table = dst if dst.indirect is not None else src
    ind = table.indirect
    whole = AccessPattern(table.spec.name, 0, ((1, table.spec.size),))
    attrs = {"mode": ind.mode, "stride": int(ind.stride), "offset": int(table.offset),
             "pattern": [[int(st), int(n)] for st, n in table.dims], "oob": oob_mode, "dge_mode": dge_mode}
    if dst_rmw_op is not None:
        attrs["dst_rmw_op"] = dst_rmw_op
    b = tracing.require("nisa.dma_copy")
    if table is src:
        b.emit("dma_copy_indirect", "dma", {"dst": dst.to_ap()},
               {"table": whole, "offsets": ind.offsets.to_ap()}, attrs)
    else:
        b.emit("dma_copy_indirect", "dma", {"table": whole}, {"src": src.to_ap(), "offsets": ind.offsets.to_ap()},
               attrs)


def staged(src, what: str, oob_mode: str = "error"):
    """A gathering view ``src`` copied into a fresh HBM staging tensor of its shape and dtype (a
    ``dma_copy_indirect``), returned as a plain tensor that a DMA reduction can read."""
    from nkihub.nki.tensor import NkiTensor
    b = tracing.require(what)
    spec = b.new_tensor(src.shape, src.spec.dtype, "hbm", name="gathered")
    tmp = NkiTensor(spec)
    dma_copy(tmp, src, oob_mode, "unknown")
    return tmp
