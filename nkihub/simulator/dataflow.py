"""Dataflow of a straight-line Program with on-chip memory renamed: what ``simulator.batching`` groups.

Every write of an SBUF/PSUM tile becomes an *event* with storage of its own, so the reuse of ring slots
and PSUM banks (write-after-read and write-after-write on the same addresses) no longer orders the
instructions; only true dependencies do. An event's storage mirrors its access pattern: the free-axis
strides are kept (numpy picks summation orders and code paths from them, so operands keep the layout the
reference executor sees) and the partitions are packed. Reads of on-chip tiles become *read plans*: the
events (or the initial contents) that produced each element, as strided views of their storage, or boxes
of several events, or (rarely) an element gather. HBM tensors stay in place; their conflicts (read after
write, write after read, write after write) order the instructions.

Each instruction gets a *level*: one more than the levels it depends on. Instructions of one level are
independent. Rows without a ``bind`` (which may keep state in the execution context: the random
generator, printed lines) keep their program order among themselves, except ``rows`` rows (stacked by
``simulator.replay.rows_step``).

Copies are *folded*: a reader of a box of a copy's renamed destination (a row whose ``copies`` names
its source) reads the matching box of the copy's source instead, an HBM access pattern that nothing
writes between the copy and the read, or the source's event, when the source has the layout the reader's
bind would otherwise see (``simulator.folding``). With equal dtypes the copy moves bits. A copy rounding
fp32 to bf16 folds only into a reader that widens the operand anyway (``widens``) and only when every
source value is a canonical bf16 value (written by a ``rounded`` row into bf16 and only moved since,
``moves``), so the rounding changes no bit. A copy all of whose readers were folded is *dropped*: it need
not run. So the matmul tutorial's Tensor Engine reads its HBM operands directly instead of after a DMA
into SBUF, and attention's matmuls read transposed probabilities from PSUM.
"""
from __future__ import annotations

import functools
from collections import Counter
from typing import NamedTuple

import numpy as np

from nkihub.simulator.folding import compact, compose, same_layout, sub_index
from nkihub.simulator.isa import opdef
from nkihub.simulator.isa.base import ROUNDED, dst_reads
from nkihub.simulator.program import AccessPattern, Program


# Instructions between the points where a Dataflow made a slice at a time (``Dataflow.planning``) yields
# (and groups, in ``simulator.batching``): a slice of the planner's per-instruction work is then about
# 1 ms (33 us per instruction here at flash-attn S 512), under a tenth of the smallest benchmarked call
# (flash-attn S 512, 16-19 ms), so a call's budget is passed by little.
SLICE = 32
# Instructions between yields of the planner's first pass (which tensors are written, last uses: about
# 1.5 us per instruction).
PRE_SLICE = 1024

# Latest writes of a tile whose records ``Dataflow._covering`` reads before the event-per-element map
# (0: the map only, which the tests compare against).
COVER_WRITES = 32

# Fold copies into their readers (the module docstring). Always on; the op tests turn it off to keep their
# staging copies, which put an instruction's operands in renamed storage.
FOLD_COPIES = True


class NotBatchable(Exception):
    """The Program uses something the renaming does not model (aliased tensors, overlapping or negative
    strides in a destination); the fast engine replays it instruction by instruction."""


class Event(NamedTuple):
    """The value one instruction wrote through one destination role: ``parts`` partitions of ``span``
    storage elements (``storage_span``; free strides as in the access pattern). The event covers tensor partitions
    ``row0 + p * row_step`` from column ``col0``. ``tensor`` is set for the initial contents of a
    tensor, whose storage is the tensor's own buffer (original layout).

    The planner's records (events, boxes, read plans: one or more per instruction, kept with the plan)
    are named tuples: made in a quarter of a frozen dataclass's time (0.19 against 0.79 us here)."""

    ins: int
    role: str
    level: int
    parts: int
    span: int
    row0: int = 0
    row_step: int = 1
    col0: int = 0
    tensor: str | None = None


