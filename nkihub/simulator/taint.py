"""Tracking values computed from memory nothing wrote, for the validator's dataflow walk.

Reading unwritten memory is an error when what is computed from it reaches memory the caller sees (an
output, or a tensor the caller passed in). Production kernels routinely compute on whole tiles whose
unwritten part they overwrite later or never store; the hardware computes garbage there, harmlessly.

Every element of a tracked tensor carries a taint: -1 when clean, else the index of the instruction that
first read unwritten memory on the way to it. Plain DMAs and elementwise instructions move taints element
by element, other engine instructions partition by partition (partition p of the result from partition p
of each operand), matmuls line by line (a tainted stationary column taints a result row, a tainted
moving column a result column); instructions that mix partitions (``CROSS_PARTITION``) taint their whole
destination unless their row places taints itself (``OpDef.taint``: nc_stream_shuffle by its mask). The error names the first read, its operand and the place the garbage reached.
"""
from __future__ import annotations

import warnings

import numpy as np

from nkihub.simulator.errors import KernelRuleError, UninitializedWarning
from nkihub.simulator.isa.base import CROSS_PARTITION, DMA, ELEMENTWISE, MATMUL
from nkihub.simulator.program import AccessPattern, Instruction, Program
from nkihub.simulator.rules import fail

CLEAN = -1


