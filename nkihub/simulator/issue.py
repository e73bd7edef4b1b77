"""Instruction issue: which instruction each engine queue runs next, in program order or list-scheduled.

Each engine runs one instruction stream in order; what that order is depends on the compiler. The NKI
compiler (``nki`` 0.3 and newer) keeps the order the kernel gives ("it keeps the execution order and memory
allocation that developers specify", NKI docs, About NKI): an engine runs its next instruction in program
order once its dependencies are done (window 1). The neuronxcc compiler that builds the older
``neuronxcc.nki`` dialect schedules instructions itself: the iterations of an ``affine_range`` are
independent, so it interleaves them, and an engine does not idle on one iteration's dependencies while
another iteration's work is ready (the ``affine_range`` reference; the tutorials write ``sequential_range``
where they "do not want the compiler to change this loop"). That is a list scheduler: of an engine's next
``LIST_WINDOW`` instructions, the first whose dependencies are done goes first. It also assigns PSUM banks
as it schedules, so PSUM tiles depend on each other only through their data, and at most ``psum_banks``
tiles are live at once (``PsumBanks``); SBUF keeps the program-order allocation's addresses, whose reuse
bounds how far iterations overlap.

DMAs follow the same split. A ``dma_copy`` is an instruction of an engine's sequencer ("Sync Engine or
Scalar Engine sequencers invoke DGE hardware block to generate DMA descriptors as part of the
nisa.dma_copy instruction", nki.isa.dma_copy), so under the NKI compiler DMAs are triggered in program
order: a DMA whose operands are ready still waits until every DMA before it has been triggered (not
finished: the transfers then run side by side on the 16 DMA engines). A load written after the store of
the previous tile therefore starts after that store's data is computed. nkihub does not record
``dma_copy``'s ``engine=``, so all DMAs are one stream (the Sync Engine's, the default). The RMSNorm-Quant
design spec's profile (NKI Library) shows this: one DMA queue per core carries the kernel's loads and
stores, and the Sync Engine is busy from the first DMA to the last. The neuronxcc compiler orders DMAs
itself: a DMA starts once its operands are ready.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from nkihub.simulator.program import AccessPattern

# How many of an engine's instructions (in program order) the list scheduler chooses among. The compiler's
# own window is not published; this bounds scheduling work, and SBUF reuse bounds the overlap before it.
LIST_WINDOW = 1024


@dataclass(frozen=True)
class Policy:
    """How a program's instructions issue: ``window`` instructions per engine to choose among (1: program
    order), whether PSUM banks are assigned while scheduling, whether a computation repeated on
    unchanged inputs is done once (``recomputed``), and whether DMAs are triggered in program order."""

    window: int
    psum_banks: bool
    computes_once: bool
    dma_in_order: bool = False


IN_ORDER = Policy(window=1, psum_banks=False, computes_once=False, dma_in_order=True)
LIST = Policy(window=LIST_WINDOW, psum_banks=True, computes_once=True)


def recomputed(program) -> dict[int, int]:
    """Instructions that repeat an earlier one: {later index: earlier index}. The neuronxcc compiler computes
    an engine instruction whose operands have not changed since it last computed the same thing once (no
    DMA: reloads stay, the fused Mamba tutorial's "input tensor reloading" warnings). Not documented; the
    evidence is that tutorial: mamba_v2 only moves the delta/u loads out of the state loop, yet its Vector
    Engine busy time drops from 2.15 ms (mamba_v1, 2.34 ms at 92% active) to 1.60 ms (1.61 ms at 99.6%),
    the share of the per-state work that delta*u, now loop-invariant, was. Each result tile must have that
    instruction as its only writer (else the two results could part ways later)."""
    from nkihub.simulator.isa import DEBUG, DMA, GENERATE, RANDOM, opdef
    version: dict[str, int] = {}
    writers: dict[str, int] = {}
    for ins in program.instructions:
        for ap in ins.dst.values():
            root = program.root(ap.tensor).name
            writers[root] = writers.get(root, 0) + 1
    seen: dict = {}
    same: dict[int, int] = {}
    for idx, ins in enumerate(program.instructions):
        cats = opdef(ins.opcode).categories
        dsts = [program.root(ap.tensor).name for ap in ins.dst.values()]
        if not cats & {DEBUG, DMA, GENERATE, RANDOM} and ins.src and all(writers[d] == 1 for d in dsts):
            key = (ins.opcode, ins.engine, repr(sorted(ins.attrs.items())),
                   tuple((role, ap, version.get(program.root(ap.tensor).name, 0)) for role, ap in sorted(
                       (r, a) for r, a in ins.src.items() if isinstance(a, AccessPattern))),
                   tuple((role, ap.shape, program.tensors[ap.tensor].dtype) for role, ap in sorted(ins.dst.items())))
            if key in seen:
                same[idx] = seen[key]
            else:
                seen[key] = idx
        for d in dsts:
            version[d] = version.get(d, 0) + 1
    return same


def policy(program) -> Policy:
    """``LIST`` for programs the neuronxcc compiler schedules (``meta["issue"] == "list"``), else in order."""
    return LIST if program.meta.get("issue") == "list" else IN_ORDER


class Issuer:
    """Ready instructions per queue family, and which one goes next.

    ``release(i, t)`` makes instruction ``i`` a candidate once every instruction it depends on is placed
    (``t``: the earliest start its dependencies allow); ``next(free)`` returns the instruction to place
    next, (index, ready time), in time order over all queues, given each queue's free time; ``done(i)``
    records that it was placed. Each DMA takes whichever DMA queue starts it soonest; DMAs are issued in
    program order when ``dma_in_order`` (window 1 over the DMA family), else as soon as they are ready."""

    def __init__(self, family: list, window: int, dma_in_order: bool = False):
        self.family = family
        self.window = window
        self.windows = {"dma": 1 if dma_in_order else len(family) + 1}
        self.order: dict[str, list[int]] = {}
        self.pos = [0] * len(family)
        for i, f in enumerate(family):
            self.pos[i] = len(self.order.setdefault(f, []))
            self.order[f].append(i)
        self.head = {f: 0 for f in self.order}            # position of the oldest unplaced instruction
        self.placed = [False] * len(family)
        self.ready: dict[str, list] = {f: [] for f in self.order}   # heap (ready time, index), in window
        self.held: dict[str, list] = {f: [] for f in self.order}    # heap (position, index, time), beyond it
        self.dma_free = 0.0

    def release(self, i: int, t: float) -> None:
        f = self.family[i]
        if self.pos[i] < self.head[f] + self.windows.get(f, self.window):
            heapq.heappush(self.ready[f], (t, i))
        else:
            heapq.heappush(self.held[f], (self.pos[i], i, t))

    def next(self, free: dict):
        best = None
        for f, heap in self.ready.items():
            if not heap:
                continue
            t = heap[0][0] if f == "dma" else max(free[f], heap[0][0])
            if best is None or (t, heap[0][1]) < best[0]:
                best = ((t, heap[0][1]), f)
        if best is None:
            return None
        # First ready, first served (ties: program order).
        t_ready, i = heapq.heappop(self.ready[best[1]])
        return i, t_ready

    def done(self, i: int) -> None:
        f = self.family[i]
        self.placed[i] = True
        order = self.order[f]
        while self.head[f] < len(order) and self.placed[order[self.head[f]]]:
            self.head[f] += 1
        held = self.held[f]
        while held and held[0][0] < self.head[f] + self.windows.get(f, self.window):
            _, j, t = heapq.heappop(held)
            heapq.heappush(self.ready[f], (t, j))


class PsumBanks:
    """PSUM banks handed out as the compiler schedules (list-scheduled programs): a PSUM tile takes whole
    banks when its first instruction runs and gives them back when the last of its instructions ends, so
    at most ``psum_banks`` (8) banks are in use at once, whatever addresses the program-order allocation
    gave the tiles."""

    def __init__(self, program, target):
        self.program = program
        self.free = [(0.0, -1)] * target.psum_banks      # heap of (free from, instruction that freed it)
        self.first: dict[int, list[str]] = {}
        self.last: dict[int, list[str]] = {}
        self.need: dict[str, int] = {}
        span: dict[str, list[int]] = {}
        for idx, ins in enumerate(program.instructions):
            for t in self._tiles(ins):
                span.setdefault(t, [idx, idx])[1] = idx
        for t, (lo, hi) in span.items():
            self.need[t] = min(target.psum_banks, max(1, -(-program.tensors[t].bytes_per_partition
                                                          // target.psum_bank_bytes)))
            self.first.setdefault(lo, []).append(t)
            self.last.setdefault(hi, []).append(t)
        self.held: dict[str, int] = {}
        self.ends: dict[str, float] = {}

    def _tiles(self, ins):
        tensors = self.program.tensors
        # Tiles the kernel placed itself (direct allocation) keep their banks: the scheduler hands out none.
        return {self.program.root(ap.tensor).name for ap in (*ins.src.values(), *ins.dst.values())
                if isinstance(ap, AccessPattern) and tensors[ap.tensor].buffer == "psum"
                and not self.program.root(ap.tensor).pinned}

    def ready(self, idx: int) -> tuple[float, int]:
        """(earliest start the banks for the PSUM tiles instruction ``idx`` opens allow, the instruction
        whose end freed the last of them, or -1). Banks of tiles still open are not counted: when too few
        are free the instruction takes what there is (the program-order allocation fitted)."""
        n = min(len(self.free), sum(self.need[t] for t in self.first.get(idx, ())))
        return max(heapq.nsmallest(n, self.free)) if n else (0.0, -1)

    def occupy(self, idx: int, ins, end: float) -> None:
        for t in self.first.get(idx, ()):
            self.held[t] = min(self.need[t], len(self.free))
            for _ in range(self.held[t]):
                heapq.heappop(self.free)
        for t in self._tiles(ins):
            self.ends[t] = max(self.ends.get(t, end), end)
        for t in self.last.get(idx, ()):
            for _ in range(self.held.pop(t, 0)):
                heapq.heappush(self.free, (self.ends[t], idx))
            self.ends.pop(t, None)
