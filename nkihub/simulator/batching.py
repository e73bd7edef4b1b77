"""Batching for the fast engine: independent instructions of one shape run as one stacked operation.

``Batches`` groups the instructions of a Program by level (``simulator.dataflow``: instructions of one
level are independent once SBUF/PSUM writes are renamed) and by signature (opcode, engine, attributes,
operand shapes, dtypes and free strides), and lays out the storage of every renamed write: a group's
``k`` writes through one role share one array of ``k`` members, and arrays whose values are dead are
reused by later levels. ``bind_batches`` turns that into steps for one workspace: each group's operands
become ``[k, ...]`` arrays (strided views when the members sit at regular offsets, else gathered into a
work array first, and for destinations in HBM scattered after), and its row's ``bind`` compiles one step
for all of them. Rows without a bind are never grouped.

Each operand a bind sees has the shape, dtype and free-axis strides the reference executor gives it (only
its partition stride and address differ), so the step computes what the reference computes, bit for bit;
an operand folded onto a copy's source (``simulator.dataflow``) may instead be the fp32 values a bf16
operand widens to exactly, laid out as the widening would lay them out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from nkihub.simulator.dataflow import SLICE, Dataflow, NotBatchable, ReadPlan, new_storage_bytes, storage_span
from nkihub.simulator.isa import opdef
from nkihub.simulator.isa.base import dst_reads
from nkihub.simulator.isa.fast import Scratch
from nkihub.simulator.memory import pack
from nkihub.simulator.schedule import Schedule


@dataclass
class Group:
    """Instructions run as one step: ``members`` (instruction indices, program order) of one level."""

    level: int
    members: list


@dataclass
class Batches:
    """The batched schedule of a Program: groups in run order and the storage of renamed writes."""

    program: object
    dataflow: Dataflow
    groups: list = field(default_factory=list)
    # (group index, role) -> (unit, dtype, parts, span); a unit's bytes start at unit_offsets[unit] of
    # storage_bytes laid out by liveness (``memory.pack``): units dead by then share them
    storage: dict = field(default_factory=dict)
    unit_offsets: list = field(default_factory=list)
    storage_bytes: int = 0
    where: dict = field(default_factory=dict)     # event id -> (group index, role, member)
    inplace: set = field(default_factory=set)     # (group, role) updating its source's storage in place
    init_read: set = field(default_factory=set)   # on-chip tensors whose initial contents are read


def _signature(ins, program, level: int, renamed: set):
    """What members of one group share: level, opcode, engine, attributes, and per operand its shape,
    dtype, kind (renamed or in HBM), free strides and storage span (so the group's writes share one
    storage layout)."""
    def ops(aps):
        return tuple((r, ap.shape, program.tensors[ap.tensor].dtype, ap.tensor in renamed,
                      tuple(s for s, _ in ap.dims[1:]), storage_span(ap)) for r, ap in sorted(aps.items()))
    return (level, ins.opcode, ins.engine, json.dumps(ins.attrs, sort_keys=True, default=str),
            ops(ins.src), ops(ins.dst))


def renamed_write_bytes(program) -> int:
    """Bytes the renamed writes of ``program`` would take with no storage reused (an accumulation onto
    its destination updates it in place): what a plan in one window may need at most."""
    total = 0
    for ins in program.instructions:
        back = dst_reads(opdef(ins.opcode), ins)
        total += sum(new_storage_bytes(program, ap) for role, ap in ins.dst.items() if role not in back)
    return total


# A whole plan is tried when the renamed writes are at most this many times the budget: storage reused by
# liveness measured 0.25-0.62 of them (vit-block 64 images 1364 -> 342 MiB, matmul tutorial 4096^3 640 ->
# 320, flash-attn S 4096 995 -> 616), so beyond it the whole plan, which costs as much as the windowed
# one, would be made only to be thrown away.
WHOLE_WRITES = 6


def plan_batches(program, budget: int | None = None) -> Batches:
    """Group ``program``'s instructions and lay out their storage (raises ``NotBatchable``).

    ``budget``: bytes the renamed storage may take. A program is planned whole when its storage is at
    most twice the budget (tried when its renamed writes are at most ``WHOLE_WRITES`` times it), else in
    windows of a quarter of the budget of writes (``dataflow.Dataflow``); one whose storage still passes
    twice the budget (what it holds on chip across the cuts) is not batched. A whole plan runs faster than
    windows (each window is levelled on its own, so a program of many independent parts, cut into windows,
    has many more levels of fewer instructions: vit-block at 64 images 1.62-1.73 s a run whole against
    1.77-2.15 in 22 windows)."""
    return finish(planning(program, budget))


def planning(program, budget: int | None = None):
    """``plan_batches`` made a slice at a time: a generator yielding between slices of the work (every
    ``dataflow.SLICE`` instructions or groups), returning the ``Batches`` (raises ``NotBatchable``)."""
    if budget is None or renamed_write_bytes(program) <= WHOLE_WRITES * budget:
        b = yield from _plan(program, (yield from Dataflow.planning(program)))
        if budget is None or b.storage_bytes <= 2 * budget:
            return b
    b = yield from _plan(program, (yield from Dataflow.planning(program, max(1, budget // 4))))
    if b.storage_bytes > 2 * budget:
        raise NotBatchable(f"renamed storage of {b.storage_bytes >> 20} MiB passes twice the budget of "
                           f"{budget >> 20} MiB (NKIHUB_SIM_BATCH_MEMORY)")
    return b


def finish(gen):
    """Run a generator made by ``planning`` or ``binding`` to its end; return its value."""
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def _plan(program, df: Dataflow):
    by_sig: dict = {}
    for i, ins in enumerate(program.instructions):
        if i % SLICE == SLICE - 1:
            yield
        if i in df.dropped:     # a folded copy: its readers read its source
            continue
        # operands folded onto HBM are read in place, the others from storage, and folded onto a wider
        # source they have its dtype: members differing in these do not stack together
        key = (_signature(ins, program, df.levels[i], df.renamed),
               tuple((r, p.memory is not None, p.dtype) for r, p in sorted(df.src_plans[i].items())
                     if p.memory is not None or p.dtype is not None)) \
            if opdef(ins.opcode).bind is not None or opdef(ins.opcode).rows else (i,)
        by_sig.setdefault(key, []).append(i)
    groups = sorted((Group(df.levels[m[0]], m) for m in by_sig.values()), key=lambda g: (g.level, g.members[0]))
    b = Batches(program, df, groups)
    for gi, g in enumerate(groups):
        for j, i in enumerate(g.members):
            for role, e in df.dst_events[i].items():
                b.where[e] = (gi, role, j)
    last_read: dict = {}    # (group, role) -> last level reading it
    readers: dict = {}      # event -> instructions reading it
    for g in groups:
        for i in g.members:
            for e in {e for plan in (*df.src_plans[i].values(), *df.old_plans[i].values()) for e in _events(plan)}:
                readers[e] = readers.get(e, 0) + 1
                if e in b.where:
                    gi, role, _ = b.where[e]
                    last_read[(gi, role)] = max(last_read.get((gi, role), -1), g.level)
                else:
                    b.init_read.add(df.events[e].tensor)
    units: list = []        # [first level, last level, bytes] of each unit of storage
    yield
    for gi, g in enumerate(groups):
        if gi % SLICE == SLICE - 1:
            yield
        ins = program.instructions[g.members[0]]
        for role, e0 in df.dst_events[g.members[0]].items():
            ev = df.events[e0]
            dtype = program.tensors[ins.dst[role].tensor].np_dtype
            alias = _inplace(b, g, role, readers)
            if alias is not None:     # read-modify-write of a value nothing else reads: update in place
                b.storage[(gi, role)] = b.storage[alias]
                b.inplace.add((gi, role))
                unit = units[b.storage[alias][0]]
                unit[1] = max(unit[1], last_read.get((gi, role), g.level))
                continue
            b.storage[(gi, role)] = (len(units), dtype, ev.parts, ev.span)
            units.append([g.level, last_read.get((gi, role), g.level),
                          len(g.members) * ev.parts * ev.span * dtype.itemsize])
    b.unit_offsets, b.storage_bytes = pack(units)
    return b


def _inplace(b: Batches, g: Group, role: str, readers: dict):
    """The (group, role) whose storage ``g`` may update in place through ``role``: member j reads back
    exactly what member j of that group wrote, and nothing else reads those values."""
    df, src = b.dataflow, None
    for j, i in enumerate(g.members):
        plan = df.old_plans[i].get(role)
        if plan is None or plan.gather is not None or len(plan.boxes) != 1:
            return None
        box = plan.boxes[0]
        where = b.where.get(box.event)
        ev, mine = df.events[box.event], df.events[df.dst_events[i][role]]
        if where is None or where[2] != j or readers.get(box.event) != 1 or box.base != 0 or \
                (ev.parts, ev.span) != (mine.parts, mine.span) or box.strides[1:] != \
                tuple(s for s, _ in b.program.instructions[i].dst[role].dims[1:]):
            return None
        if src is None:
            src = where[:2]
        elif where[:2] != src:
            return None
    if src is None or len(b.groups[src[0]].members) != len(g.members) or \
            b.storage[src][1] != b.program.tensors[b.program.instructions[g.members[0]].dst[role].tensor].np_dtype:
        return None
    return src


def _events(plan: ReadPlan):
    if plan.gather is not None:
        return [int(e) for e in np.unique(plan.gather[0])]
    return [box.event for box in plan.boxes]


# -- binding ----------------------------------------------------------------------------------------------
def _levels(offsets: np.ndarray):
    """``[(n, d), ...]`` (outermost first) with ``offsets[j] = offsets[0] + sum(i_l * d_l)`` for j's
    row-major digits ``i_l`` over the sizes ``n_l``, or None."""
    k = len(offsets)
    if k == 1:
        return [(1, 0)]
    d = int(offsets[1] - offsets[0])
    breaks = np.flatnonzero(np.diff(offsets) != d)
    if breaks.size == 0:
        return [(k, d)]
    n = int(breaks[0]) + 1
    if k % n:
        return None
    rows = offsets.reshape(k // n, n)
    if not np.array_equal(rows - rows[:, :1], np.broadcast_to(np.arange(n, dtype=np.int64) * d, rows.shape)):
        return None
    outer = _levels(rows[:, 0])
    return None if outer is None else outer + [(n, d)]


class _Stack:
    """Member views ``(buffer, element offset, element strides)`` of one operand, stacked when regular."""

    @staticmethod
    def view(buf: np.ndarray, offset: int, shape, strides) -> np.ndarray:
        item = buf.itemsize
        return np.ndarray(tuple(shape), buf.dtype, buf, offset * item, tuple(s * item for s in strides))

    @classmethod
    def nested(cls, members: list, shape):
        """A [n1, n2, ..., *shape] view of all members (one buffer, same strides, offsets a nest of
        arithmetic progressions), else None."""
        buf0, o0, st0 = members[0]
        if any(buf is not buf0 or st != st0 for buf, _, st in members):
            return None
        offsets = np.array([o for _, o, _ in members], dtype=np.int64)
        levels = _levels(offsets)
        if levels is None:
            return None
        lead = tuple(n for n, _ in levels)
        strides = tuple(d for _, d in levels) + tuple(st0)
        extent = [sum(min(0, s * (n - 1)) for s, n in zip(strides, (*lead, *shape))),
                  sum(max(0, s * (n - 1)) for s, n in zip(strides, (*lead, *shape)))]
        if o0 + extent[0] < 0 or o0 + extent[1] >= buf0.size:
            return None
        return cls.view(buf0, o0, (*lead, *shape), strides)

    @classmethod
    def stacked(cls, members: list, shape) -> np.ndarray | None:
        """One [k, *shape] view when every member views one buffer with the same strides at offsets
        ``o0 + j * d`` (d >= 0), else None."""
        v = cls.nested(members, shape)
        if v is None or v.ndim != len(shape) + 1 or v.strides[0] < 0:
            return None
        return v

    @classmethod
    def copier(cls, members: list, shape, target: np.ndarray, into_target: bool = True):
        """A callable copying every member view into ``target[j]`` (or back, ``into_target=False``) in as
        few numpy calls as the offsets allow."""
        v = cls.nested(members, shape)
        if v is not None:
            t = target.reshape(v.shape)
            if np.shares_memory(t, target):
                src, dst = (v, t) if into_target else (t, v)
                return lambda: np.copyto(dst, src)
        views = [cls.view(*m[:2], shape, m[2]) for m in members]
        if into_target:
            return lambda: [np.copyto(target[j], x) for j, x in enumerate(views)]
        return lambda: [np.copyto(x, target[j]) for j, x in enumerate(views)]


def _mirror(k: int, ap, dtype, scratch: Scratch, key) -> np.ndarray:
    """A [k, *ap.shape] work array with ap's free strides and packed partitions."""
    span = storage_span(ap)
    parts = ap.dims[0][1] if ap.dims else 1
    buf = scratch.new((max(1, k * parts * span),), dtype, key)
    return _Stack.view(buf, 0, (k, *ap.shape), (parts * span, span, *(s for s, _ in ap.dims[1:])))


