"""SBUF and PSUM allocation: place every on-chip tile at a byte offset inside each partition so that tiles
live at the same time never overlap, as a compiler's allocator does.

A tile is live from the first to the last instruction that touches it. A tensor declared with block dims
ahead of its partition dim (``TensorSpec.block_bytes``) is placed block by block, each block for its own
live range, so a PSUM tensor bigger than PSUM fits when only some of its blocks are live at once. SBUF
tiles are aligned to ``SBUF_ALIGN_BYTES``; PSUM tiles take whole banks.

Placement is interval colouring (offline dynamic storage allocation: live ranges are known up front), by
strategies tried in turn:

1. next fit in order of first use: a freed range is reused as late as possible, so the tiles of
   consecutive loop iterations rotate through memory like multi-buffering instead of serialising on one
   address (a false dependency for the cost model, as on the hardware);
2. big tiles first (largest, then longest-lived, at the lowest address free over their whole life), the
   rest by next fit around them;
3. every tile largest first.

Running out is an error naming the tile, its source line and what else is live: "held by live tiles" when
the tiles live at that moment exceed the capacity, "fragmented" only when no strategy found a placement.
"""
from __future__ import annotations

from dataclasses import dataclass

from nkihub.simulator.errors import KernelRuleError
from nkihub.simulator.program import Program

# The ISA reference names a minimum SBUF alignment (tile_size.sbuf_min_align) without a figure in
# shared/hardware.md; 64 bytes is an assumption kept here, in one place.
SBUF_ALIGN_BYTES = 64
# Strategy 2 places tiles of at least this fraction of the capacity first.
BIG_TILE_FRACTION = 1 / 16
# Width (instructions) of the time buckets that index placed tiles by live range.
_TIME_BUCKET = 64


@dataclass(frozen=True)
class Allocation:
    """Peak bytes per partition in SBUF and PSUM, and the live range of every on-chip tensor."""

    sbuf_peak_bytes: int
    psum_peak_bytes: int
    live: dict  # tensor name -> (first, last) instruction index

    def to_json(self) -> dict:
        return {"sbuf_peak_bytes": self.sbuf_peak_bytes, "psum_peak_bytes": self.psum_peak_bytes}


@dataclass(frozen=True)
class _Unit:
    """One thing to place: a whole tensor (``block`` None) or one block of a tensor."""

    name: str
    block: int | None
    size: int
    first: int
    last: int

    @property
    def label(self) -> str:
        return self.name if self.block is None else f"{self.name}[block {self.block}]"


def live_ranges(program: Program) -> dict[str, tuple[int, int]]:
    """First and last instruction index touching each on-chip tensor."""
    live: dict[str, tuple[int, int]] = {}
    for idx, ins in enumerate(program.instructions):
        for ap in (*ins.dst.values(), *ins.src.values()):
            if program.tensors[ap.tensor].on_chip:
                name = program.root(ap.tensor).name   # an alias lives in its root's storage
                first = live.get(name, (idx, idx))[0]
                live[name] = (first, idx)
    return live


