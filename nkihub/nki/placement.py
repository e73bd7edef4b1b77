"""Direct allocation: on-chip tensors placed where the kernel says (the old dialect's ``ncc.sbuf.alloc`` /
``mod_alloc`` and their PSUM forms; the NKI Direct Allocation guide).

A tensor declared as [B..., P, F...] has one logical tile of P partitions x F per block index; the
kernel's placement function gives each block index a physical tile (start partition, byte address; for
PSUM a bank, a start partition and a byte address in the bank). Blocks placed on the same physical tile
share its bytes, as on the hardware: a modulo placement over 2 tiles is double buffering.

Model: the physical tiles of one declaration are one Program tensor at a pinned address, spanning the
partitions and bytes its tiles cover; an access to logical blocks becomes an operand over that storage
when it becomes an instruction operand (``NkiTensor.to_ap``). Declarations are checked against the
target (the tile inside SBUF, or inside one PSUM bank; start partitions the ISA allows). After tracing,
the lifetime of every logical block (first to last instruction touching it) is known: two blocks whose
bytes overlap, of one tensor or of two, may not be live at once (``direct-allocation-overlap``), and a
block's first use must write it (otherwise it reads what an earlier block left in its bytes:
``read-uninitialized``).

The neuronxcc compiler traces the body of an ``affine_range``/``sequential_range`` loop once, so a tensor
declared in the body is placed once; the simulator unrolls loops, so a declaration met again in a later
iteration of the same loops (same kernel line, same loops, same order) gets the first iteration's
physical tiles, whatever its placement arguments computed this time (e.g. an address counter the loop
body keeps advancing).

Not modelled: the release note that a kernel may not mix automatic and direct allocation (tiles the
simulator makes for intermediate results are placed automatically around the direct ones).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from nkihub.nki import tracing
from nkihub.simulator.errors import KernelRuleError
from nkihub.simulator.program import AccessPattern, TensorSpec

# The NKI docs reserve the last 16 KiB of each SBUF partition for the compiler (byte_addr < 192 - 16 KiB
# on NeuronCore-v2); the same reserve is kept on every target.
SBUF_RESERVED_BYTES = 16 * 1024


@dataclass
class PlacedSpec(TensorSpec):
    """The logical tensor of a direct allocation (never a Program tensor): its views are rewritten to the
    physical storage by ``placement``."""

    placement: "Placement | None" = None


@dataclass
class Placement:
    """Logical blocks of one declaration and the physical tiles they map to.

    Logical storage (what views index) is [P, nblocks * block] elements, block b at columns
    [b * block, (b + 1) * block); physical storage ``physical`` is [rows, row] elements, block b at
    partition offset ``part[b]`` and element offset ``col[b]``.
    """

    name: str
    physical: TensorSpec
    blocks: tuple            # block-dim sizes
    partitions: int
    block: int               # elements of one logical tile per partition
    part: np.ndarray         # per logical block: start partition
    col: np.ndarray          # per logical block: element offset in the physical row
    byte: np.ndarray         # per logical block: absolute byte address in the partition
    loc: object = None
    uses: list = field(default_factory=list)   # (instruction, role, block ids) in emission order

    @property
    def nblocks(self) -> int:
        return len(self.part)

    def block_index(self, b: int) -> tuple:
        return tuple(int(i) for i in np.unravel_index(b, self.blocks)) if self.blocks else ()

    def base(self, b: int) -> int:
        return int(self.part[b]) * self.physical.free_size + int(self.col[b])

    def map(self, offset: int, dims) -> tuple[AccessPattern, tuple]:
        """The physical access pattern of a logical view, and the logical blocks it touches."""
        row, blk, prow = self.nblocks * self.block, self.block, self.physical.free_size
        p0, c0 = divmod(offset, row)
        b0, f0 = divmod(c0, blk)
        lo = hi = f0
        grid, out = [], []
        for stride, size in dims:
            if size <= 1:
                out.append((0, size))
            elif stride % row == 0:
                out.append((stride // row * prow, size))
            elif stride % blk == 0 and self.nblocks > 1:
                grid.append((len(out), stride // blk, size))
                out.append(None)
            else:
                span = stride * (size - 1)
                lo, hi = lo + min(0, span), hi + max(0, span)
                out.append((stride, size))
        if lo < 0 or hi >= blk:
            raise self._error(f"an access of {tuple(n for _, n in dims)} starting in block "
                              f"{self.block_index(b0)} runs past that block's {blk} elements per partition; "
                              "with direct allocation an access stays inside its blocks")
        touched = [b0]
        for pos, step, size in grid:
            stride = self.base(b0 + step) - self.base(b0) if b0 + step < self.nblocks else 0
            out[pos] = (stride, size)
        if grid:
            axes = [range(size) for _, _, size in grid]
            touched = []
            for point in itertools.product(*axes):
                b = b0 + sum(i * step for i, (_, step, _) in zip(point, grid))
                want = self.base(b0) + sum(i * out[pos][0] for i, (pos, _, _) in zip(point, grid))
                if b >= self.nblocks or self.base(b) != want:
                    raise self._error(f"an access over blocks {self.block_index(b0)}.. spans blocks whose "
                                      "physical tiles are not evenly spaced (modulo placement wraps); access "
                                      "one block, or a run of evenly placed blocks, per instruction")
                touched.append(b)
        ap = AccessPattern(self.physical.name, p0 * prow + self.base(b0) + f0, tuple(out))
        return ap, tuple(touched)

    def _error(self, msg: str) -> KernelRuleError:
        return KernelRuleError("direct-allocation-access", f"'{self.name}': {msg}", operand=self.name,
                               dtype=self.physical.dtype, buffer=self.physical.buffer, loc=tracing.caller_loc())


class _State:
    """Per kernel trace: declarations met so far (for loop re-declarations) and the views mapped."""

    def __init__(self):
        self.sites: dict = {}      # (file, line, col, loop ids) -> [first iterations, [Placement], counts]
        self.placements: list[Placement] = []
        self.mapped: dict[int, tuple] = {}   # id(access pattern) -> (access pattern, placement, blocks)
        self.written: dict[tuple, bool] = {}  # (id(placement), block) -> last written by a matmul


_STATES: "weakref.WeakKeyDictionary" = None


def _state(b) -> _State:
    global _STATES
    if _STATES is None:
        import weakref
        _STATES = weakref.WeakKeyDictionary()
    st = _STATES.get(b)
    if st is None:
        st = _STATES[b] = _State()
    return st


def view_ap(spec: PlacedSpec, offset: int, dims) -> AccessPattern:
    """``NkiTensor.to_ap`` of a view of a directly allocated tensor: the physical access pattern,
    remembered so that the lifetime check knows which logical blocks each operand touches."""
    ap, blocks = spec.placement.map(offset, dims)
    b = tracing.current()
    if b is not None:
        _state(b).mapped[id(ap)] = (ap, spec.placement, blocks)
    return ap


def _hit(b, ap):
    st = _STATES.get(b) if _STATES is not None and b is not None else None
    hit = st.mapped.get(id(ap)) if st is not None else None
    return (st, hit) if hit is not None and hit[0] is ap else (st, None)


def note_writes(b, ins) -> None:
    """Record the logical blocks instruction ``ins`` (just emitted) writes, and whether a matmul did."""
    matmul = ins.opcode in ("nc_matmul", "nc_matmul_mx")
    for ap in ins.dst.values():
        st, hit = _hit(b, ap)
        if hit is not None:
            for blk in hit[2]:
                st.written[(id(hit[1]), blk)] = matmul


def written(b, ap: AccessPattern, by_matmul: bool = False) -> bool | None:
    """For an operand made from a directly allocated view: whether an instruction so far wrote (a matmul
    last wrote, with ``by_matmul``) one of its logical blocks; None for other operands. PSUM accumulation
    starts per logical block: a block sharing its bank with an earlier block is still unwritten."""
    st, hit = _hit(b, ap)
    if hit is None:
        return None
    flags = [st.written.get((id(hit[1]), blk)) for blk in hit[2]]
    return any(f is not None and (f or not by_matmul) for f in flags)


def _allowed_starts(p: int) -> tuple:
    return (0,) if p > 64 else (0, 64) if p > 32 else (0, 32, 64, 96)


def _locate(target, buffer: str, locate, idx, p: int, fbytes: int, item: int, name: str):
    """(start partition, absolute byte address) of block ``idx``, checked against the target."""
    raw = tuple(int(v) for v in locate(idx, p, fbytes))
    what = f"block {idx} of '{name}' ({p} partitions x {fbytes} bytes) placed at {raw}"

    def bad(rule, why):
        return KernelRuleError(rule, f"{what}: {why}", operand=name, buffer=buffer, loc=tracing.caller_loc())

    if buffer == "psum":
        if len(raw) != 3:
            raise bad("direct-allocation", "a PSUM placement function returns (bank, start partition, byte address)")
        bank, start, addr = raw
        if not 0 <= bank < target.psum_banks:
            raise bad("psum-capacity", f"{target.name} has PSUM banks 0..{target.psum_banks - 1}")
        if addr < 0 or addr + fbytes > target.psum_bank_bytes:
            raise bad("psum-capacity", f"a PSUM tile stays inside one bank of {target.psum_bank_bytes} bytes per "
                      "partition")
        addr += bank * target.psum_bank_bytes
    else:
        if len(raw) != 2:
            raise bad("direct-allocation", "an SBUF placement function returns (start partition, byte address)")
        start, addr = raw
        cap = target.sbuf_bytes_per_partition
        if addr < 0 or addr >= cap - SBUF_RESERVED_BYTES or addr + fbytes > cap:
            raise bad("sbuf-capacity", f"the byte address must be below {cap - SBUF_RESERVED_BYTES} (the last "
                      f"{SBUF_RESERVED_BYTES // 1024} KiB are the compiler's) and the tile must end within the "
                      f"{cap} bytes of an SBUF partition on {target.name}")
    if addr % item:
        raise bad("direct-allocation", f"the byte address is not a multiple of the element size ({item})")
    if start not in _allowed_starts(p) or start + p > target.partitions:
        raise bad("start-partition", f"a tile of {p} partitions starts at one of {_allowed_starts(p)} and ends "
                  f"by partition {target.partitions}")
    return start, addr


def declare(storage: tuple, nblock_dims: int, dtype: str, buffer: str, locate, name=None) -> TensorSpec:
    """A directly allocated tensor of logical storage ``storage`` = (P, B..., F...) with ``nblock_dims``
    block dims; ``locate(idx, P, bytes per partition)`` places block ``idx`` (the placement function of
    ``ncc.sbuf.alloc`` / ``ncc.psum.alloc``). Returns the logical spec (a ``PlacedSpec``)."""
    from nkihub.simulator.dtypes import as_dtype
    b = tracing.require("direct allocation")
    loc = tracing.caller_loc()
    p, blocks, free = storage[0], tuple(storage[1:nblock_dims + 1]), tuple(storage[nblock_dims + 1:])
    item = as_dtype(dtype).itemsize
    block = math.prod(free)
    st = _state(b)
    key = (getattr(loc, "file", None), getattr(loc, "line", None), getattr(loc, "col", None),
           tuple(lid for lid, _ in b.loop_stack))
    iters = tuple(it for _, it in b.loop_stack)
    site = st.sites.setdefault(key, [iters, [], {}])
    n = site[2].get(iters, 0)
    site[2][iters] = n + 1
    first = site[1][n] if iters != site[0] and n < len(site[1]) else None
    if first is not None and (first.blocks, first.partitions, first.block, first.physical.dtype) == \
            (blocks, p, block, dtype):
        pl = Placement(first.name, first.physical, blocks, p, block, first.part, first.col, first.byte, loc)
    else:
        phys_name = b.fresh_name(name or buffer)
        nb = math.prod(blocks)
        part, byte = np.zeros(nb, np.int64), np.zeros(nb, np.int64)
        for i in range(nb):
            idx = tuple(int(v) for v in np.unravel_index(i, blocks)) if blocks else ()
            part[i], byte[i] = _locate(b.target, buffer, locate, idx, p, block * item, item, phys_name)
        lo, hi = int(byte.min()), int(byte.max()) + block * item
        phys = b.new_tensor((int(part.max()) + p, (hi - lo) // item), dtype, buffer, name=phys_name, loc=loc)
        phys.address, phys.pinned = lo, True
        pl = Placement(phys.name, phys, blocks, p, block, part, (byte - lo) // item, byte, loc)
        if iters == site[0]:
            site[1].append(pl)
    st.placements.append(pl)
    return PlacedSpec(pl.name, tuple(storage), dtype, buffer, "internal", loc, placement=pl)


def check(b) -> None:
    """After tracing: each logical block's lifetime over the final instruction order; two blocks on
    overlapping bytes may not be live at once, and a block's first instruction must not read it."""
    st = _STATES.get(b) if _STATES is not None else None
    if st is None or not st.mapped:
        return
    from nkihub.simulator.isa import opdef
    from nkihub.simulator.isa.base import dst_reads
    life: dict = {}        # (id(placement), block) -> [first, last, first reads, placement, block, first ins]
    for idx, ins in enumerate(b.program.instructions):
        read_back = dst_reads(opdef(ins.opcode), ins)
        for role, ap in (*ins.dst.items(), *ins.src.items()):
            hit = st.mapped.get(id(ap))
            if hit is None or hit[0] is not ap:
                continue
            _, pl, blocks = hit
            reads = role in ins.src or role in read_back
            for blk in blocks:
                rec = life.get((id(pl), blk))
                if rec is None:
                    life[(id(pl), blk)] = [idx, idx, reads, pl, blk, ins]
                else:
                    rec[1] = idx
                    if rec[0] == idx:
                        rec[2] = rec[2] or reads
    for first, _, reads, pl, blk, ins in life.values():
        if reads:
            raise KernelRuleError("read-uninitialized", f"reads block {pl.block_index(blk)} of '{pl.name}' "
                                  "before anything wrote it: with direct allocation its bytes hold whatever an "
                                  "earlier block placed there left", operand=pl.name, buffer=pl.physical.buffer,
                                  dtype=pl.physical.dtype, loc=ins.loc)
    _overlaps(sorted(life.values(), key=lambda r: (r[0], r[1])), b.program)