class _Binder:
    """Binds the groups of a ``Batches`` to one workspace's buffers."""

    def __init__(self, b: Batches, bufs: list, index: dict, storage):
        self.b, self.bufs, self.index = b, bufs, index
        self._storage = storage     # dtype -> the storage bytes as one flat array of that dtype
        self._typed: dict = {}

    def storage(self, gi: int, role: str):
        """(flat typed array, element offset) of a group's storage: one array object per dtype, so views
        of it are recognised as views of one buffer when stacking."""
        unit, dtype, _, _ = self.b.storage[(gi, role)]
        arr = self._typed.get(dtype)
        if arr is None:
            arr = self._typed[dtype] = self._storage(dtype)
        return arr, self.b.unit_offsets[unit] // dtype.itemsize

    def event_buffer(self, e: int):
        """(flat buffer, element offset of the event's storage) of event ``e``."""
        ev = self.b.dataflow.events[e]
        if ev.tensor is not None:
            return self.bufs[self.index[ev.tensor]], 0
        gi, role, j = self.b.where[e]
        _, _, parts, span = self.b.storage[(gi, role)]
        arr, off = self.storage(gi, role)
        return arr, off + j * parts * span

    def read(self, plans: list, aps: list, dtype, scratch: Scratch, key):
        """``(array, copies)``: the stacked operand and the copies that fill it before the step (into a
        work array of ``scratch``, under ``key``)."""
        k = len(plans)
        if plans[0].dtype is not None:      # folded onto a wider source
            dtype = plans[0].dtype
        if plans[0].memory is not None:
            members = [(self.bufs[self.index[p.memory.tensor]], p.memory.offset, tuple(s for s, _ in p.memory.dims))
                       for p in plans]
        elif all(p.gather is None and len(p.boxes) == 1 and p.boxes[0].axis is None for p in plans):
            members = []
            for p in plans:
                box = p.boxes[0]
                buf, off = self.event_buffer(box.event)
                members.append((buf, off + box.base, box.strides))
        else:
            target = _mirror(k, aps[0], dtype, scratch, key)
            return target, self.fill(target, plans)
        st = _Stack.stacked(members, aps[0].shape)
        if st is not None:
            return st, []
        # HBM operands only meet DMA-like rows (copies), where their layout does not matter, unless folded
        target = _mirror(k, aps[0], dtype, scratch, key) if plans[0].memory is None or plans[0].via is not None \
            else scratch.new((k, *aps[0].shape), dtype, key)
        return target, [_Stack.copier(members, aps[0].shape, target)]

    def fill(self, target: np.ndarray, plans: list) -> list:
        """Copies writing each member's values (boxes or gathers of events' storage) into ``target``."""
        copies = []
        boxes0 = plans[0].boxes
        uniform = all(p.gather is None and len(p.boxes) == len(boxes0) and
                      all((a.axis, a.start, a.stop) == (c.axis, c.start, c.stop) for a, c in zip(p.boxes, boxes0))
                      for p in plans)
        if uniform:
            for bi, box in enumerate(boxes0):
                sub = target if box.axis is None else \
                    target[(slice(None),) * (box.axis + 1) + (slice(box.start, box.stop),)]
                members = []
                for p in plans:
                    pb = p.boxes[bi]
                    buf, off = self.event_buffer(pb.event)
                    members.append((buf, off + pb.base, pb.strides))
                copies.append(_Stack.copier(members, sub.shape[1:], sub))
            return copies
        for j, p in enumerate(plans):
            if p.gather is None:
                for box in p.boxes:
                    sub = target[j] if box.axis is None else \
                        target[j][(slice(None),) * box.axis + (slice(box.start, box.stop),)]
                    buf, off = self.event_buffer(box.event)
                    copies.append(lambda d=sub, s=_Stack.view(buf, off + box.base, sub.shape, box.strides):
                                  np.copyto(d, s))
            else:
                evs, pos = p.gather
                parts = []
                for e in np.unique(evs):
                    buf, off = self.event_buffer(int(e))
                    mask = evs == e
                    parts.append((mask, buf, off + pos[mask]))
                copies.append(lambda d=target[j], parts=parts: [d.__setitem__(m, buf[idx]) for m, buf, idx in parts])
        return copies


