"""The instruction table's building blocks: ``OpDef`` (one row of the table), the registry ``OPS``,
the category sets, and the helpers every ``execute`` uses (fp32 math, fitting a source to a destination).

Each instruction is defined once, in one module of this package, with its engines, operand rules, numpy
``execute`` and ``cost`` side by side. The executor, the validator and the cost model look rows up here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")

# Category names (rows carry a subset; rules read these sets, never lists of opcodes).
ELEMENTWISE = "elementwise"
REDUCE = "reduce"
DMA = "dma"
MATMUL = "matmul"
ACCUMULATE = "accumulate"     # may read-modify-write its destination associatively (PSUM accumulation)
GENERATE = "generate"         # writes without reading tensors (memset, iota)
DEBUG = "debug"               # no effect on data (device_print)
INDIRECT = "indirect"         # its operand "table" is a whole tensor addressed through run-time offsets
CROSS_PARTITION = "cross_partition"   # a result partition depends on other partitions of an operand
RANDOM = "random"             # results depend on generator state, not only on the operands (rand, dropout)
ROUNDED = "rounded"           # every destination gets fp32 results rounded by store(): a bf16 one holds
#                               only the canonical NaNs (0x7fc0 and 0xffc0)


@dataclass
class ExecContext:
    """State an execution carries besides tensors: the target, the printed lines, a random generator."""

    target: object
    printed: list = field(default_factory=list)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    echo: bool = True


@dataclass(frozen=True)
class OpDef:
    """One instruction: opcode, allowed engines, docstring, rules, numpy execute, cost, categories.

    - ``execute(ins, src, dst, ctx)``: ``src``/``dst`` map roles to numpy views of the operands (raw
      dtypes); it computes in fp32 and writes into the ``dst`` views with :func:`store`.
    - ``cost(ins, program, target) -> float``: seconds the instruction keeps its engine busy.
    - ``rules``: callables ``(ins, program, target)`` that raise ``KernelRuleError``.
    - ``reads_dst(ins)``: whether the destination's old contents are read (accumulation): True for
      every destination, or the roles that are read (e.g. ``("reduce_res",)``).
    - ``bind(ins, src, dst, scratch) -> step(ctx) | None`` (optional): the fast engine's compiled form of
      ``execute`` for operands stacked along a leading batch axis (see ``simulator.isa.fast``); None
      (or no bind) runs ``execute`` instead. It must give ``execute``'s bits.
    - ``dynamic_reads``: source roles of which the instruction reads elements chosen by run-time values
      (indirect DMA tables, gather buffers): the dataflow checks cannot tell which, so skip them.
    - ``taint(ins, role, t, dst_ap)``: where the per-element taint ``t`` of operand ``role`` lands in the
      destination (an array of ``dst_ap.shape``), for rows whose data movement the category rules of
      ``simulator.taint`` would over-approximate; None to use those rules.
    - ``copies(ins)``: the source role whose values ``ins`` writes into its destination ``dst``, element
      i to element i, bit for bit when their dtypes are equal, else rounded to nearest even; None for
      other rows. The batched plan lets readers of such a copy read its source (``simulator.dataflow``).
    - ``moves(ins)``: the source role whose values, converted to the destination's dtype, are all ``ins``
      writes into ``dst``, in any arrangement (a transpose), else None.
    - ``widens(ins)``: the source roles ``ins`` reads only through their fp32 values (``f32``), so a
      folded read may hand it fp32 values equal to the widened ones.
    - ``rows``: every partition's results depend on that partition's operands only (elementwise, per-row
      reductions and scans, no partition index), so ``execute`` on a stack of instructions seen as one
      with their partitions end to end gives each its own bits (the fast engine's step for a row
      without a bind, ``simulator.replay.bind_step``).
    """

    opcode: str
    engines: frozenset
    doc: str
    execute: Callable
    cost: Callable
    rules: tuple = ()
    categories: frozenset = frozenset()
    reads_dst: Callable = staticmethod(lambda ins: False)
    bind: Callable | None = None
    dynamic_reads: frozenset = frozenset()
    taint: Callable | None = None
    copies: Callable = staticmethod(lambda ins: None)
    moves: Callable = staticmethod(lambda ins: None)
    widens: Callable = staticmethod(lambda ins: ())
    rows: bool = False


OPS: dict[str, OpDef] = {}


def register(opcode: str, *, engines, execute, cost, rules=None, categories=(), reads_dst=None,
             dynamic_reads=(), taint=None, doc: str | None = None, bind=None, copies=None, moves=None,
             widens=None, rows=False) -> OpDef:
    """Add a row to the instruction table (``doc`` defaults to ``execute``'s docstring).

    ``rules`` must be stated, ``()`` when no operand rule applies, so no row silently skips validation.
    """
    if opcode in OPS:
        raise ValueError(f"instruction {opcode!r} is defined twice")
    if rules is None:
        raise ValueError(f"instruction {opcode!r}: state its operand rules (rules=() if none apply)")
    row = OpDef(opcode, frozenset(engines), (doc or execute.__doc__ or "").strip(), execute, cost,
                tuple(rules), frozenset(categories), reads_dst or (lambda ins: False), bind,
                frozenset(dynamic_reads), taint, copies or (lambda ins: None), moves or (lambda ins: None),
                widens or (lambda ins: ()), rows)
    OPS[opcode] = row
    return row


def opdef(opcode: str) -> OpDef:
    """The table row of an opcode."""
    try:
        return OPS[opcode]
    except KeyError:
        raise ValueError(f"unknown instruction {opcode!r}") from None


def dst_reads(row: OpDef, ins) -> tuple[str, ...]:
    """The destination roles whose old contents ``ins`` reads (see ``OpDef.reads_dst``)."""
    reads = row.reads_dst(ins)
    if reads is True:
        return tuple(ins.dst)
    if not reads:
        return ()
    return tuple(r for r in reads if r in ins.dst)


def reduce_res_read(ins) -> tuple[str, ...]:
    """``reads_dst`` of instructions with an accumulating reduction: in ``reduce_cmd='reduce'`` mode
    ``reduce_res`` keeps accumulating onto its contents (the main destination is only written), unless
    the instruction reads the engine's accumulator registers (source ``acc``) instead."""
    return ("reduce_res",) if ins.attrs.get("reduce_cmd") == "reduce" and "acc" not in ins.src else ()


def in_category(category: str) -> frozenset:
    """Opcodes carrying a category."""
    return frozenset(k for k, v in OPS.items() if category in v.categories)


# -- helpers for execute ---------------------------------------------------------------------------

def f32(a: np.ndarray) -> np.ndarray:
    """The fp32 value the engines compute with."""
    return a.astype(np.float32, copy=False) if a.dtype != np.float32 else a


def fit(a: np.ndarray, shape: tuple) -> np.ndarray:
    """Make a source operand match a destination shape: equal, numpy-broadcastable, or the same
    partitions with the same number of elements per partition (reinterpreted row-major)."""
    if a.shape == tuple(shape):
        return a
    try:
        return np.broadcast_to(a, shape)
    except ValueError:
        pass
    if a.shape[0] == shape[0] and math.prod(a.shape[1:]) == math.prod(shape[1:]):
        return a.reshape(shape)
    if a.size == math.prod(shape):
        return a.reshape(shape)
    raise ValueError(f"cannot fit an operand of shape {a.shape} to {tuple(shape)}")


def store(dst: np.ndarray, value) -> None:
    """Write an fp32 (or exact) result into a destination view, casting with round-to-nearest-even."""
    value = np.asarray(value)
    if dst.dtype.kind in "iub" and value.dtype.kind == "f":
        # Float to integer conversions saturate and round to nearest on the engines.
        info = np.iinfo(dst.dtype) if dst.dtype.kind != "b" else None
        value = np.rint(value)
        if info is not None:
            value = np.clip(value, info.min, info.max)
    dst[...] = fit(value, dst.shape).astype(dst.dtype, copy=False) if value.shape != dst.shape \
        else value.astype(dst.dtype, copy=False)


def free_elems(shape: tuple) -> int:
    """Elements per partition of a tile shape."""
    return math.prod(shape[1:]) if len(shape) > 1 else 1