def _region(pl: Placement, blk: int) -> tuple:
    item = pl.physical.np_dtype.itemsize
    return (pl.physical.core, pl.physical.buffer, int(pl.part[blk]), int(pl.part[blk]) + pl.partitions,
            int(pl.byte[blk]), int(pl.byte[blk]) + pl.block * item)


def _overlaps(records: list, program) -> None:
    active: list = []
    for rec in records:
        first = rec[0]
        # A block last used by the instruction that first uses this one is updated in place: no overlap.
        active = [(a, r) for a, r in active if a[1] > first]
        core, buf, p0, p1, b0, b1 = reg = _region(rec[3], rec[4])
        for a, (c, bb, q0, q1, a0, a1) in active:
            if (c, bb) == (core, buf) and q0 < p1 and p0 < q1 and a0 < b1 and b0 < a1:
                last = program.instructions[a[1]]
                raise KernelRuleError(
                    "direct-allocation-overlap",
                    f"block {rec[3].block_index(rec[4])} of '{rec[3].name}' (declared at {rec[3].loc}) is placed "
                    f"on bytes {b0}..{b1 - 1} of partitions {p0}..{p1 - 1} of {buf.upper()}, which block "
                    f"{a[3].block_index(a[4])} of '{a[3].name}' (declared at {a[3].loc}) still uses until "
                    f"{last.loc}: writing it here destroys data that is read later",
                    operand=rec[3].name, buffer=buf, dtype=rec[3].physical.dtype, loc=rec[5].loc)
        active.append((rec, reg))
