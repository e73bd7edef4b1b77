"""The cost model's scheduler: runs a Program on per-engine in-order queues and returns its timeline.

Queues: Tensor, Vector, Scalar and GpSimd each run one instruction stream, in the order ``issue`` gives
(program order for ``nki`` kernels, list-scheduled for ``neuronxcc.nki`` kernels); 16 DMA queues each hold
one transfer in flight (descriptor generation, fixed trigger-to-start latency, data movement), and for
``nki`` kernels DMAs are triggered in program order (``issue``: one sequencer issues them). An
instruction starts when its queue is free and every instruction it depends on has finished; the scheduler
places instructions in time order (an event simulation), so a ready instruction never waits for one that
is not.
Dependencies come from the bytes each instruction reads and writes: read-after-write, write-after-read and
write-after-write, on physical SBUF/PSUM addresses after allocation (so address reuse creates the false
dependencies the hardware has) and on HBM element ranges. Cross-queue dependencies are semaphore waits.
On v2 (trn1) Vector/GpSimd share the SBUF port and Vector/Scalar the PSUM port: an instruction using a
shared port starts only where it overlaps no other engine's use of it (``_Ports``; not a semaphore).

DMA data movement shares the core's DMA engines and its share of HBM bandwidth as a fluid: time is cut
into bins (``cost_rules.BANDWIDTH_BIN_S``) of limited engine-seconds and HBM bytes, and each transfer takes
what is left, so independent DMAs pipeline and the estimate never beats the bandwidth roofline.
Per-instruction engine times come from the ``cost`` column of the instruction table.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from nkihub.simulator import cost_rules as cr
from nkihub.simulator.isa import DMA, opdef
from nkihub.simulator.isa.base import dst_reads
from nkihub.simulator import issue
from nkihub.simulator.program import AccessPattern, Program
from nkihub.simulator.rules import partitions
from nkihub.simulator.targets import get_target

COMPUTE_QUEUES = ("tensor", "vector", "scalar", "gpsimd")
# Index granularity of the dependency tracker (rows = partitions on chip); not hardware figures.
COL_BUCKET_BYTES = 2048
_EPS = 1e-6    # fraction of a transfer or of a bin below which the fluid bandwidth model rounds off
ROW_BUCKET = 128


def dma_queue_names(target) -> tuple[str, ...]:
    return tuple(f"dma{q}" for q in range(target.dma_engines))


@dataclass
class Schedule:
    """When each instruction of a Program runs (seconds from kernel start, all estimates).

    Per instruction ``i``: ``queue[i]`` (tensor, vector, scalar, gpsimd, dma0..dma15), ``start[i]`` and
    ``end[i]``; for DMAs ``xfer_start[i]`` is when data starts to move (else equal to ``start``).
    ``waits[i]`` are the semaphore edges into ``i``: for each other queue, the latest instruction on it that
    ``i`` must wait for. ``pred[i]`` is what decided ``i``'s start (a dependency or the previous instruction
    on its queue, or on v2 the other engine's instruction holding a shared SBUF/PSUM port; -1 for none) and
    ``reason[i]`` says which ("dep", "queue", "port", "bandwidth" or "").

    What each instruction waited for (recorded only; it changes no time): ``dep_wait_s[i]`` is how long
    ``i``'s compute engine stood free before ``i`` could start, held by ``pred[i]`` (a dependency or a
    shared port; 0 for DMAs, whose 16 queues idle by design);
    for DMAs ``bandwidth_wait_s[i]`` is how much longer its data took to move than its own engine time
    (after the fixed latency), because transfers placed before it held the DMA engines' or HBM's
    bandwidth, and ``bandwidth_holders[i]`` are those transfers, (index, seconds of overlap), most first.
    """

    program: Program
    target: object
    queue: list = field(default_factory=list)
    start: list = field(default_factory=list)
    end: list = field(default_factory=list)
    xfer_start: list = field(default_factory=list)
    cost: list = field(default_factory=list)
    waits: list = field(default_factory=list)
    pred: list = field(default_factory=list)
    reason: list = field(default_factory=list)
    dep_wait_s: list = field(default_factory=list)
    bandwidth_wait_s: list = field(default_factory=list)
    bandwidth_holders: list = field(default_factory=list)
    dma_engine_s: float = 0.0        # engine-seconds of DMA data movement
    hbm_bytes: int = 0
    dma_bytes: int = 0
    dma_count: int = 0

    @property
    def latency_s(self) -> float:
        return max(self.end, default=0.0)

    def critical_path(self) -> list[int]:
        """Instruction indices from the first to the last-finishing instruction along deciding edges."""
        if not self.end:
            return []
        i = max(range(len(self.end)), key=self.end.__getitem__)
        path = []
        while i >= 0:
            path.append(i)
            i = self.pred[i]
        return path[::-1]

    def queue_order(self) -> dict[str, list[int]]:
        """Instruction indices per queue, in issue order."""
        order: dict[str, list[int]] = {}
        for i, q in enumerate(self.queue):
            order.setdefault(q, []).append(i)
        return order


# -- dependency tracking ----------------------------------------------------------------------------------

class _Tracker:
    """Last writers and readers per memory region, indexed by (space, column bucket)."""

    def __init__(self, program: Program, logical_psum: bool = False):
        self.program = program
        self.buckets: dict = {}
        self.regions: dict = {}   # cache: tensor -> (space, row_len, item, base) or None (read-only)
        self.blocks: dict = {}    # tensor -> (block bytes, block addresses) for tensors allocated by block
        aliased = {s.alias_of and program.root(s.name).name for s in program.tensors.values()} - {None}
        written = {program.root(ap.tensor).name for ins in program.instructions for ap in ins.dst.values()}
        for name, spec in program.tensors.items():
            root = program.root(name)
            if root.kind in ("input", "constant") and root.name not in written:
                self.regions[name] = None  # never written: reads need no tracking
            elif spec.on_chip and logical_psum and spec.buffer == "psum" and not root.pinned:
                # PSUM banks are assigned while scheduling (issue.PsumBanks): only true data dependencies.
                self.regions[name] = (root.name, max(1, spec.free_size), spec.np_dtype.itemsize, 0)
            elif spec.on_chip:
                space = (spec.buffer, spec.core) if spec.address is not None else root.name
                self.regions[name] = (space, max(1, spec.free_size), spec.np_dtype.itemsize, spec.address or 0)
                if root.block_addresses is not None and len(root.block_addresses) > 1:
                    self.blocks[name] = (root.block_bytes, root.block_addresses)
            else:
                # HBM storage seen through aliases of other dtypes is one row of bytes for all of them.
                row = spec.size if root.name in aliased else spec.shape[-1] if spec.shape else 1
                self.regions[name] = (root.name, max(1, row), spec.np_dtype.itemsize, 0)

    def region(self, ap: AccessPattern) -> list:
        """The (space, row_lo, row_hi, byte_lo, byte_hi) boxes ``ap`` touches: bytes are physical addresses
        on chip (one box per block of a tensor allocated by block), offsets in the tensor in HBM."""
        reg = self.regions[ap.tensor]
        if reg is None:
            return []
        space, row_len, item, base = reg
        r0, r1, c0, c1 = ap.box(row_len)
        c0, c1 = c0 * item, c1 * item
        if ap.tensor not in self.blocks:
            return [(space, r0, r1, base + c0, base + c1)]
        size, addrs = self.blocks[ap.tensor]
        return [(space, r0, r1, addrs[b] + max(c0 - b * size, 0), addrs[b] + min(c1 - b * size, size))
                for b in range(c0 // size, (c1 - 1) // size + 1)]

    @staticmethod
    def _keys(reg):
        space, r0, r1, c0, c1 = reg
        if c1 <= c0 or r1 <= r0:
            return []
        return [(space, rb, cb) for rb in range(r0 // ROW_BUCKET, (r1 - 1) // ROW_BUCKET + 1)
                for cb in range(c0 // COL_BUCKET_BYTES, (c1 - 1) // COL_BUCKET_BYTES + 1)]

    @staticmethod
    def _overlap(a, e) -> bool:
        return a[1] < e[2] and e[1] < a[2] and a[3] < e[4] and e[3] < a[4]

    def access(self, idx: int, reads: list, writes: list, deps: dict) -> None:
        """Record instruction ``idx``'s regions; add ``deps[j] = raw`` for every earlier ``j`` it must wait
        for (``raw`` is True for read-after-write)."""
        for reg in reads:
            for key in self._keys(reg):
                entry = self.buckets.get(key)
                if entry is None:
                    continue
                for w in entry[0]:
                    if self._overlap(reg, w):
                        deps[w[0]] = True
        for reg in writes:
            for key in self._keys(reg):
                entry = self.buckets.get(key)
                if entry is None:
                    continue
                for e in entry[0]:
                    if self._overlap(reg, e) and e[0] != idx:
                        deps.setdefault(e[0], False)
                for e in entry[1]:
                    if self._overlap(reg, e) and e[0] != idx:
                        deps.setdefault(e[0], False)
        for reg in reads:
            item = (idx,) + reg[1:]
            for key in self._keys(reg):
                self.buckets.setdefault(key, ([], []))[1].append(item)
        for reg in writes:
            item = (idx,) + reg[1:]
            for key in self._keys(reg):
                writers, readers = self.buckets.setdefault(key, ([], []))
                lo_r, hi_r = key[1] * ROW_BUCKET, (key[1] + 1) * ROW_BUCKET
                lo_b, hi_b = key[2] * COL_BUCKET_BYTES, (key[2] + 1) * COL_BUCKET_BYTES
                # Entries this write covers (within the bucket) are reached through it from now on.
                keep = lambda e: not (reg[1] <= max(e[1], lo_r) and min(e[2], hi_r) <= reg[2]
                                      and reg[3] <= max(e[3], lo_b) and min(e[4], hi_b) <= reg[4])
                writers[:] = [e for e in writers if keep(e)]
                readers[:] = [e for e in readers if keep(e)]
                writers.append(item)


# -- DMA bandwidth as a fluid --------------------------------------------------------------------------------

class _Bandwidth:
    """Engine-seconds and HBM bytes per time bin; a transfer takes what earlier ones left."""

    def __init__(self, target):
        self.bin = cr.BANDWIDTH_BIN_S
        self.pool_cap = target.dma_engines * self.bin
        self.hbm_cap = target.hbm_bytes_per_s * self.bin
        self.pool: list[float] = []
        self.hbm: list[float] = []
        self.skip: list[int] = []   # union-find: next bin whose engine time is not used up

    def _grow(self, b: int) -> None:
        n = len(self.pool)
        if b >= n:
            extra = max(b + 1 - n, 4096)
            self.skip.extend(range(n, n + extra + 1))
            self.pool.extend([0.0] * (extra + 1))
            self.hbm.extend([0.0] * (extra + 1))

    def transfer(self, t: float, engine_s: float, engines: int, hbm_bytes: float) -> tuple[float, float]:
        """Move data needing ``engine_s`` engine-seconds (at most ``engines`` in parallel) and ``hbm_bytes``
        through HBM, from time ``t`` on; returns (first, end) times of movement."""
        if engine_s <= 0 and hbm_bytes <= 0:
            return t, t
        remaining, first = 1.0, None
        size, pool_cap, hbm_cap = self.bin, self.pool_cap, self.hbm_cap
        pool, hbm, skip = self.pool, self.hbm, self.skip
        inv_e = 1.0 / engine_s if engine_s > 0 else 0.0
        inv_h = 1.0 / hbm_bytes if hbm_bytes > 0 else 0.0
        b = int(t / size)
        while True:
            self._grow(b + 1)
            root = b                       # next bin with engine time left (union-find, path halving)
            while skip[root] != root:
                skip[root] = skip[skip[root]]
                root = skip[root]
            b = root
            self._grow(b + 1)
            b0 = b * size
            seg = t if t > b0 else b0
            dt = b0 + size - seg
            fe = min(engines * dt, pool_cap - pool[b]) * inv_e if engine_s > 0 else math.inf
            fh = (hbm_cap - hbm[b]) * inv_h if hbm_bytes > 0 else math.inf
            rate = fe if fe < fh else fh
            f = remaining if remaining < rate else rate
            if f > _EPS:
                if first is None:
                    first = seg
                pool[b] += f * engine_s
                hbm[b] += f * hbm_bytes
                remaining -= f
            # Crumbs below _EPS of a bin count as used, so later transfers skip the bin at once.
            if pool_cap - pool[b] <= _EPS * pool_cap or (dt == size and f <= _EPS and remaining > _EPS):
                skip[b] = b + 1
            if remaining <= _EPS:
                end = seg + dt * (f / rate)
                # The bin's use counts as packed from its start, so the total never beats the bandwidth.
                packed = b0 + size * max(pool[b] / pool_cap, hbm[b] / hbm_cap)
                return first, max(end, min(packed, b0 + size))
            b += 1


# -- v2 shared SBUF/PSUM ports ---------------------------------------------------------------------------------

class _Ports:
    """Busy intervals per (buffer, engine) of the engines sharing a port (``cost_rules.SHARED_PORTS``, v2
    only): an instruction that touches a buffer may not overlap an instruction of another engine sharing
    that buffer's port. Each engine's intervals are disjoint, kept sorted, so starts and ends both grow."""

    def __init__(self, target):
        self.active = bool(target.shared_port_limits)
        self.starts: dict = {}
        self.ends: dict = {}
        self.owner: dict = {}

    def uses(self, ins, program, engine: str) -> tuple:
        """The shared ports (buffer names) this instruction occupies on its engine."""
        if not self.active:
            return ()
        bufs = {program.tensors[ap.tensor].buffer for ap in (*ins.src.values(), *ins.dst.values())}
        return tuple(b for b in sorted(bufs) if engine in cr.SHARED_PORTS.get(b, ()))

    def earliest(self, t: float, cost: float, engine: str, ports: tuple) -> tuple[float, int]:
        """First start >= ``t`` at which ``cost`` seconds overlap no other engine's use of ``ports``, and the
        instruction that pushed it there (-1 if none)."""
        others = [(b, e) for b in ports for e in cr.SHARED_PORTS[b] if e != engine and (b, e) in self.ends]
        blocker, moved = -1, True
        while moved:
            moved = False
            for key in others:
                ends = self.ends[key]
                k = bisect.bisect_right(ends, t)          # first interval ending after t
                if k < len(ends) and self.starts[key][k] < t + cost:
                    t, blocker, moved = ends[k], self.owner[key][k], True
        return t, blocker

    def occupy(self, idx: int, start: float, end: float, engine: str, ports: tuple) -> None:
        for b in ports:
            starts = self.starts.setdefault((b, engine), [])
            k = bisect.bisect_right(starts, start)   # list-scheduled engines may fill an earlier gap
            starts.insert(k, start)
            self.ends.setdefault((b, engine), []).insert(k, end)
            self.owner.setdefault((b, engine), []).insert(k, idx)


# -- the scheduler --------------------------------------------------------------------------------------------

def _hbm_bytes(ins, program) -> int:
    n = 0
    for ap in (*ins.src.values(), *ins.dst.values()):
        spec = program.tensors[ap.tensor]
        if not spec.on_chip:
            n += ap.size * spec.np_dtype.itemsize
    return n


def _dma_spread(ins, program, target) -> int:
    parts = [partitions(ap) for ap in (*ins.dst.values(), *ins.src.values()) if program.tensors[ap.tensor].on_chip]
    return cr.dma_engines(max(parts) if parts else target.partitions, target)


def schedule(program: Program, target=None) -> Schedule:
    """Schedule an (allocated) Program on ``target``'s queues; see the module docstring for the model."""
    target = get_target(target or program.meta.get("target"))
    sch = Schedule(program, target)
    policy = issue.policy(program)
    tracker = _Tracker(program, logical_psum=policy.psum_banks)
    plan = _Plan(program, target, tracker, issue.recomputed(program) if policy.computes_once else None)
    n = len(program.instructions)
    for name in ("queue", "start", "end", "xfer_start", "waits", "pred", "reason"):
        setattr(sch, name, [None] * n)
    sch.dep_wait_s, sch.bandwidth_wait_s, sch.bandwidth_holders = [0.0] * n, [0.0] * n, [()] * n
    moving: list = []   # (index, first, end) of DMA transfers that may still hold bandwidth
    sch.cost = plan.cost
    bw = _Bandwidth(target)
    ports = _Ports(target)
    banks = issue.PsumBanks(program, target) if policy.psum_banks else None
    dma_queues = dma_queue_names(target)
    free = {q: 0.0 for q in (*COMPUTE_QUEUES, *dma_queues)}
    last = {q: -1 for q in free}
    table_state: dict[str, object] = {}
    gap = {e: cr.ACCESS_START_CYCLES / target.clock_hz(e) for e in COMPUTE_QUEUES}
    issuer = issue.Issuer(plan.family, policy.window, policy.dma_in_order)
    last_dma = -1   # the DMA triggered last (program-order issue: the next one is not triggered earlier)
    # Hardware DGEs (v3+): each generates one dge_mode=hwdge DMA's descriptors at a time
    # (cost_rules.DMA_DESCRIPTOR_S). A program-order DMA stream (nki kernels: one trigger engine) uses one;
    # otherwise all the core has. Other DMAs' descriptors are made before the run (or by software DGE).
    dge_free = [0.0] * (min(1, target.dge_instances) if policy.dma_in_order else target.dge_instances)

    def ready(i: int) -> tuple[float, int]:
        t, binding = 0.0, -1
        engine = plan.family[i]
        for j, raw in plan.deps[i].items():
            tj = sch.end[j]
            # Accumulating into what the same queue just wrote is pipelined (PSUM accumulation groups).
            if raw and engine != "dma" and not (plan.read_back[i] and sch.queue[j] == engine):
                tj += gap[engine]
            if tj > t:
                t, binding = tj, j
        return t, binding

    bindings = [-1] * n
    for i in range(n):
        if not plan.waiting[i]:
            t, bindings[i] = ready(i)
            issuer.release(i, t)
    while True:
        nxt = issuer.next(free)
        if nxt is None:
            break
        idx, t_ready = nxt
        ins = program.instructions[idx]
        engine = plan.family[idx]
        binding, cost = bindings[idx], plan.cost[idx]
        if banks is not None:
            tb, holder = banks.ready(idx)
            if tb > t_ready:
                t_ready, binding = tb, holder
        if engine == "dma" and policy.dma_in_order and last_dma >= 0 and sch.start[last_dma] > t_ready:
            # Triggered when the previous DMA was: what decided that start decides this one.
            t_ready, binding = sch.start[last_dma], sch.pred[last_dma]
        q = min(dma_queues, key=lambda name: max(free[name], t_ready)) if engine == "dma" else engine
        attr = cr.TABLE_SWITCH_ATTRS.get(ins.opcode)
        if attr is not None:
            table = ins.attrs.get(attr)
            if table_state.get(q, table) != table:
                cost += cr.seconds(cr.ACT_TABLE_LOAD_CYCLES, target, q)
                sch.cost[idx] = cost
            table_state[q] = table
        start = max(free[q], t_ready)
        free_before = free[q]
        pred, why = (binding, "dep") if t_ready > free[q] else (last[q], "queue" if last[q] >= 0 else "")
        is_dma = idx in plan.spread
        port_use = () if is_dma else ports.uses(ins, program, q)
        if port_use:
            start, blocker = ports.earliest(start, cost, q, port_use)
            if blocker >= 0:
                pred, why = blocker, "port"
        if is_dma and dge_free and ins.attrs.get("dge_mode") == "hwdge":
            k = min(range(len(dge_free)), key=dge_free.__getitem__)
            if dge_free[k] > start:
                start, pred, why = dge_free[k], (last_dma if last_dma >= 0 else pred), "queue"
            dge_free[k] = start + cr.DMA_DESCRIPTOR_S
        if is_dma:
            last_dma = idx
            spread = plan.spread[idx]
            earliest = start + cr.DMA_DESCRIPTOR_S + cr.DMA_FIXED_LATENCY_S
            xfer, end = bw.transfer(earliest, cost * spread, spread, plan.hbm[idx])
            if end - earliest > cost * 1.001 + bw.bin:
                why = "bandwidth" if why != "dep" else why
            sch.bandwidth_wait_s[idx], sch.bandwidth_holders[idx], moving = _holders(idx, earliest, xfer, end, cost,
                                                                                     moving)
            sch.dma_engine_s += cost * spread
            sch.hbm_bytes += plan.hbm[idx]
            sch.dma_bytes += plan.nbytes[idx]
            sch.dma_count += 1
        else:
            end = start + cost
            xfer = start
        free[q], last[q] = end, idx
        if port_use:
            ports.occupy(idx, start, end, q, port_use)
        if banks is not None:
            banks.occupy(idx, ins, end)
        waits = {}
        for j in plan.deps[idx]:
            qj = sch.queue[j]
            if qj != q and j > waits.get(qj, -1):
                waits[qj] = j
        sch.queue[idx], sch.start[idx], sch.end[idx], sch.xfer_start[idx] = q, start, end, xfer
        sch.waits[idx], sch.pred[idx], sch.reason[idx] = tuple(sorted(waits.values())), pred, why
        if why in ("dep", "port") and pred >= 0 and not is_dma:
            sch.dep_wait_s[idx] = max(0.0, start - free_before)
        issuer.done(idx)
        for u in plan.users[idx]:
            plan.waiting[u] -= 1
            if not plan.waiting[u]:
                t, bindings[u] = ready(u)
                issuer.release(u, t)
    return sch