# A step works on at most about this many elements, so its operands stay in the core's cache (stacking
# more only streams them through memory); members bigger than that run one per step.
CHUNK_ELEMENTS = 1 << 18
STEP_OVERHEAD_ELEMENTS = 4096   # the fixed cost of a step, in elements touched, for balancing lanes


def _member_elements(ins) -> int:
    return sum(ap.size for ap in (*ins.src.values(), *ins.dst.values()))


def _regular(aps: list) -> bool:
    """Whether HBM access patterns of a group's members stack into one view (same tensor and strides,
    offsets in arithmetic progression)."""
    d = aps[1].offset - aps[0].offset if len(aps) > 1 else 0
    return d >= 0 and all(ap.tensor == aps[0].tensor and ap.dims == aps[0].dims and ap.offset == aps[0].offset + j * d
                          for j, ap in enumerate(aps))


def _chunk(b: Batches, g: Group) -> int:
    """Members per step of group ``g``: one when an HBM operand does not stack (each member then copies
    straight between its own views), else as many as fit ``CHUNK_ELEMENTS``."""
    inss = [b.program.instructions[i] for i in g.members]
    for role, ap in (*inss[0].src.items(), *inss[0].dst.items()):
        if ap.tensor not in b.dataflow.renamed:
            side = "src" if role in inss[0].src and inss[0].src[role] is ap else "dst"
            if not _regular([getattr(x, side)[role] for x in inss]):
                return 1
    return max(1, min(len(inss), CHUNK_ELEMENTS // max(1, _member_elements(inss[0]))))


def bind_batches(b: Batches, bufs: list, index: dict, storage, scratches: list, bind_step) -> Schedule:
    """``binding`` run to its end: the ``Schedule``."""
    return finish(binding(b, bufs, index, storage, scratches, bind_step))


def binding(b: Batches, bufs: list, index: dict, storage, scratches: list, bind_step):
    """The ``Schedule`` of the groups of ``b`` on the workspace buffers ``bufs`` (``index``: tensor name
    -> buffer index) and ``storage`` (dtype -> the renamed storage's ``b.storage_bytes`` bytes as a flat
    array of that dtype), for one lane per scratch in ``scratches``: steps compiled with
    ``bind_step(ins, src, dst, scratch)``, level by level. Groups are cut into chunks (``_chunk``); a
    level's chunks go to the schedule biggest first by an estimate of their cost (elements touched plus
    a fixed cost per step), which binds each for the lanes that may run it. A generator yielding after
    each level, returning the Schedule."""
    binder = _Binder(b, bufs, index, storage)
    lanes = len(scratches)
    schedule = Schedule(lanes)
    by_level: dict = {}
    for gi, g in enumerate(b.groups):
        by_level.setdefault(g.level, []).append(gi)
    for level in sorted(by_level):
        items = []
        for gi in by_level[level]:
            g = b.groups[gi]
            k, c = len(g.members), _chunk(b, g)
            per = _member_elements(b.program.instructions[g.members[0]])
            n = -(-k // c)
            if lanes > 1 and n < lanes and k >= lanes and k * per >= lanes * STEP_OVERHEAD_ELEMENTS:
                n = lanes       # cut a group that is one chunk, so every lane gets a share
            cuts = [k * x // n for x in range(n + 1)]
            items += [((z - a) * per + STEP_OVERHEAD_ELEMENTS, gi, a, z) for a, z in zip(cuts[:-1], cuts[1:])]
        items.sort(key=lambda x: (-x[0], x[1:]))
        schedule.add_level([cost for cost, *_ in items], _lane_binder(b, binder, items, scratches, bind_step))
        yield
    return schedule


class _Counted:
    """A ``Scratch`` that counts the work arrays handed out (a bind that takes none is lane-free)."""

    def __init__(self, scratch: Scratch):
        self.scratch, self.uses = scratch, 0

    def like(self, *args, **kwargs) -> np.ndarray:
        self.uses += 1
        return self.scratch.like(*args, **kwargs)

    def new(self, *args, **kwargs) -> np.ndarray:
        self.uses += 1
        return self.scratch.new(*args, **kwargs)

    def widened(self, *args):
        self.uses += 1
        return self.scratch.widened(*args)

    def caster(self, *args):
        return self.scratch.caster(*args)


def _lane_binder(b: Batches, binder: "_Binder", items: list, scratches: list, bind_step):
    """``bind(i, lane)``: the step of chunk ``items[i]`` for ``lane``'s scratch; a step that took no
    work array from its scratch runs on any lane as it is, so it is bound once."""
    free: dict = {}

    def bind(i: int, lane: int):
        if i in free:
            return free[i]
        _, gi, a, z = items[i]
        counted = _Counted(scratches[lane])
        step = _bind_group(b, binder, gi, a, z, counted, bind_step)
        if not counted.uses:
            free[i] = step
        return step
    return bind


def _bind_group(b: Batches, binder: "_Binder", gi: int, a: int, z: int, scratch: Scratch, bind_step):
    """The step of members ``a:z`` of group ``gi``."""
    program, df, g = b.program, b.dataflow, b.groups[gi]
    members = g.members[a:z]
    inss = [program.instructions[i] for i in members]
    ins0, k = inss[0], len(inss)
    pre, post, src, dst = [], [], {}, {}
    for role, ap in ins0.src.items():
        dtype = program.tensors[ap.tensor].np_dtype
        src[role], copies = binder.read([df.src_plans[i][role] for i in members], [x.src[role] for x in inss],
                                        dtype, scratch, ("src", role))
        pre += copies
    for role, ap in ins0.dst.items():
        dtype = program.tensors[ap.tensor].np_dtype
        back = role in df.old_plans[members[0]]
        if role in df.dst_events[members[0]]:
            _, _, parts, span = b.storage[(gi, role)]
            flat, base = binder.storage(gi, role)
            arr = _Stack.view(flat, base + a * parts * span, (k, *ap.shape),
                              (parts * span, span, *(s for s, _ in ap.dims[1:])))
            if back and (gi, role) not in b.inplace:
                pre += binder.fill(arr, [df.old_plans[i][role] for i in members])
            dst[role] = arr
            continue
        views = [(binder.bufs[binder.index[x.dst[role].tensor]], x.dst[role].offset,
                  tuple(s for s, _ in x.dst[role].dims)) for x in inss]
        arr = _Stack.stacked(views, ap.shape)
        if arr is None:     # HBM destinations at irregular offsets: write a work array, then scatter it
            arr = scratch.new((k, *ap.shape), dtype, ("dst", role))
            if back:
                pre.append(_Stack.copier(views, ap.shape, arr))
            post.append(_Stack.copier(views, ap.shape, arr, into_target=False))
        dst[role] = arr
    return _compose(pre, bind_step(ins0, src, dst, scratch), post)


def _compose(pre: list, core, post: list):
    if not pre and not post:
        return core

    def step(ctx):
        for f in pre:
            f()
        core(ctx)
        for f in post:
            f()
    return step
