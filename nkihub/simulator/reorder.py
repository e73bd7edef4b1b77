"""Demand-driven instruction order: the fallback when a Program's on-chip tiles do not fit in the order the
kernel emitted them.

A kernel written loop by loop (all of Q@K into PSUM, then the row maxima, then the subtraction: the
nki-samples attention tutorial v3) keeps every block of its PSUM tensor live from the first loop to the
last in program order; the neuronxcc compiler schedules the instruction graph, not the Python order, and
compiles such kernels at 4096 tokens. This pass reorders the same way a list scheduler that favours short
lifetimes would: instructions that only write on-chip memory are held back until something needs what
they write (a read of it, or an overwrite of what they read or write), and everything else (stores to
HBM, collectives, random-number state, prints) stays in program order. Every read-after-write,
write-after-read and write-after-write on overlapping memory keeps its order, so the values computed are
those of the original order; only lifetimes (and so the allocation and the cost model's timeline) change.

When that order does not fit either, a kernel may still fit with two perfectly nested ``affine_range`` loops
interchanged (``affine_interchanges``): the iterations of an ``affine_range`` are independent (the
``affine_range`` reference: "no loop-carried dependencies", the compiler is free to reorder and overlap
them), so the compiler may run the inner loop's iterations outermost, which ends a tile read across the
outer loop's iterations sooner (the NKI kernel-optimization tutorial's blocked matmul v4 keeps both
``rhs`` column blocks live across its ``bm`` x ``bn`` loop nest, 256 KiB per partition, and compiled and
ran on trn2). Only loops the validator accepted as ``affine_range`` are interchanged, and a kernel whose
tiles fit in no order tried is still rejected.

Overlap is judged on each access's covering box (partitions x bytes per partition on chip, the byte
extent in HBM), which is conservative: a false overlap only keeps an order the kernel already had.
"""
from __future__ import annotations

from nkihub.simulator.program import Program

# Instructions whose only effect is writing their destinations from their sources; anything else (and any
# opcode added later) keeps its place in program order.
PURE = frozenset({
    "activation", "activate2", "affine_select", "bn_aggr", "bn_stats", "dma_copy", "dma_transpose",
    "dma_compute", "exponential", "iota", "local_gather", "max8", "memset", "nc_find_index8",
    "nc_match_replace8", "nc_matmul", "nc_matmul_mx", "nc_n_gather", "nc_stream_shuffle", "nc_transpose",
    "quantize_mx", "range_select", "reciprocal", "scalar_tensor_tensor", "select_reduce", "sequence_bounds",
    "tensor_copy", "tensor_copy_predicated", "tensor_partition_reduce", "tensor_reduce", "tensor_scalar",
    "tensor_scalar_cumulative", "tensor_scalar_reduce", "tensor_tensor", "tensor_tensor_scan", "topk",
})

_WHOLE = (0, 1 << 62, 0, 1 << 62)


def _box(program: Program, ap) -> tuple[str, tuple]:
    """(root tensor, (row_lo, row_hi, byte_lo, byte_hi)) covering access pattern ``ap``."""
    spec = program.tensors[ap.tensor]
    root = program.root(ap.tensor)
    item = spec.np_dtype.itemsize
    if not spec.on_chip:
        lo, hi = ap.extent()
        return root.name, ((0, 1, lo * item, hi * item) if spec is root else _WHOLE)
    row = max(1, spec.free_size)
    if row * item != max(1, root.free_size) * root.np_dtype.itemsize:
        return root.name, _WHOLE          # an alias with another row layout: the whole tensor
    r0, r1, c0, c1 = ap.box(row)
    return root.name, (r0, r1, c0 * item, c1 * item)


def _overlap(a: tuple, b: tuple) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def demand_order(program: Program) -> list[int] | None:
    """A permutation of ``program.instructions`` (original indices in the new order) that keeps every
    dependency and emits on-chip-only instructions when they are first needed; None when it is the
    original order."""
    ins = program.instructions
    acc = []        # per instruction: [(root, box, writes)]
    for i in ins:
        acc.append([(*_box(program, ap), True) for ap in i.dst.values()]
                   + [(*_box(program, ap), False) for ap in i.src.values()])
    deferred_w: dict[str, dict[int, list]] = {}   # root -> deferred instruction -> boxes it writes
    deferred_r: dict[str, dict[int, list]] = {}   # root -> deferred instruction -> boxes it reads
    emitted = [False] * len(ins)
    out: list[int] = []

    def deps(j: int) -> list[int]:
        found = set()
        for root, box, writes in acc[j]:
            for table in ((deferred_w, deferred_r) if writes else (deferred_w,)):
                for k, boxes in table.get(root, {}).items():
                    if k < j and k not in found and any(_overlap(box, b) for b in boxes):
                        found.add(k)
        return sorted(found, reverse=True)

    def emit(i: int) -> None:
        stack = [i]
        while stack:
            j = stack[-1]
            if emitted[j]:
                stack.pop()
                continue
            before = deps(j)
            if before:
                stack.extend(before)
                continue
            emitted[j] = True
            out.append(j)
            stack.pop()
            for root, _, writes in acc[j]:
                (deferred_w if writes else deferred_r).get(root, {}).pop(j, None)

    for i, instr in enumerate(ins):
        chip_only = instr.dst and all(program.tensors[ap.tensor].on_chip for ap in instr.dst.values())
        if instr.opcode in PURE and chip_only:
            for root, box, writes in acc[i]:
                (deferred_w if writes else deferred_r).setdefault(root, {}).setdefault(i, []).append(box)
        else:
            emit(i)
    for i in range(len(ins)):
        if not emitted[i]:
            emit(i)
    return None if out == list(range(len(ins))) else out