# How many of the DMAs placed last are looked at for what held a DMA's bandwidth (bounds the bookkeeping;
# DMAs are placed in time order, so the ones moving data beside a transfer are among the last placed).
HOLDER_LOOKBACK = 64


def _holders(idx: int, earliest: float, first: float, end: float, cost: float, moving: list) -> tuple:
    """(bandwidth wait, holders, transfers kept) of DMA ``idx``, which could move data from ``earliest`` and
    moved it from ``first`` to ``end`` for ``cost`` seconds of its own. The wait is the movement time beyond
    ``cost``; the holders are the transfers placed before it (of the last ``HOLDER_LOOKBACK``) that moved
    data in that window, as (index, seconds of overlap), most overlap first, at most 4."""
    wait = end - earliest - cost
    wait = wait if wait > 1e-12 else 0.0
    live = [m for m in moving[-HOLDER_LOOKBACK:] if m[2] > earliest]
    holders = ()
    if wait > 0:
        over = sorted(((min(e, end) - max(f, earliest), j) for j, f, e in live if min(e, end) > max(f, earliest)),
                      reverse=True)
        holders = tuple((j, o) for o, j in over[:4])
    live.append((idx, first, end))
    return wait, holders, live


class _Plan:
    """What the scheduler needs of each instruction before placing any: its queue family, engine time,
    dependencies (``deps[i]``: earlier instruction -> read-after-write) and the instructions waiting on it."""

    def __init__(self, program: Program, target, tracker: "_Tracker", same: dict | None = None):
        n = len(program.instructions)
        same = same or {}
        self.family, self.cost, self.deps, self.read_back = [], [], [], []
        self.users = [[] for _ in range(n)]
        self.waiting = [0] * n
        self.spread, self.hbm, self.nbytes = {}, {}, {}
        for idx, ins in enumerate(program.instructions):
            row = opdef(ins.opcode)
            read_back = dst_reads(row, ins)
            src_regs = [r for ap in ins.src.values() for r in tracker.region(ap)]
            dst_regs = [r for ap in ins.dst.values() for r in tracker.region(ap)]
            back_regs = [r for k in read_back for r in tracker.region(ins.dst[k])]
            deps: dict[int, bool] = {}
            tracker.access(idx, src_regs + back_regs, dst_regs, deps)
            family = ins.engine if ins.engine in COMPUTE_QUEUES else "dma"
            self.family.append(family)
            if idx in same:   # computed once already (issue.recomputed): ready when that one is
                deps[same[idx]] = True
                self.cost.append(0.0)
            else:
                self.cost.append(float(row.cost(ins, program, target)))
            self.deps.append(deps)
            self.read_back.append(bool(read_back))
            self.waiting[idx] = len(deps)
            for j in deps:
                self.users[j].append(idx)
            if DMA in row.categories:
                size = lambda aps: sum(ap.size * program.tensors[ap.tensor].np_dtype.itemsize for ap in aps)
                self.spread[idx] = _dma_spread(ins, program, target)
                self.hbm[idx] = _hbm_bytes(ins, program)
                self.nbytes[idx] = max(size(ins.dst.values()), size(ins.src.values()))
