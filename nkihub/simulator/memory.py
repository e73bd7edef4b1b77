"""Memory of the fast engine's workspaces: laid out by liveness in one arena, handed back between runs.

A workspace (``simulator.replay``) needs memory for the HBM tensors (the data), for the on-chip tiles or
the renamed storage of a batched plan, and for work arrays. Giving every tile of a long kernel a buffer of
its own made memory grow with the instructions (the matmul tutorial at 8192 x 4096 x 8192 has 6403
tensors, 1.9 GB of them, for 0.26 GB of data). Here every region has a live interval (instruction
indices, or levels of a batched plan) and ``pack`` places regions whose intervals do not meet at the same
bytes, as the compiler's allocator places tiles in SBUF and PSUM; so the on-chip part is bounded by what
is live at once, which the allocation of the Program bounds by the target's SBUF and PSUM.

An ``Arena`` is one anonymous memory map. ``release()`` returns its pages to the operating system while
every view of it stays valid (the next run touches fresh zero pages), so a workspace keeps its bound steps
between runs without keeping the data's memory: several large kernels in one process peak at the
largest, not at the sum.
"""
from __future__ import annotations

import heapq
import mmap
import os
import threading
import weakref
from collections import OrderedDict

import numpy as np

ALIGN = 64      # bytes: every region starts on a cache line (and on any dtype's alignment)
PAGE = mmap.PAGESIZE


