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


def allocate_in_demand_order(program: Program, target, allocate):
    """``allocate(program, target)``; when the tiles do not fit (sbuf-capacity / psum-capacity) and the
    Program has no directly placed tensors, retry once with its instructions in ``demand_order``. Raises
    the original error (the Program unchanged) when that does not fit either."""
    from nkihub.simulator.errors import KernelRuleError
    try:
        return allocate(program, target)
    except KernelRuleError as exc:
        if exc.rule not in ("sbuf-capacity", "psum-capacity") or \
                any(getattr(s, "pinned", False) for s in program.tensors.values()):
            raise
        order = demand_order(program)
        if order is None:
            raise
        original = program.instructions
        program.instructions = [original[i] for i in order]
        try:
            result = allocate(program, target)
        except KernelRuleError:
            program.instructions = original
            raise exc from None
        program.meta["instruction_order"] = "demand"
        return result
