"""SBUF and PSUM allocation: a linear scan over the live ranges of on-chip tensors.

A tensor is live from the first to the last instruction that touches it. SBUF tensors get a byte
offset inside each partition (aligned to ``SBUF_ALIGN_BYTES``); PSUM tensors get whole banks. Running
out raises ``KernelRuleError`` naming the tensor, its source line, and what else was live.
"""
from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import KernelRuleError
from simulator.program import Program

# The ISA reference names a minimum SBUF alignment (tile_size.sbuf_min_align) without a figure in
# shared/hardware.md; 64 bytes is an assumption kept here, in one place.
SBUF_ALIGN_BYTES = 64


@dataclass(frozen=True)
class Allocation:
    """Peak bytes per partition in SBUF and PSUM, and the live range of every on-chip tensor."""

    sbuf_peak_bytes: int
    psum_peak_bytes: int
    live: dict  # tensor name -> (first, last) instruction index

    def to_json(self) -> dict:
        return {"sbuf_peak_bytes": self.sbuf_peak_bytes, "psum_peak_bytes": self.psum_peak_bytes}


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


def _round(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def _fit(active, size: int, start: int, capacity: int) -> int | None:
    """Lowest address >= ``start`` where ``size`` bytes fit between the ``active`` ranges, or None."""
    addr = start
    for a_addr, a_size, _ in sorted(active):
        if a_addr + a_size <= addr:
            continue
        if addr + size <= a_addr:
            break
        addr = max(addr, a_addr + a_size)
    return addr if addr + size <= capacity else None


def allocate(program: Program, target) -> Allocation:
    """Assign ``address`` (bytes within a partition) to every on-chip tensor of ``program``."""
    live = live_ranges(program)
    capacity = {"sbuf": target.sbuf_bytes_per_partition, "psum": target.psum_bytes_per_partition}
    unit = {"sbuf": SBUF_ALIGN_BYTES, "psum": target.psum_bank_bytes}
    peak = {"sbuf": 0, "psum": 0}
    cursor = {"sbuf": 0, "psum": 0}
    for buffer in ("sbuf", "psum"):
        names = sorted((n for n in live if program.tensors[n].buffer == buffer), key=lambda n: live[n])
        active: list[tuple[int, int, str]] = []  # (address, size, name)
        for name in names:
            spec = program.tensors[name]
            start = live[name][0]
            active = [a for a in active if live[a[2]][1] >= start]
            size = _round(spec.bytes_per_partition, unit[buffer])
            # Next fit: search from where the last tile went, so a freed range is reused as late as
            # possible (the rotating buffers that let loads of one iteration overlap the compute of the
            # last; reusing an address at once would serialise them through a false dependency).
            addr = _fit(active, size, cursor[buffer], capacity[buffer])
            if addr is None:
                addr = _fit(active, size, 0, capacity[buffer])
            if addr is None:
                addr = capacity[buffer]
            if addr + size > capacity[buffer]:
                used = sum(a[1] for a in active)
                biggest = sorted(active, key=lambda a: -a[1])[:4]
                others = ", ".join(f"'{n}' {s} B" for _, s, n in biggest)
                what = "PSUM (8 banks of 2 KiB per partition)" if buffer == "psum" else "SBUF"
                if used + size <= capacity[buffer]:
                    # Enough bytes in total, but not in one piece: say so, the remedy differs.
                    why = (f"{capacity[buffer] - used} of the {capacity[buffer]} bytes of {what} on "
                           f"{target.name} are free but fragmented by live tiles ({others}): no free range "
                           "is that long; allocate long-lived tiles first or split the tile")
                else:
                    why = (f"{used} of the {capacity[buffer]} bytes of {what} on {target.name} are held by "
                           f"live tiles ({others}); shrink tiles or end their lifetimes sooner")
                raise KernelRuleError(
                    f"{buffer}-capacity",
                    f"'{name}' needs {size} bytes per partition but {why}",
                    operand=name, shape=spec.shape, dtype=spec.dtype, buffer=buffer, loc=spec.loc)
            spec.address = addr
            cursor[buffer] = addr + size
            active.append((addr, size, name))
            peak[buffer] = max(peak[buffer], addr + size)
    for spec in program.tensors.values():
        if spec.alias_of is not None and spec.on_chip:
            spec.address = program.root(spec.name).address
    return Allocation(peak["sbuf"], peak["psum"], live)