def _perfect_nests(program: Program) -> dict[tuple, list[tuple[int, int]]]:
    """Perfectly nested pairs of ``affine_range`` loops, grouped by source: (outer loop's source line,
    inner loop's source line) -> [(outer loop id, depth of the outer loop in ``Instruction.loops``)]. A pair
    is perfect when every instruction of every outer iteration runs inside that iteration's one inner loop,
    and every inner loop has the same trip count."""
    inner: dict[tuple[int, int, int], set] = {}   # (outer id, depth, outer iteration) -> inner loop ids
    broken: set[int] = set()
    for ins in program.instructions:
        for depth, (lid, it) in enumerate(ins.loops):
            if program.loops[lid].kind != "affine" or lid in broken:
                continue
            if depth + 1 >= len(ins.loops) or program.loops[ins.loops[depth + 1][0]].kind != "affine":
                broken.add(lid)
                continue
            inner.setdefault((lid, depth, it), set()).add(ins.loops[depth + 1][0])
    by_outer: dict[tuple[int, int], list[set]] = {}
    for (lid, depth, _), ids in inner.items():
        by_outer.setdefault((lid, depth), []).append(ids)
    out: dict[tuple, list[tuple[int, int]]] = {}
    for (lid, depth), sets in by_outer.items():
        if lid in broken or any(len(ids) != 1 for ids in sets):
            continue
        inner_ids = [next(iter(ids)) for ids in sets]
        if len({program.loops[i].trip_count for i in inner_ids}) != 1 or len(sets) < 2:
            continue
        outer_loc, inner_loc = program.loops[lid].loc, program.loops[inner_ids[0]].loc
        key = (outer_loc.to_json() if outer_loc else lid, inner_loc.to_json() if inner_loc else None)
        out.setdefault(repr(key), []).append((lid, depth))
    return out


def interchanged_order(program: Program, nests: list[tuple[int, int]]) -> list[int]:
    """A permutation of ``program.instructions`` in which each (outer affine loop id, depth) of ``nests``
    runs with its inner loop outermost: inside the outer loop's span the instructions are ordered by
    (inner iteration, outer iteration), stably."""
    chosen = dict(nests)
    order = list(range(len(program.instructions)))
    ins = program.instructions
    i = 0
    while i < len(order):
        loops = ins[order[i]].loops
        hit = next(((lid, d) for d, (lid, _) in enumerate(loops) if chosen.get(lid) == d), None)
        if hit is None:
            i += 1
            continue
        lid, depth = hit
        j = i
        while j < len(order) and len(ins[order[j]].loops) > depth and ins[order[j]].loops[depth][0] == lid:
            j += 1
        order[i:j] = sorted(order[i:j], key=lambda k: (ins[k].loops[depth + 1][1], ins[k].loops[depth][1]))
        i = j
    return order


def affine_interchanges(program: Program) -> list[list[int]]:
    """Instruction orders to try when the kernel's tiles do not fit: each source-level perfect nest of two
    ``affine_range`` loops interchanged on its own, then all of them together (at most
    ``MAX_INTERCHANGES`` + 1 orders)."""
    nests = list(_perfect_nests(program).values())[:MAX_INTERCHANGES]
    groups = [g for g in nests] + ([sum(nests, [])] if len(nests) > 1 else [])
    return [interchanged_order(program, g) for g in groups]


def _broadcasts_to_sbuf(program: Program) -> tuple:
    """Move the one-partition broadcasts the neuronxcc dialect keeps in PSUM (``broadcast_to`` as a Tensor
    Engine matmul, ``nki.compat.language.partition_broadcast``; ``program.meta["psum_broadcasts"]``) to SBUF,
    as the compiler copies a matmul result out when PSUM cannot hold it; returns their names (the list is
    emptied). The copy's own cost is not charged; readers then pay SBUF rates."""
    names = tuple(program.meta.pop("psum_broadcasts", ()))
    for name in names:
        program.tensors[name].buffer = "sbuf"
    return names


MAX_INTERCHANGES = 8   # source-level loop nests tried one at a time


def allocate_in_demand_order(program: Program, target, allocate):
    """``allocate(program, target)``; when the tiles do not fit (sbuf-capacity / psum-capacity) and the
    Program has no directly placed tensors, retry once with its instructions in ``demand_order``. Raises
    the original error (the Program unchanged) when that does not fit either."""
    from nkihub.simulator.errors import KernelRuleError
    try:
        return allocate(program, target)
    except KernelRuleError as exc:
        moved = _broadcasts_to_sbuf(program) if exc.rule == "psum-capacity" else ()
        if moved:
            try:
                return allocate_in_demand_order(program, target, allocate)
            except KernelRuleError:
                for name in moved:
                    program.tensors[name].buffer = "psum"
                program.meta["psum_broadcasts"] = list(moved)
        if exc.rule not in ("sbuf-capacity", "psum-capacity") or \
                any(getattr(s, "pinned", False) for s in program.tensors.values()):
            raise
        original = program.instructions
        attempts = [("demand", None)] + [("affine interchange", o) for o in affine_interchanges(program)]
        for how, base in attempts:
            program.instructions = original if base is None else [original[i] for i in base]
            order = demand_order(program)
            if order is None and base is None:
                continue
            if order is not None:
                program.instructions = [program.instructions[i] for i in order]
            try:
                result = allocate(program, target)
            except KernelRuleError:
                continue
            program.meta["instruction_order"] = how
            return result
        program.instructions = original
        raise exc from None
