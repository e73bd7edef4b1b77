"""SBUF/PSUM allocation: placement by live range (next fit first, other strategies when it fails), blocks
placed for their own lifetimes, aligned slots, whole PSUM banks, capacity per target with an error that
names the tile and what else is live."""
from __future__ import annotations

import pytest

from nkihub.simulator.allocate import SBUF_ALIGN_BYTES, allocate, live_ranges
from nkihub.simulator.errors import KernelRuleError, SourceLoc
from nkihub.simulator.program import AccessPattern, Instruction, Program, TensorSpec
from nkihub.simulator.targets import TRN1, TRN2, TRN3

LOC = SourceLoc("kern.py", 7, 4, None, "    big = nl.ndarray((128, 50000), nl.float32)")


def whole(spec):
    return AccessPattern(spec.name, 0, ((spec.free_size, spec.shape[0]), (1, spec.free_size)))


def touch(p, *names):
    """One memset per name, in order: each tile is live exactly at its own instruction."""
    for n in names:
        p.instructions.append(Instruction("memset", "vector", {"dst": whole(p.tensors[n])}, {}, {"value": 0.0}))


def prog(*specs):
    p = Program("a")
    for s in specs:
        p.add_tensor(s)
    return p


def sb(name, free, dtype="float32", buffer="sbuf"):
    return TensorSpec(name, (128, free), dtype, buffer, loc=LOC)


def test_tiles_with_disjoint_lives_share_space():
    """Two 150 KiB tiles never live at once: together they exceed SBUF, so the second reuses the first's."""
    p = prog(sb("a", 150 * 256), sb("b", 150 * 256))
    touch(p, "a", "b")
    alloc = allocate(p, TRN1)
    assert p.tensors["a"].address == p.tensors["b"].address == 0
    assert alloc.sbuf_peak_bytes == 150 * 1024


def test_rotation_before_reuse():
    """A freed range is reused as late as possible (next fit), so consecutive iterations' tiles rotate
    through different addresses instead of serialising on one."""
    p = prog(sb("a", 100), sb("b", 100))
    touch(p, "a", "b")
    allocate(p, TRN2)
    assert (p.tensors["a"].address, p.tensors["b"].address) == (0, 448)  # 400 B rounded up to 64 B


def test_overlapping_tiles_get_aligned_disjoint_slots():
    p = prog(sb("a", 100), sb("b", 10, "bfloat16"), sb("c", 1))
    touch(p, "a", "b", "c", "a", "b")  # a and b live together; c lives inside both
    allocate(p, TRN2)
    addrs = sorted((p.tensors[n].address, n) for n in "abc")
    assert [a for a, _ in addrs] == [0, 448, 512]
    assert all(p.tensors[n].address % SBUF_ALIGN_BYTES == 0 for n in "abc")
    assert live_ranges(p) == {"a": (0, 3), "b": (1, 4), "c": (2, 2)}


def test_a_freed_hole_is_reused_when_the_end_is_full():
    p = prog(sb("a", 64 * 256), sb("b", 100 * 256), sb("c", 64 * 256))
    touch(p, "a", "b", "a")   # a [0, 2] at 0, b [1, 1] at 64 KiB
    touch(p, "c")             # c [3, 3]: 64 KiB does not fit after b in trn1's 192 KiB; wraps to 0
    allocate(p, TRN1)
    assert p.tensors["c"].address == 0


def test_psum_tiles_take_whole_banks():
    p = prog(*[sb(f"p{i}", 1, buffer="psum") for i in range(8)])
    touch(p, *[f"p{i}" for i in range(8)], *[f"p{i}" for i in range(8)])
    alloc = allocate(p, TRN2)
    assert sorted(p.tensors[f"p{i}"].address for i in range(8)) == [i * 2048 for i in range(8)]
    assert alloc.psum_peak_bytes == 16 * 1024


def test_a_ninth_live_psum_tile_does_not_fit():
    p = prog(*[sb(f"p{i}", 1, buffer="psum") for i in range(9)])
    touch(p, *[f"p{i}" for i in range(9)], *[f"p{i}" for i in range(9)])
    with pytest.raises(KernelRuleError) as info:
        allocate(p, TRN3)
    e = info.value
    assert e.rule == "psum-capacity" and e.operand == "p8" and e.loc == LOC
    assert "8 banks of 2 KiB" in str(e) and "'p0' 2048 B" in str(e) and "kern.py:7" in str(e)