class Box(NamedTuple):
    """Elements ``start:stop`` along ``axis`` of a read (all of it when ``axis`` is None) come from event
    ``event``'s storage at ``base + sum(index * strides)`` (index relative to the box)."""

    axis: int | None
    start: int
    stop: int
    event: int
    base: int
    strides: tuple


class ReadPlan(NamedTuple):
    """How one operand of one instruction finds its values: ``memory`` (the access pattern, read in
    place), ``boxes`` (views of events' storage), or ``gather`` (event and position per element); ``via``
    names the copy whose destination was to be read, for a read folded onto that copy's source."""

    memory: AccessPattern | None = None
    boxes: tuple = ()
    gather: tuple | None = None
    via: int | None = None      # folded: the copy instruction whose source this reads instead
    dtype: np.dtype | None = None   # folded onto a wider source: its dtype (else the operand's)


_amax = np.maximum.reduce     # ndarray.max without numpy's Python-level wrapper (called per operand)


def storage_span(ap: AccessPattern) -> int:
    """Elements per partition of renamed storage for ``ap``: its free span, plus one for a column (free
    span 1) whose partitions are not back to back. numpy and BLAS choose kernels (with other summation
    orders) by whether a vector's stride is 1, not by the stride's value, so a column keeps that
    property. Wider tiles are stored with their partitions back to back: a matrix's row stride does not
    change BLAS's result or numpy's per-row loops, and contiguous rows let numpy run one loop over a
    whole stacked operand instead of one per partition (5x faster on [128, 128] tiles)."""
    span = ap.free_span
    if span == 1 and ap.dims and ap.dims[0][1] > 1 and ap.dims[0][0] != span:
        return span + 1
    return span


def new_storage_bytes(program: Program, ap: AccessPattern) -> int:
    """Bytes of renamed storage a write through ``ap`` takes (0 when its tensor is not renamed)."""
    spec = program.tensors[ap.tensor]
    if not (spec.on_chip and spec.kind == "internal" and ap.dims):
        return 0
    return ap.dims[0][1] * storage_span(ap) * spec.np_dtype.itemsize


def _distinct(ap: AccessPattern) -> bool:
    return _distinct_dims(ap.dims)


@functools.lru_cache(maxsize=4096)     # a kernel's writes repeat a few geometries
def _distinct_dims(dims: tuple) -> bool:
    span = 1
    for stride, size in sorted(dims, key=lambda d: d[0]):
        if size <= 1:
            continue
        if stride < span:
            return False
        span += stride * (size - 1)
    return True


def _flat_index(ap: AccessPattern) -> np.ndarray:
    idx = np.full((1,) * len(ap.dims), ap.offset, dtype=np.int64)
    for d, (stride, n) in enumerate(ap.dims):
        shape = [1] * len(ap.dims)
        shape[d] = n
        idx = idx + (np.arange(n, dtype=np.int64) * stride).reshape(shape)
    return np.broadcast_to(idx, ap.shape)