def _block_ranges(program: Program, blocked: set) -> dict[tuple[str, int], tuple[int, int]]:
    """First and last instruction index touching each block of the tensors in ``blocked``."""
    live: dict[tuple[str, int], tuple[int, int]] = {}
    for idx, ins in enumerate(program.instructions):
        for ap in (*ins.dst.values(), *ins.src.values()):
            spec = program.tensors[ap.tensor]
            root = program.root(ap.tensor)
            if root.name not in blocked:
                continue
            _, _, c0, c1 = ap.box(max(1, spec.free_size))
            item = spec.np_dtype.itemsize
            if c1 <= c0:
                continue
            for b in range(c0 * item // root.block_bytes, (c1 * item - 1) // root.block_bytes + 1):
                first = live.get((root.name, b), (idx, idx))[0]
                live[(root.name, b)] = (first, idx)
    return live


def _round(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def _units(program: Program, live: dict, buffer: str, unit: int, core: int = 0) -> list[_Unit]:
    names = [n for n in live if program.tensors[n].buffer == buffer and program.tensors[n].core == core]
    blocked = {n for n in names if program.tensors[n].blocks > 1}
    by_block = _block_ranges(program, blocked) if blocked else {}
    out = []
    for n in names:
        spec = program.tensors[n]
        if n in blocked:
            size = _round(spec.block_bytes, unit)
            out += [_Unit(n, b, size, *rng) for (t, b), rng in by_block.items() if t == n]
        else:
            out.append(_Unit(n, None, _round(spec.bytes_per_partition, unit), *live[n]))
    return sorted(out, key=lambda u: (u.first, u.last))


def _fit(active, size: int, start: int, capacity: int) -> int | None:
    """Lowest address >= ``start`` where ``size`` bytes fit between the ``active`` (address, size, ...)
    ranges, or None."""
    addr = start
    for a_addr, a_size, *_ in sorted(active, key=lambda a: a[0]):
        if a_addr + a_size <= addr:
            continue
        if addr + size <= a_addr:
            break
        addr = max(addr, a_addr + a_size)
    return addr if addr + size <= capacity else None


class _Placed:
    """Placed units, indexed by time bucket when ``indexed``: which of them overlap a live range."""

    def __init__(self, indexed: bool = True):
        self.buckets: dict[int, list] = {}
        self.addr: dict[_Unit, int] = {}
        self.indexed = indexed

    def add(self, u: _Unit, addr: int) -> None:
        self.addr[u] = addr
        if self.indexed:
            for k in range(u.first // _TIME_BUCKET, u.last // _TIME_BUCKET + 1):
                self.buckets.setdefault(k, []).append(u)

    def remove(self, u: _Unit) -> None:
        del self.addr[u]
        for k in range(u.first // _TIME_BUCKET, u.last // _TIME_BUCKET + 1):
            self.buckets[k].remove(u)

    def overlapping(self, u: _Unit) -> list[tuple[int, int, _Unit]]:
        seen, out = set(), []
        for k in range(u.first // _TIME_BUCKET, u.last // _TIME_BUCKET + 1):
            for v in self.buckets.get(k, ()):
                if v not in seen and v.first <= u.last and u.first <= v.last:
                    seen.add(v)
                    out.append((self.addr[v], v.size, v))
        return out


def _next_fit(units, capacity, placed: _Placed, pinned: set):
    """Units in order of first use, each from where the last went (wrapping to 0). Returns the unit that
    did not fit and what was live then, or None when all are placed."""
    cursor = 0
    active: list[tuple[int, int, _Unit]] = []
    for u in units:
        if u in pinned:
            continue
        active = [a for a in active if a[2].last >= u.first]
        # Pinned (pre-placed) units may start later and still overlap this one's life.
        conflicts = active + [a for a in placed.overlapping(u) if a[2] in pinned] if pinned else active
        addr = _fit(conflicts, u.size, cursor, capacity)
        if addr is None:
            addr = _fit(conflicts, u.size, 0, capacity)
        if addr is None:
            return u, conflicts
        placed.add(u, addr)
        cursor = addr + u.size
        active.append((addr, u.size, u))
    return None


def _lowest(units, capacity, placed: _Placed):
    """Each unit at the lowest address free over its whole life, in the given order."""
    for u in units:
        conflicts = placed.overlapping(u)
        addr = _fit(conflicts, u.size, 0, capacity)
        if addr is None:
            return u, conflicts
        placed.add(u, addr)
    return None


def _search(units, capacity, align: int, budget: int, fixed: dict | None = None):
    """Depth-first search in order of first use, at most ``budget`` steps. Returns (addresses, proven):
    the addresses of a complete placement or None, and whether no placement exists for certain. With few
    slots (PSUM's banks) every aligned address is tried, so an exhausted search proves there is none;
    otherwise only the addresses next to overlapping tiles and the two ends are tried."""
    order = sorted(units, key=lambda u: (u.first, -u.size, u.last))
    placed = _Placed()
    for u, addr in (fixed or {}).items():
        placed.add(u, addr)
    complete = capacity // align <= EXHAUSTIVE_SLOTS
    steps = 0

    def options(u):
        conflicts = placed.overlapping(u)
        if complete:
            candidates = range(0, capacity - u.size + 1, align)
        else:
            candidates = sorted({0, capacity - u.size, *(a + s for a, s, _ in conflicts),
                                 *(a - u.size for a, s, _ in conflicts)})
        return iter([a for a in candidates if a >= 0 and a + u.size <= capacity
                     and not any(c < a + u.size and a < c + s for c, s, _ in conflicts)])

    # Iterative (a program has thousands of tiles): one iterator of untried addresses per placed unit.
    stack = [options(order[0])] if order else []
    while len(stack) <= len(order) and stack:
        u = order[len(stack) - 1]
        if u in placed.addr:
            placed.remove(u)
        addr = next(stack[-1], None)
        if addr is None:
            stack.pop()
            continue
        steps += 1
        if steps > budget:
            return None, False
        placed.add(u, addr)
        if len(stack) == len(order):
            return placed.addr, False
        stack.append(options(order[len(stack)]))
    return None, complete     # every choice tried


STRATEGIES = ("next fit", "first fit", "big first", "largest first", "longest first", "largest area first")
SEARCH_BUDGET = 20000     # placement steps of the last-resort search
EXHAUSTIVE_SLOTS = 16     # the search tries every address when the buffer has at most this many slots


def _place(units: list[_Unit], capacity: int, align: int, fixed: dict | None = None):
    """(addresses, None, None) from the first strategy that places every unit around the ``fixed`` ones
    (unit -> address the kernel chose); else (None, the first strategy's failure, whether a search proved
    that no placement exists)."""
    fixed = fixed or {}
    first_failure = None
    size_key = lambda u: (-u.size, u.first - u.last, u.first)
    overloaded = None   # when the tiles live at some moment exceed the capacity, no strategy can help
    big = sorted((u for u in units if u.size >= capacity * BIG_TILE_FRACTION), key=size_key)
    for strategy in STRATEGIES:
        placed = _Placed(indexed=strategy != "next fit" or bool(fixed))
        for u, addr in fixed.items():
            placed.add(u, addr)
        if strategy == "next fit":
            failed = _next_fit(units, capacity, placed, set(fixed))
        elif strategy == "first fit":
            failed = _lowest(units, capacity, placed)
        elif strategy == "big first":
            if not big or len(big) == len(units):
                continue
            failed = _lowest(big, capacity, placed) or _next_fit(units, capacity, placed, set(big) | set(fixed))
        elif strategy == "largest first":
            failed = _lowest(sorted(units, key=size_key), capacity, placed)
        elif strategy == "longest first":
            failed = _lowest(sorted(units, key=lambda u: (u.first - u.last, -u.size, u.first)), capacity, placed)
        else:
            failed = _lowest(sorted(units, key=lambda u: (-u.size * (u.last - u.first + 1), u.first)), capacity,
                             placed)
        if failed is None:
            return placed.addr, None, None
        first_failure = first_failure or failed
        if overloaded is None:
            overloaded = _peak_load(units + list(fixed)) > capacity
        if overloaded:
            return None, first_failure, True
    addrs, exhausted = _search(units, capacity, align, SEARCH_BUDGET, fixed)
    if addrs is not None:
        return addrs, None, None
    return None, first_failure, exhausted


def _peak_load(units: list[_Unit]) -> int:
    """The most bytes live at any one instruction."""
    events = sorted([(u.first, u.size) for u in units] + [(u.last + 1, -u.size) for u in units],
                    key=lambda e: (e[0], e[1]))
    load = peak = 0
    for _, delta in events:
        load += delta
        peak = max(peak, load)
    return peak


def _live_bytes_at(units: list[_Unit], u: _Unit) -> tuple[int, list[_Unit]]:
    """Bytes of the units live at ``u``'s first instruction (``u`` included)."""
    live = [v for v in units if v.first <= u.first <= v.last]
    return sum(v.size for v in live), live


def _error(program, target, buffer, units, failed, capacity, exhausted) -> KernelRuleError:
    u, _ = failed
    spec = program.tensors[u.name]
    used, live = _live_bytes_at(units, u)
    others = [v for v in live if v != u]
    biggest = ", ".join(f"'{v.label}' {v.size} B" for v in sorted(others, key=lambda v: -v.size)[:4])
    what = "PSUM (8 banks of 2 KiB per partition)" if buffer == "psum" else "SBUF"
    held = used - u.size
    if used <= capacity:
        # Enough bytes at that moment, yet no placement: say so, the remedy differs.
        found = "no placement of all tiles exists" if exhausted else \
            f"no placement of all tiles was found ({len(STRATEGIES)} strategies and a bounded search)"
        why = (f"{capacity - held} of the {capacity} bytes of {what} on {target.name} are free then but "
               f"fragmented by tiles placed around it ({biggest}): {found}; shorten the lifetimes of "
               "long-lived tiles or split the tile")
    else:
        why = (f"{held} of the {capacity} bytes of {what} on {target.name} are held by live tiles "
               f"({biggest}); shrink tiles or end their lifetimes sooner")
    return KernelRuleError(f"{buffer}-capacity", f"'{u.label}' needs {u.size} bytes per partition but {why}",
                           operand=u.name, shape=spec.shape, dtype=spec.dtype, buffer=buffer, loc=spec.loc)


def allocate(program: Program, target) -> Allocation:
    """Assign ``address`` (bytes within a partition) to every on-chip tensor of ``program``, and
    ``block_addresses`` to tensors placed block by block."""
    live = live_ranges(program)
    capacity = {"sbuf": target.sbuf_bytes_per_partition, "psum": target.psum_bytes_per_partition}
    unit = {"sbuf": SBUF_ALIGN_BYTES, "psum": target.psum_bank_bytes}
    peak = {"sbuf": 0, "psum": 0}
    # Each core of a multi-core launch (TensorSpec.core) has its own SBUF and PSUM.
    for buffer, core in sorted({(program.tensors[n].buffer, program.tensors[n].core) for n in live}):
        units = _units(program, live, buffer, unit[buffer], core)
        # Tensors the kernel placed itself (direct allocation) keep their address; the rest go around them.
        fixed = {u: program.tensors[u.name].address for u in units if program.tensors[u.name].pinned}
        free = [u for u in units if u not in fixed]
        addrs, failed, exhausted = _place(free, capacity[buffer], unit[buffer], fixed)
        if addrs is None:
            raise _error(program, target, buffer, units, failed, capacity[buffer], exhausted)
        blocks: dict[str, dict[int, int]] = {}
        for u, addr in addrs.items():
            peak[buffer] = max(peak[buffer], addr + u.size)
            if u.block is None:
                program.tensors[u.name].address = addr
            else:
                blocks.setdefault(u.name, {})[u.block] = addr
        for name, by_block in blocks.items():
            spec = program.tensors[name]
            # A block nothing touches holds no data: give it block 0's place (nothing reads it).
            first = by_block[min(by_block)]
            spec.block_addresses = tuple(by_block.get(b, first) for b in range(spec.blocks))
            spec.address = spec.block_addresses[0]
    for spec in program.tensors.values():
        if spec.alias_of is not None and spec.on_chip:
            root = program.root(spec.name)
            spec.address = root.address
    return Allocation(peak["sbuf"], peak["psum"], live)