@pytest.mark.parametrize("target,fits", [(TRN1, False), (TRN2, True), (TRN3, True)])
def test_sbuf_capacity_is_per_target(target, fits):
    """200 KiB per partition: more than trn1's 192 KiB, within trn2's 224 KiB."""
    p = prog(sb("big", 200 * 1024 // 4))
    touch(p, "big")
    if fits:
        assert allocate(p, target).sbuf_peak_bytes == 200 * 1024
    else:
        with pytest.raises(KernelRuleError, match=r"\[rule: sbuf-capacity\]") as info:
            allocate(p, target)
        assert "204800 bytes per partition" in str(info.value) and "on trn1" in str(info.value)


def test_untouched_and_hbm_tensors_get_no_address():
    p = prog(sb("a", 4), sb("idle", 4), TensorSpec("h", (128, 4), "float32", "shared_hbm"))
    touch(p, "a")
    allocate(p, TRN2)
    assert p.tensors["idle"].address is None and p.tensors["h"].address is None


def test_allocation_to_json():
    p = prog(sb("a", 16))
    touch(p, "a")
    assert allocate(p, TRN2).to_json() == {"sbuf_peak_bytes": 64, "psum_peak_bytes": 0}


def _disjoint_while_live(p):
    """No two on-chip tiles (or blocks) that are live at once overlap in memory."""
    live, spans = live_ranges(p), []
    for n, (first, last) in live.items():
        spec = p.tensors[n]
        if spec.block_addresses is None:
            spans.append((first, last, spec.address, spec.bytes_per_partition, spec.buffer))
    for i, a in enumerate(spans):
        for b in spans[i + 1:]:
            if a[4] == b[4] and a[0] <= b[1] and b[0] <= a[1]:
                assert a[2] + a[3] <= b[2] or b[2] + b[3] <= a[2], (a, b)


def test_a_placement_next_fit_misses_is_found():
    """a [0, 4], b [1, 1], c [2, 5], d [3, 3] on trn1 (192 KiB): next fit puts c after b, leaving 64 KiB
    between a and c and 8 KiB at the end for d's 70 KiB. At no moment do the live tiles exceed SBUF, and
    placing the largest tiles first finds a placement, so the kernel is accepted."""
    kib = 256  # float32 elements per KiB
    p = prog(sb("a", 60 * kib), sb("b", 64 * kib), sb("c", 60 * kib), sb("d", 70 * kib))
    touch(p, "a", "b", "c", "d", "a", "c")
    alloc = allocate(p, TRN1)
    _disjoint_while_live(p)
    assert alloc.sbuf_peak_bytes <= 192 * 1024


def _events(p, lives):
    """Touch each tile at its first and last time step (first uses before last uses within a step), so
    tiles overlap in instruction order exactly when their [first, last] steps overlap."""
    for t in range(max(last for _, last in lives.values()) + 1):
        touch(p, *[n for n, (first, _) in lives.items() if first == t])
        touch(p, *[n for n, (first, last) in lives.items() if last == t and first != t])


def psum_banks(name, banks):
    return sb(name, banks * 512, buffer="psum")   # 512 fp32 = one 2 KiB bank per partition


def test_fragmentation_is_reported_only_when_no_placement_exists():
    """Eight tiles whose live banks never exceed PSUM's 8 at any moment, yet no placement of all of them
    exists (the search tries every bank for every tile): the error says the space is fragmented and that
    no placement exists, rather than that it is full."""
    tiles = {"t6": (3, 1, 7), "t0": (4, 2, 3), "t2": (3, 4, 9), "t7": (2, 6, 11), "t3": (3, 8, 8),
             "t1": (2, 9, 10), "t5": (4, 10, 15), "t4": (4, 12, 17)}
    p = prog(*[psum_banks(n, banks) for n, (banks, _, _) in tiles.items()])
    _events(p, {n: (first, last) for n, (_, first, last) in tiles.items()})
    with pytest.raises(KernelRuleError) as info:
        allocate(p, TRN2)
    text = str(info.value)
    assert info.value.rule == "psum-capacity"
    assert "fragmented" in text and "no placement of all tiles exists" in text and "held by" not in text


def test_blocks_are_placed_for_their_own_lifetimes():
    """A PSUM tensor of 16 one-bank blocks (twice PSUM) whose blocks live two at a time fits; blocks live
    together get different banks, and consecutive blocks rotate instead of reusing one bank."""
    spec = TensorSpec("qk", (128, 16, 512), "float32", "psum", loc=LOC, block_bytes=2048)
    p = prog(spec)
    for b in range(16):   # block b is written, then read together with block b + 1
        blk = AccessPattern("qk", b * 512, ((16 * 512, 128), (1, 512)))
        p.instructions.append(Instruction("memset", "vector", {"dst": blk}, {}, {"value": 0.0}))
        if b:
            prev = AccessPattern("qk", (b - 1) * 512, ((16 * 512, 128), (1, 512)))
            p.instructions.append(Instruction("tensor_copy", "vector", {"dst": blk}, {"src": prev}, {}))
    alloc = allocate(p, TRN2)
    addrs = spec.block_addresses
    assert len(addrs) == 16 and spec.address == addrs[0] and alloc.psum_peak_bytes <= 16 * 1024
    assert all(addrs[b] != addrs[b + 1] for b in range(15))
    assert len(set(addrs[:8])) == 8          # next fit: rotation through the banks before reuse


def test_a_tensor_without_room_for_its_live_blocks_is_held_not_fragmented():
    spec = TensorSpec("qk", (128, 9, 512), "float32", "psum", loc=LOC, block_bytes=2048)
    p = prog(spec)
    p.instructions.append(Instruction("memset", "vector", {"dst": whole(spec)}, {}, {"value": 0.0}))
    with pytest.raises(KernelRuleError) as info:
        allocate(p, TRN2)
    assert "'qk[block 8]' needs 2048 bytes" in str(info.value) and "are held by live tiles" in str(info.value)


def test_the_last_resort_search_handles_thousands_of_tiles():
    """The search places tiles one after another without recursion (programs have thousands of tiles)."""
    from nkihub.simulator.allocate import _Unit, _search
    units = [_Unit(f"t{i}", None, 1024, i, i + 1) for i in range(3000)]
    addrs, proven = _search(units, 4096, SBUF_ALIGN_BYTES, budget=10_000)
    assert addrs is not None and not proven and len(addrs) == 3000
    assert all(addrs[a] != addrs[b] for a, b in zip(units, units[1:]))   # neighbours overlap in time


# -- affine_range loops interchanged when no program order fits (simulator.reorder) ---------------------------
# The NKI kernel-optimization tutorial's blocked matmul (v4) loads two column blocks of rhs, then runs a
# bm x bn affine_range nest in which block bn is read at (0, bn) and again at (1, bn): in program order both
# blocks are live from (0, 1) to (1, 0), more than SBUF holds, yet it compiled and ran on trn2. With the two
# affine loops interchanged (bn outermost) one block is live at a time.

import numpy as np  # noqa: E402

import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

_K, _F = 4, 8192   # per block: 4 tiles of 32 KiB per partition (fp32); both blocks: 256 KiB > 224 KiB


def _blocked_scale(x, outer_range):
    """out[bm, bn, k] = x[bn, k] * (bm + 1); x [2, K, 128, F] float32 -> out [2, 2, K, 128, F]."""
    out = nl.ndarray((2, 2, _K, 128, _F), dtype=x.dtype, buffer=nl.shared_hbm)
    blocks = []
    for bn in nl.affine_range(2):
        tiles = []
        for k in nl.affine_range(_K):
            t = nl.ndarray((128, _F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[bn, k])
            tiles.append(t)
        blocks.append(tiles)
    for bm in outer_range(2):
        for bn in outer_range(2):
            for k in nl.affine_range(_K):
                r = nl.ndarray((128, _F), dtype=x.dtype, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=r, data=blocks[bn][k], op0=nl.multiply, operand0=float(bm + 1))
                nisa.dma_copy(dst=out[bm, bn, k], src=r)
    return out


@nki.jit
def _blocked_affine(x):
    return _blocked_scale(x, nl.affine_range)


@nki.jit
def _blocked_sequential(x):
    return _blocked_scale(x, nl.sequential_range)


def test_affine_loops_interchanged_when_program_order_does_not_fit():
    x = np.random.default_rng(0).standard_normal((2, _K, 128, _F)).astype(np.float32)
    prog = _blocked_affine.trace(x, target="trn2")
    assert prog.meta["instruction_order"] == "affine interchange"
    # Both (bm, bn = 0) iterations run before block 1 is first read: block 0's tiles die first.
    reads = [i.loops for i in prog.instructions if i.opcode == "tensor_scalar"]
    bn_of = [loops[-2][1] for loops in reads]
    assert bn_of == [0] * (2 * _K) + [1] * (2 * _K)
    want = np.stack([np.stack([x[bn] * (bm + 1) for bn in range(2)]) for bm in range(2)])
    np.testing.assert_array_equal(_blocked_affine(x), want)


def test_sequential_loops_that_do_not_fit_are_still_an_sbuf_overflow():
    # The same nest in sequential_range may not be reordered: both blocks are live at (0, 1)..(1, 0).
    x = np.zeros((2, _K, 128, _F), np.float32)
    with pytest.raises(KernelRuleError, match="sbuf-capacity"):
        _blocked_sequential.trace(x, target="trn2")