def _up(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


def pack(items: list) -> tuple[list, int]:
    """Place regions ``items[i] = (start, end, nbytes)`` (live from time ``start`` to ``end``, both
    included) so that regions live at a common time never share a byte: ``(offsets, total bytes)``.
    First fit in address order over the free blocks, in order of ``start`` (offline interval packing)."""
    order = sorted(range(len(items)), key=lambda i: items[i][0])
    offsets = [0] * len(items)
    free: list = []         # [offset, size] sorted by offset, coalesced
    busy: list = []         # heap of (end, offset, size)
    top = 0
    for i in order:
        start, end, nbytes = items[i]
        while busy and busy[0][0] < start:
            _, off, size = heapq.heappop(busy)
            _give(free, off, size)
        size = _up(max(1, nbytes))
        for j, (off, avail) in enumerate(free):
            if avail >= size:
                if avail == size:
                    del free[j]
                else:
                    free[j] = [off + size, avail - size]
                break
        else:
            if free and free[-1][0] + free[-1][1] == top:    # grow the last free block at the top
                off = free.pop()[0]
            else:
                off = top
            top = off + size
        offsets[i] = off
        heapq.heappush(busy, (end, off, size))
    return offsets, top


def _give(free: list, off: int, size: int) -> None:
    lo, hi = 0, len(free)
    while lo < hi:
        mid = (lo + hi) // 2
        if free[mid][0] < off:
            lo = mid + 1
        else:
            hi = mid
    free.insert(lo, [off, size])
    if lo + 1 < len(free) and free[lo][0] + free[lo][1] == free[lo + 1][0]:
        free[lo][1] += free.pop(lo + 1)[1]
    if lo > 0 and free[lo - 1][0] + free[lo - 1][1] == free[lo][0]:
        free[lo - 1][1] += free.pop(lo)[1]


class Arena:
    """``kept`` bytes that survive ``release()`` (constants, read-only fill regions) followed, from a page
    boundary, by ``released`` bytes whose pages ``release()`` hands back."""

    def __init__(self, kept: int, released: int):
        self.kept = _up(kept, PAGE)
        self.nbytes = self.kept + _up(released, PAGE)
        # private: MADV_DONTNEED frees private anonymous pages (a shared mapping would only unmap them)
        flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
        self._map = mmap.mmap(-1, max(PAGE, self.nbytes), flags=flags) if flags else \
            mmap.mmap(-1, max(PAGE, self.nbytes))
        if self.nbytes >= 4 << 20 and hasattr(mmap, "MADV_HUGEPAGE"):
            # as numpy asks for its own big arrays: transparent huge pages (fewer TLB misses; flash-attn's
            # batched plan ran 2-4% slower on 4 KiB pages)
            self._map.madvise(mmap.MADV_HUGEPAGE)
        self.bytes = np.frombuffer(self._map, dtype=np.uint8)
        self.resident = False   # the released part may hold pages (a run touched it since release())
        self.busy = 0           # runs using it: never released meanwhile

    def array(self, offset: int, count: int, dtype, kept: bool = False) -> np.ndarray:
        """A flat array of ``count`` elements of ``dtype`` at byte ``offset`` of the kept or released part."""
        dtype = np.dtype(dtype)
        start = offset if kept else self.kept + offset
        return self.bytes[start:start + count * dtype.itemsize].view(dtype)

    def typed(self, dtype) -> np.ndarray:
        """The released part as one flat array of ``dtype`` (offsets in elements = bytes // itemsize)."""
        dtype = np.dtype(dtype)
        n = (self.nbytes - self.kept) // dtype.itemsize
        return self.bytes[self.kept:self.kept + n * dtype.itemsize].view(dtype)

    def release(self) -> bool:
        """Hand the released part's pages back to the operating system (they read as zeros afterwards);
        False where the platform cannot."""
        if self.nbytes <= self.kept or not hasattr(self._map, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
            return False
        self._map.madvise(mmap.MADV_DONTNEED, self.kept, self.nbytes - self.kept)
        self.resident = False
        return True

    @property
    def releasable(self) -> int:
        return self.nbytes - self.kept

    def held_bytes(self) -> int:
        return self.releasable if self.resident else 0

    def shed(self) -> bool:
        return self.release()


# Refilling released pages costs about this much per byte (page faults of fresh zero pages, measured on
# the project's machine: 0.24-0.26 ns per byte; filling them afterwards 0.025).
REFAULT_S_PER_BYTE = 0.25e-9
RELEASE_SHARE = 0.05            # a run may spend this share of its time refilling released pages
RELEASE_MIN_BYTES = 64 << 20    # smaller workspaces are always kept
_lock = threading.Lock()
# What holds memory between runs (arenas, and engines holding bound plans), least recently used first.
# Each has ``busy`` (runs using it), ``held_bytes()`` and ``shed()`` (give the memory back; False if it
# cannot now).
_held: "OrderedDict[int, weakref.ref]" = OrderedDict()


def take(*holders) -> None:
    """Mark ``holders`` in use by a run: never shed meanwhile."""
    with _lock:
        for h in holders:
            h.busy += 1
            if isinstance(h, Arena):
                h.resident = True
            _held.pop(id(h), None)


def put_back(arena: Arena, run_s: float, keep_bytes: int, *holders) -> None:
    """A run on ``arena`` (and ``holders``) ended after ``run_s`` seconds. The arena's pages go back to
    the system when refilling them costs at most ``RELEASE_SHARE`` of such a run; else it is held, as
    ``holders`` are (``done``)."""
    with _lock:
        size = arena.releasable
        if arena.busy == 1 and size >= RELEASE_MIN_BYTES and size * REFAULT_S_PER_BYTE <= RELEASE_SHARE * run_s:
            arena.release()
            arena.busy -= 1
        else:
            holders = (arena, *holders)
        _done(keep_bytes, holders)


def done(keep_bytes: int, *holders) -> None:
    """A run using ``holders`` ended: they are held as the most recently used, and the least recently used
    holders not in use (never these) are shed while what is held over the process passes ``keep_bytes``:
    so several large kernels in one process peak near the largest, not the sum."""
    with _lock:
        _done(keep_bytes, holders)


def _done(keep_bytes: int, holders) -> None:
    for h in holders:
        h.busy -= 1
        _held[id(h)] = weakref.ref(h)
    mine = {id(h) for h in holders}
    live, total = [], 0
    for key, ref in list(_held.items()):
        h = ref()
        n = 0 if h is None else h.held_bytes()
        if not n:
            del _held[key]
        else:
            live.append((key, h, n))
            total += n
    for key, h, n in live:
        if total <= keep_bytes:
            break
        if key not in mine and not h.busy and h.shed():
            total -= n
            del _held[key]


def held_bytes() -> int:
    """Bytes held between runs over the process (resident arenas and estimated bound plans)."""
    with _lock:
        return sum(h.held_bytes() for h in (r() for r in _held.values()) if h is not None)


def rss_bytes() -> int:
    """Resident memory of this process now (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