def earliest(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise the earliest taint of two arrays (CLEAN where both are clean)."""
    return np.where(a < 0, b, np.where(b < 0, a, np.minimum(a, b)))


class Taints:
    """Taint arrays of the live tensors (same layout as the validator's write stamps)."""

    def __init__(self, program: Program, visible: set[str], view):
        self.program = program
        self.visible = visible          # roots the caller sees
        self._view = view               # (array, ap) -> view of the array with the stamps' layout
        self.arrays: dict[str, np.ndarray] = {}
        self.first_reads: dict[int, tuple] = {}
        self.carried: dict[tuple[str, int], tuple] = {}   # (visible root, origin) -> first write carrying it
        self.computed: set[int] = set()   # origins some instruction computed on (not only moved)

    def _get(self, root: str, size: int) -> np.ndarray:
        arr = self.arrays.get(root)
        if arr is None:
            arr = self.arrays[root] = np.full(size, CLEAN, dtype=np.int32)
        return arr

    def read(self, idx: int, role: str, ap: AccessPattern, root: str, unwritten: np.ndarray,
             missing: int) -> np.ndarray | None:
        """The taint of each element of a read (shape ``ap.shape``), or None when all are clean.
        ``unwritten`` marks the elements nothing wrote (the stamps' view of ``ap``)."""
        arr = self.arrays.get(root)
        if missing == 0 and arr is None:
            return None
        elem = np.full(unwritten.shape, CLEAN, dtype=np.int32) if arr is None else np.array(self._view(arr, ap))
        if missing:
            self.first_reads.setdefault(idx, (role, ap, missing))
            elem = np.where(unwritten, idx, elem)
        if elem.ndim > len(ap.shape):      # an alias read: one value spans several stamp units
            elem = np.where(elem < 0, CLEAN, elem).max(axis=-1)
        return elem if (elem >= 0).any() else None

    def write(self, ins: Instruction, categories: frozenset, ap: AccessPattern, root: str, size: int,
              reads: list, ratio: int, spread=None) -> None:
        """Record the taint of a write from ``reads`` ((role, access pattern, taint or None) of what the
        instruction read). Garbage written to memory the caller sees is an error only if it is still there
        at the end (:meth:`check`): a kernel may fill a whole output tile and overwrite its padding later.
        ``spread``: the row's own placement of an operand's taint (``OpDef.taint``)."""
        reads = [(role, r_ap, t) for role, r_ap, t in reads if t is not None]
        if not reads and root not in self.arrays:
            return
        out = np.full(ap.shape, CLEAN, dtype=np.int32)
        for role, r_ap, t in reads:
            out = earliest(out, spread(ins, role, t, ap) if spread is not None else
                           _spread(t, role, r_ap, ap, categories))
        if not _moves(ins):
            self.computed.update(int(o) for o in np.unique(out[out >= 0]))
        if root in self.visible:
            for origin in np.unique(out[out >= 0]):
                self.carried.setdefault((root, int(origin)), (ins, ap))
        view = self._view(self._get(root, size), ap)
        view[...] = out[..., None] if ratio > 1 else out

    def check(self, root: str) -> None:
        """Raise if memory the caller sees (``root``) still holds a value computed from unwritten memory.

        The unwritten part of a partly written tile that copies moved, unchanged, into it (a masked result
        stored whole, as AWS's examples do, checking only what the mask wrote) is no computation on
        garbage: the caller gets those elements as they are (NaN here), with a warning instead of an error.
        A tile nothing wrote at all, and HBM read before it was written (a race between cores), stay
        errors."""
        arr = self.arrays.get(root)
        if root in self.visible and arr is not None and (arr >= 0).any():
            origins = [int(o) for o in np.unique(arr[arr >= 0])]
            for origin in origins:
                reached, dst = self.carried[(root, origin)]
                _, read, missing = self.first_reads[origin]
                if (origin in self.computed or not _moves(self.program.instructions[origin]) or missing >= read.size
                        or not self.program.tensor_of(read).on_chip):
                    raise self.error(origin, reached, dst)
            err = self.error(origins[0], *self.carried[(root, origins[0])])
            # the run reads elements nothing wrote: engines must give it fresh NaN buffers, not pooled bytes
            self.program.meta["reads_unwritten"] = True
            warnings.warn(f"{err} (stored as it is: those elements hold no value)", UninitializedWarning,
                          stacklevel=2)

    def error(self, origin: int, reached: Instruction, dst: AccessPattern) -> KernelRuleError:
        role, ap, missing = self.first_reads[origin]
        first = self.program.instructions[origin]
        where = f" (written at {reached.loc})" if reached.loc and reached is not first else ""
        return fail("read-uninitialized", f"reads {missing} of {ap.size} elements of {self.program.tensors[ap.tensor].label} "
                    f"that nothing wrote, and the result reaches {self.program.tensors[dst.tensor].label}{where}", first, self.program, role, ap)


def _moves(ins: Instruction) -> bool:
    """``ins`` moves values unchanged (a DMA or a copy), computing nothing from them."""
    from nkihub.simulator.isa import opdef
    row = opdef(ins.opcode)
    return (DMA in row.categories and CROSS_PARTITION not in row.categories and not ins.attrs.get("dst_rmw_op")) \
        or row.copies(ins) is not None


def per_partition(t: np.ndarray) -> np.ndarray:
    """The earliest taint of each partition (dim 0) of ``t``."""
    per = np.where(t < 0, np.iinfo(np.int32).max, t).reshape(t.shape[0], -1).min(axis=1)
    return np.where(per == np.iinfo(np.int32).max, CLEAN, per).astype(np.int32)


def _whole(t: np.ndarray, shape: tuple) -> np.ndarray:
    return np.full(shape, int(t[t >= 0].min()), dtype=np.int32)


def _spread(t: np.ndarray, role: str, src: AccessPattern, dst: AccessPattern, categories) -> np.ndarray:
    """How the taint ``t`` of operand ``role`` (read through ``src``) lands on the destination ``dst``."""
    shape = dst.shape
    if DMA in categories and CROSS_PARTITION not in categories:
        return t.reshape(shape) if t.size == dst.size else _whole(t, shape)      # element i to element i
    if MATMUL in categories and role in ("stationary", "moving") and t.ndim == 2 and len(shape) == 2:
        # dst[m, n] sums stationary[:, m] * moving[:, n]: a tainted column or row taints its line.
        k_min = np.where(t < 0, np.iinfo(np.int32).max, t).min(axis=0)
        line = np.where(k_min == np.iinfo(np.int32).max, CLEAN, k_min).astype(np.int32)
        if role == "stationary" and line.size == shape[0]:
            return np.broadcast_to(line[:, None], shape)
        if role == "moving" and line.size == shape[1]:
            return np.broadcast_to(line[None, :], shape)
        return _whole(t, shape)
    if CROSS_PARTITION in categories or MATMUL in categories:
        return _whole(t, shape)
    if ELEMENTWISE in categories and _broadcastable(t.shape, shape):
        return np.broadcast_to(t, shape)
    if t.ndim >= 1 and len(shape) >= 1 and t.shape[0] == shape[0]:
        # Engines work partition by partition: partition p of the result depends on partition p only.
        return np.broadcast_to(per_partition(t).reshape((-1,) + (1,) * (len(shape) - 1)), shape)
    return _whole(t, shape)


def _broadcastable(src: tuple, dst: tuple) -> bool:
    try:
        np.broadcast_shapes(src, dst)
        return np.broadcast_shapes(src, dst) == tuple(dst)
    except ValueError:
        return False