def _place(ap: AccessPattern, event: Event, width: int):
    """``(base, strides)`` of the elements of ``ap`` in ``event``'s storage (every element of ``ap`` was
    written by ``event``), or None when the event's geometry cannot be inverted affinely. ``width`` is
    the tensor's elements per partition."""
    if event.tensor is not None:
        return ap.offset, tuple(s for s, _ in ap.dims)
    if not ap.dims:
        return None
    row, col = divmod(ap.offset, width)
    s0, n0 = ap.dims[0]
    rows, rem = divmod(s0, width)
    if n0 > 1 and (rem or rows % event.row_step):
        return None
    dr = row - event.row0
    if dr % event.row_step:
        return None
    s0_storage = (rows // event.row_step) * event.span if n0 > 1 else 0
    return dr // event.row_step * event.span + col - event.col0, (s0_storage,) + tuple(s for s, _ in ap.dims[1:])


def _sub(ap: AccessPattern, axis: int, a: int, b: int) -> AccessPattern:
    dims = list(ap.dims)
    stride, _ = dims[axis]
    dims[axis] = (stride, b - a)
    return AccessPattern(ap.tensor, ap.offset + a * stride, tuple(dims))


def _rows(ap: AccessPattern, width: int):
    """(first row, row step, rows) of a row-shaped access pattern, else None."""
    s0, n0 = ap.dims[0]
    if s0 % width:
        return None
    return ap.offset // width, s0 // width, n0


def _columns(ap: AccessPattern, width: int) -> np.ndarray:
    cols = np.array([ap.offset % width], dtype=np.int64)
    for stride, n in ap.dims[1:]:
        cols = (cols[:, None] + np.arange(n, dtype=np.int64) * stride).reshape(-1)
    return cols


@functools.lru_cache(maxsize=1024)     # a write's columns are asked for by each of its readers
def _column_set(ap: AccessPattern, width: int) -> frozenset:
    return frozenset(_columns(ap, width).tolist())


def _column_range(ap: AccessPattern, width: int):
    """``(first, end)`` when the columns ``ap`` touches in a row are exactly ``first:end``, else None."""
    step, first = 1, ap.offset % width
    for stride, n in sorted((d for d in ap.dims[1:] if d[1] > 1), key=lambda d: d[0]):
        if stride != step:
            return None
        step *= n
    return first, first + step


def _contains(outer: AccessPattern, inner: AccessPattern, width: int) -> bool:
    """Whether every element of ``inner`` is an element of ``outer`` (row-shaped patterns: rows compared
    as progressions, the columns of one row as sets)."""
    return _contains_at(outer.offset, outer.dims, inner.offset, inner.dims, width)


@functools.lru_cache(maxsize=16384)     # ring slots repeat a few geometries: cached by offsets and dims
def _contains_at(outer_offset: int, outer_dims: tuple, inner_offset: int, inner_dims: tuple, width: int) -> bool:
    outer, inner = AccessPattern("", outer_offset, outer_dims), AccessPattern("", inner_offset, inner_dims)
    ro, ri = _rows(outer, width), _rows(inner, width)
    if ro is None or ri is None:
        return False
    (o0, os_, on), (i0, is_, in_) = ro, ri
    last = i0 + is_ * (in_ - 1)
    if i0 < o0 or (i0 - o0) % os_ or last > o0 + os_ * (on - 1) or (in_ > 1 and is_ % os_):
        return False
    span = _column_range(outer, width)
    if span is not None:    # the usual case: outer's columns are a range, so compare inner's bounds
        lo = inner.offset % width + sum(min(0, s * (n - 1)) for s, n in inner.dims[1:])
        hi = inner.offset % width + sum(max(0, s * (n - 1)) for s, n in inner.dims[1:])
        return span[0] <= lo and hi < span[1]
    return _column_set(outer, width).issuperset(_columns(inner, width).tolist())


@functools.lru_cache(maxsize=16384)     # ring slots repeat a few geometries: cached by offset and dims
def _box_at(offset: int, dims: tuple, width: int):
    """``Dataflow._box`` of the access pattern ``offset``, ``dims`` in a tensor of ``width`` columns."""
    row0, col0 = divmod(offset, width)
    s0, n0 = dims[0] if dims else (width, 1)
    span = 1 + sum(s * (n - 1) for s, n in dims[1:])
    if s0 % width or col0 + span > width or dims and min(dims)[0] < 0:
        return None
    return row0, row0 + (s0 // width) * (n0 - 1), col0, col0 + span


def _view(arr: np.ndarray, ap: AccessPattern) -> np.ndarray:
    item = arr.itemsize
    return np.ndarray(tuple(n for _, n in ap.dims), arr.dtype, arr, ap.offset * item,
                      tuple(s * item for s, _ in ap.dims))


class Dataflow:
    """Levels, events and read plans of a Program (see the module docstring). Raises
    :class:`NotBatchable` for what the renaming does not model."""

    def __init__(self, program: Program, window_bytes: int | None = None):
        for _ in self._build(program, window_bytes):
            pass

    @classmethod
    def planning(cls, program: Program, window_bytes: int | None = None):
        """The Dataflow of ``program`` made a slice at a time: a generator yielding after every
        ``SLICE`` instructions, returning the Dataflow (``simulator.replay`` plans across calls this way,
        within a time budget per call)."""
        df = cls.__new__(cls)
        yield from df._build(program, window_bytes)
        return df

    def _build(self, program: Program, window_bytes: int | None):
        self.program = program
        tensors = program.tensors
        if any(getattr(s, "alias_of", None) is not None for s in tensors.values()):
            raise NotBatchable("aliased tensors (dtype views share storage)")
        # Tiles the host reads or writes (inputs, outputs, constants) stay in their buffers.
        self.renamed = {n for n, s in tensors.items() if s.on_chip and s.kind == "internal"}
        self._width = {n: tensors[n].free_size for n in self.renamed}     # elements per partition
        self.events: list[Event] = []
        self.levels: list[int] = []
        self.src_plans: list[dict] = []     # per instruction: role -> ReadPlan
        self.old_plans: list[dict] = []     # per instruction: dst role -> ReadPlan of the values it reads back
        self.dst_events: list[dict] = []    # per instruction: role -> event id (renamed destinations)
        self.dropped: frozenset = frozenset()   # folded copies no read needs (see the module docstring)
        self._copies: dict[int, tuple] = {}     # destination event of a foldable copy -> (copy, src plan,
        #                                         dst ap, src ap, "exact" or "widened")
        self._clean: set[int] = set()           # events holding canonical bf16 values only (maybe widened)
        self._ev: dict[str, np.ndarray] = {}       # event per element, made when a read needs it
        self._writes: dict[str, list] = {}          # per renamed tensor: (ap, event, box) in order
        self._applied: dict[str, int] = {}          # writes already applied to _ev
        self._init: dict[str, int] = {}
        self._wlev: dict[str, np.ndarray] = {}
        self._rlev: dict[str, np.ndarray] = {}
        written = set()     # tensors some instruction writes
        last_use = {}       # renamed tensor -> last instruction touching it: its bookkeeping goes then
        renamed = self.renamed
        for i, ins in enumerate(program.instructions):
            if i % PRE_SLICE == PRE_SLICE - 1:
                yield
            for ap in ins.dst.values():
                written.add(ap.tensor)
                if ap.tensor in renamed:
                    last_use[ap.tensor] = i
            for ap in ins.src.values():
                if ap.tensor in renamed:
                    last_use[ap.tensor] = i
        ordered_level = -1
        # Windows (``window_bytes``): once the renamed writes of the current window pass the budget, the
        # next instruction opens a window whose instructions all come after the levels so far, so the
        # storage live at once stays near the budget plus what the program holds on chip across the cut.
        floor, top, in_window, self.windows = -1, -1, 0, 1
        all_events = self.events
        for i, ins in enumerate(program.instructions):
            if i % SLICE == SLICE - 1:
                yield
            if window_bytes is not None and in_window > window_bytes:
                floor, in_window, self.windows = top, 0, self.windows + 1
            row = opdef(ins.opcode)
            generic = row.bind is None and not row.rows
            back = tuple(ins.dst) if generic else dst_reads(row, ins)
            dep = ordered_level if generic else -1
            src_plans, old_plans = {}, {}
            reads = [(src_plans, r, ap) for r, ap in ins.src.items()] + [(old_plans, r, ins.dst[r]) for r in back]
            for plans, role, ap in reads:
                if ap.tensor in renamed:
                    plan = self._plan(ap)
                    if plans is src_plans:
                        plan = self._fold(plan, ap, ins, role)
                else:
                    plan = ReadPlan(memory=ap)
                mem = plan.memory
                if mem is None:
                    if plan.gather is None:
                        for box in plan.boxes:
                            lv = all_events[box.event].level
                            if lv > dep:
                                dep = lv
                    else:
                        for e in self._plan_events(plan):
                            dep = max(dep, all_events[e].level)
                elif mem.size and mem.tensor in written:
                    dep = max(dep, int(_amax(_view(self._levels_of(self._wlev, mem.tensor), mem), axis=None)))
                plans[role] = plan
            for ap in ins.dst.values():
                if ap.tensor not in self.renamed and ap.size:
                    dep = max(dep, int(_amax(_view(self._levels_of(self._wlev, ap.tensor), ap), axis=None)))
                    if ap.tensor in self._rlev:     # made by the first read of a written tensor
                        dep = max(dep, int(_amax(_view(self._rlev[ap.tensor], ap), axis=None)))
            level = max(dep, floor) + 1
            top = max(top, level)
            for plan in src_plans.values():
                mem = plan.memory
                if mem is not None and mem.size and mem.tensor in written:
                    v = _view(self._levels_of(self._rlev, mem.tensor), mem)
                    np.maximum(v, level, out=v)
            events, read_back = {}, None
            for role, ap in ins.dst.items():
                if ap.tensor not in self.renamed:
                    if ap.size:
                        _view(self._levels_of(self._wlev, ap.tensor), ap)[...] = level
                    continue
                events[role] = self._write(i, role, level, ap)
                if window_bytes is not None:
                    read_back = dst_reads(row, ins) if read_back is None else read_back
                    if role in read_back:
                        continue
                    in_window += new_storage_bytes(program, ap)
            if FOLD_COPIES:
                self._note_copy(i, ins, row, src_plans, events)
            if generic:
                ordered_level = level
            self.levels.append(level)
            self.src_plans.append(src_plans)
            self.old_plans.append(old_plans)
            self.dst_events.append(events)
            for ap in (*ins.src.values(), *ins.dst.values()):
                if ap.tensor in renamed and last_use[ap.tensor] == i:
                    for table in (self._ev, self._writes, self._applied):
                        table.pop(ap.tensor, None)
        self._drop_copies()
        self._ev = self._writes = self._wlev = self._rlev = self._copies = self._clean = None

    def _note_copy(self, i: int, ins, row, src_plans: dict, events: dict) -> None:
        """Record what folding needs about instruction ``i``: which of its events hold canonical bf16
        values, and, for a copy, whether its readers may read its source (see ``_copy_kind``)."""
        tensors = self.program.tensors
        moved = row.moves(ins) or row.copies(ins)
        for role, e in events.items():
            dtype = tensors[ins.dst[role].tensor].dtype
            if dtype == "bfloat16" and ROUNDED in row.categories or dtype in ("bfloat16", "float32") and \
                    role == "dst" and moved is not None and self._clean_plan(src_plans[moved]):
                self._clean.add(e)
        role = row.copies(ins)
        if role is not None and "dst" in events:
            kind = self._copy_kind(ins, role, src_plans[role])
            if kind is not None:
                self._copies[events["dst"]] = (i, src_plans[role], ins.dst["dst"], ins.src[role], kind)

    def _clean_plan(self, plan: ReadPlan) -> bool:
        events = self._plan_events(plan) if plan.memory is None else ()
        return bool(events) and all(e in self._clean for e in events)

    def _copy_kind(self, ins, role: str, plan: ReadPlan):
        """``"exact"`` when copy ``ins`` writes its source's bits (equal dtypes), ``"widened"`` when it
        rounds an fp32 source whose values are all canonical bf16 values (so rounding changes no bit, and
        a reader that widens the copy gets the source's fp32 values back), else None."""
        tensors = self.program.tensors
        s, d = ins.src[role], ins.dst["dst"]
        if s.shape != d.shape or not d.dims or not d.size or plan.gather is not None or plan.dtype is not None:
            return None
        sd, dd = tensors[s.tensor].dtype, tensors[d.tensor].dtype
        if sd == dd:
            return "exact"
        if (sd, dd) == ("float32", "bfloat16") and self._clean_plan(plan):
            return "widened"
        return None

    def _fold(self, plan: ReadPlan, ap: AccessPattern, ins, role: str) -> ReadPlan:
        """``plan`` (``ins`` reading renamed ``ap`` through ``role``), or the matching part of the source
        plan of the foldable copy it reads: ``ap`` within that copy's destination, the source keeping the
        layout the bind would see (``folding.same_layout``), no write since the copy changing an HBM
        source (nor ``ins`` writing that tensor: no read overlapping the reader's own write), and for a
        rounding copy, a reader that only widens ``role`` to fp32 (which then gets the fp32 source)."""
        if plan.gather is not None or len(plan.boxes) != 1:
            return plan
        box = plan.boxes[0]
        copy = self._copies.get(box.event)
        if copy is None:
            return plan
        c, src, dst_ap, src_ap, kind = copy
        if kind == "widened" and role not in opdef(ins.opcode).widens(ins):
            return plan
        where = sub_index(dst_ap, ap)
        if where is None:
            return plan
        folded = self._part(src, *where, ap.shape)
        if folded is None:
            return plan
        got = tuple(x for x, _ in folded.memory.dims) if folded.memory is not None else folded.boxes[0].strides
        if not same_layout(got, box.strides, ap.shape):
            return plan
        # widened: the bind's fp32 copy would be packed (and a gathered operand is laid out as storage)
        if kind == "widened" and not same_layout(got, compact(box.strides, ap.shape), ap.shape):
            return plan
        # An HBM write after the copy to what it read has a level above the copy's (it waits for the copy's
        # read), one before it a level below (the copy waits for it): so no write came between them exactly
        # when no element's write level passes the copy's.
        mem = folded.memory
        if mem is not None and (any(d.tensor == mem.tensor for d in ins.dst.values()) or mem.tensor in self._wlev
                                and int(_view(self._wlev[mem.tensor], mem).max()) > self.levels[c]):
            return plan
        return ReadPlan(folded.memory, folded.boxes, folded.gather, c,
                        self.program.tensors[src_ap.tensor].np_dtype if kind == "widened" else None)

    @staticmethod
    def _part(src: ReadPlan, start: tuple, axes: tuple, shape: tuple):
        """The part of a copy's source plan ``src`` read by the sub-box (``start``, ``axes``; ``shape``) of
        the copy's destination, as a plan of one access pattern or one box; None when it spans boxes."""
        if src.memory is not None:
            m = src.memory
            offset, strides = compose(tuple(x for x, _ in m.dims), start, axes)
            return ReadPlan(memory=AccessPattern(m.tensor, m.offset + offset, tuple(zip(strides, shape))))
        for b in src.boxes:
            if b.axis is None:
                offset, strides = compose(b.strides, start, axes)
            else:
                lo = start[b.axis]
                hi = lo + next((n for a, n in zip(axes, shape) if a == b.axis), 1)
                if not (b.start <= lo and hi <= b.stop):
                    continue
                offset, strides = compose(b.strides, start, axes, b.axis, b.start)
            return ReadPlan(boxes=(Box(None, 0, 0, b.event, b.base + offset, strides),))
        return None

    def _drop_copies(self) -> None:
        """Drop the foldable copies whose destination every reader reads through the copy's source."""
        used = Counter(e for plans in (*self.src_plans, *self.old_plans) for plan in plans.values()
                       for e in self._plan_events(plan))
        folded = {plan.via for plans in self.src_plans for plan in plans.values() if plan.via is not None}
        self.dropped = frozenset(c for e, (c, *_) in self._copies.items() if c in folded and not used[e])

    def _levels_of(self, table: dict, name: str) -> np.ndarray:
        arr = table.get(name)
        if arr is None:
            arr = table[name] = np.full(self.program.tensors[name].size, -1, dtype=np.int32)
        return arr

    def _init_event(self, name: str) -> int:
        e = self._init.get(name)
        if e is None:
            e = self._init[name] = len(self.events)
            self.events.append(Event(-1, "", -1, 0, 0, tensor=name))
        return e

    def _events_of(self, name: str) -> np.ndarray:
        """The event of every element of a renamed tensor (its recorded writes applied in order)."""
        arr = self._ev.get(name)
        if arr is None:
            arr = self._ev[name] = np.full(self.program.tensors[name].size, self._init_event(name), dtype=np.int32)
        writes = self._writes.get(name, ())
        for ap, e, _ in writes[self._applied.get(name, 0):]:
            _view(arr, ap)[...] = e
        self._applied[name] = len(writes)
        return arr

    @staticmethod
    def _box(ap: AccessPattern, width: int):
        """(first row, last row, first column, end column) bounding ``ap`` in the tensor's rows x columns;
        None when it is not row-shaped (then it may touch anything)."""
        return _box_at(ap.offset, ap.dims, width)

    def _write(self, i: int, role: str, level: int, ap: AccessPattern) -> int:
        ins = self.program.instructions[i]
        if not ap.dims or min(ap.dims)[0] < 0 or not _distinct(ap):
            raise NotBatchable(f"{ins.opcode} writes '{ap.tensor}' through overlapping or reversed strides")
        width = self._width[ap.tensor]
        row0, col0 = divmod(ap.offset, width)
        rows, rem = divmod(ap.dims[0][0], width)
        if ap.dims[0][1] > 1 and (rem or rows <= 0 or col0 + ap.free_span > width):
            raise NotBatchable(f"{ins.opcode} writes '{ap.tensor}' with a partition step that is not whole rows")
        span = storage_span(ap)
        e = len(self.events)
        self.events.append(Event(i, role, level, ap.shape[0], span, row0, max(rows, 1), col0))
        if ap.size:
            self._writes.setdefault(ap.tensor, []).append((ap, e, self._box(ap, width)))
        return e

    def _last_writer(self, ap: AccessPattern, width: int):
        """The event that wrote every element of ``ap`` when that is plain from the recent writes of its
        tensor (the latest write touching ap's bounding box has ap's access pattern), else None."""
        writes = self._writes.get(ap.tensor, ())
        box = self._box(ap, width)
        if box is None:
            return None
        if not writes:
            return self._init_event(ap.tensor)
        for w_ap, e, w_box in reversed(writes[-16:]):
            if w_box is None:
                return None
            if w_box[0] <= box[1] and box[0] <= w_box[1] and w_box[2] < box[3] and box[2] < w_box[3]:
                return e if w_ap == ap or _contains(w_ap, ap, width) else None
        return None

    def _covering(self, ap: AccessPattern, width: int):
        """``[(first column, end column, event), ...]`` (by column) when recent writes of ``ap``'s tensor
        plainly wrote every element of ``ap``: the read is row-shaped with a column range, and each of
        the ``COVER_WRITES`` latest writes meeting it, newest first, wrote all of its rows and a column
        range, which is either hidden by newer ones or meets none of them; else None. Reading the write
        records costs a few tuple tests where the event-per-element map costs numpy calls per axis."""
        writes = self._writes.get(ap.tensor)
        rows, cols, box = _rows(ap, width), _column_range(ap, width), self._box(ap, width)
        if not writes or rows is None or cols is None or box is None:
            return None
        r0, rstep, rn = rows
        c0, c1 = cols
        need, got = c1 - c0, []
        for w_ap, e, w_box in reversed(writes[-COVER_WRITES:]):
            if w_box is None:
                return None
            if not (w_box[0] <= box[1] and box[0] <= w_box[1] and w_box[2] < c1 and c0 < w_box[3]):
                continue
            w_rows, w_cols = _rows(w_ap, width), _column_range(w_ap, width)
            if w_rows is None or w_cols is None:
                return None
            w0, wstep, wn = w_rows
            last = r0 + rstep * (rn - 1)
            if wn == 1:
                if rn != 1 or r0 != w0:
                    return None
            elif r0 < w0 or last > w0 + wstep * (wn - 1) or (r0 - w0) % wstep or (rn > 1 and rstep % wstep):
                return None
            lo, hi = max(c0, w_cols[0]), min(c1, w_cols[1])
            inside = sum(max(0, min(hi, b) - max(lo, a)) for a, b, _ in got)
            if inside == hi - lo:
                continue        # hidden by newer writes
            if inside:
                return None     # partly hidden: left to the map
            got.append((lo, hi, e))
            need -= hi - lo
            if not need:
                return sorted(got)
        return None

    def _plan_from_writes(self, ap: AccessPattern, width: int):
        """The read plan ``_plan`` makes from the event-per-element map, made from ``_covering``'s write
        records when they cover ``ap`` (several events: the first axis along which each index reads one
        event, cut where the event changes, as the map's test finds it); None when they do not, or when
        the map's answer is not a plan of boxes."""
        cover = self._covering(ap, width)
        if cover is None:
            return None
        if len(cover) == 1:
            place = _place(ap, self.events[cover[0][2]], width)
            return None if place is None else ReadPlan(boxes=(Box(None, 0, 0, cover[0][2], *place),))
        base = ap.offset % width
        hi_all = sum(st * (n - 1) for st, n in ap.dims[1:])     # free strides are positive (a column range)
        for axis in range(1, len(ap.dims)):     # axis 0 reads every column: several events per index
            st, n = ap.dims[axis]
            if n <= 1:
                continue
            hi_o, runs = hi_all - st * (n - 1), []
            for c0, c1, e in cover:     # the indices whose columns all lie in this write's range
                first, last = max(0, -(-(c0 - base) // st)), min(n - 1, (c1 - 1 - base - hi_o) // st)
                if first > last:
                    continue
                if first != (runs[-1][1] if runs else 0):
                    break               # an index reads two writes
                runs.append((first, last + 1, e))
            else:
                if not runs or runs[-1][1] != n:
                    continue
                boxes = []
                for a, b, e in runs:
                    place = _place(_sub(ap, axis, a, b), self.events[e], width)
                    if place is None:
                        break
                    boxes.append(Box(axis, a, b, e, *place))
                else:
                    return ReadPlan(boxes=tuple(boxes))
        return None

    def _plan(self, ap: AccessPattern) -> ReadPlan:
        if not ap.size:
            return ReadPlan(boxes=())
        width = self._width[ap.tensor]
        e = self._last_writer(ap, width)
        if e is not None:
            place = _place(ap, self.events[e], width)
            if place is not None:
                return ReadPlan(boxes=(Box(None, 0, 0, e, *place),))
        plan = self._plan_from_writes(ap, width) if COVER_WRITES else None
        if plan is not None:
            return plan
        evs = _view(self._events_of(ap.tensor), ap)
        lo, hi = int(evs.min()), int(evs.max())
        if lo == hi:
            place = _place(ap, self.events[lo], width)
            if place is not None:
                return ReadPlan(boxes=(Box(None, 0, 0, lo, *place),))
        else:
            for axis, n in enumerate(evs.shape):
                if n <= 1:
                    continue
                others = tuple(d for d in range(evs.ndim) if d != axis)
                e_min, e_max = (evs.min(axis=others), evs.max(axis=others)) if others else (evs, evs)
                if not np.array_equal(e_min, e_max):
                    continue
                cuts = [0] + [int(c) + 1 for c in np.flatnonzero(e_min[1:] != e_min[:-1])] + [n]
                boxes = []
                for a, b in zip(cuts[:-1], cuts[1:]):
                    place = _place(_sub(ap, axis, a, b), self.events[int(e_min[a])], width)
                    if place is None:
                        break
                    boxes.append(Box(axis, a, b, int(e_min[a]), *place))
                else:
                    return ReadPlan(boxes=tuple(boxes))
        return ReadPlan(gather=(evs.copy(), self._positions(evs, _flat_index(ap), width)))

    def _positions(self, evs: np.ndarray, flat: np.ndarray, width: int) -> np.ndarray:
        """Storage offset of each element (original flat index ``flat``) in the event that wrote it."""
        pos = np.empty(evs.shape, dtype=np.int64)
        for e in np.unique(evs):
            ev, m = self.events[int(e)], evs == e
            if ev.tensor is not None:
                pos[m] = flat[m]
            else:
                row, col = np.divmod(flat[m], width)
                pos[m] = (row - ev.row0) // ev.row_step * ev.span + col - ev.col0
        return pos

    @staticmethod
    def _plan_events(plan: ReadPlan):
        if plan.gather is not None:
            return [int(e) for e in np.unique(plan.gather[0])]
        return [b.event for b in plan.boxes]
