"""Validation of a Program for a target: every instruction's operand rules, then a dataflow walk that
finds reads of memory nothing wrote, writes to constants, outputs left unwritten, and loop-carried
dependencies inside ``affine_range`` (associative accumulations excepted: ``EXEMPT_TEXT``). Inputs may be
written: a kernel writes output tensors its caller passes in (they start with the caller's data).
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nkihub.simulator.errors import KernelRuleError
from nkihub.simulator.isa import ACCUMULATE, ELEMENTWISE, opdef
from nkihub.simulator.isa.base import dst_reads
from nkihub.simulator.isa.alu import ASSOCIATIVE
from nkihub.simulator.program import AccessPattern, Instruction, Program
from nkihub.simulator.rules import fail
from nkihub.simulator.taint import Taints

HOST = -2        # stamp of elements the host wrote (inputs, constants)
UNWRITTEN = -1   # stamp of elements nothing wrote yet


def check_instruction(ins: Instruction, program: Program, target) -> None:
    """Run the operand rules of one instruction (raises ``KernelRuleError``)."""
    row = opdef(ins.opcode)
    if ins.engine not in row.engines:
        raise KernelRuleError("engine", f"{ins.opcode} cannot run on the {ins.engine} engine "
                              f"(it runs on: {', '.join(sorted(row.engines))})", loc=ins.loc)
    for rule in row.rules:
        rule(ins, program, target)


def _view(stamps: np.ndarray, ap: AccessPattern, ratio: int = 1) -> np.ndarray:
    """The stamps of an access pattern's elements; with ``ratio`` > 1 (a tensor sharing storage with
    aliases of smaller elements) each element is ``ratio`` stamp units, on a trailing axis."""
    item = stamps.itemsize
    if ratio == 1:
        return as_strided(stamps[ap.offset:], shape=ap.shape, strides=tuple(s * item for s, _ in ap.dims),
                          writeable=True)
    return as_strided(stamps[ap.offset * ratio:], shape=ap.shape + (ratio,),
                      strides=tuple(s * ratio * item for s, _ in ap.dims) + (item,), writeable=True)


def _families(program: Program) -> dict[str, tuple[str, int]]:
    """tensor -> (root, stamp units per element): a root and its aliases share stamps in units of their
    smallest common element size, so a write through one is seen by reads through the others."""
    unit: dict[str, int] = {}
    for name, spec in program.tensors.items():
        root = program.root(name).name
        unit[root] = math.gcd(unit.get(root, 0), spec.np_dtype.itemsize)
    return {name: (program.root(name).name, spec.np_dtype.itemsize // unit[program.root(name).name])
            for name, spec in program.tensors.items()}


def validate(program: Program, target, *, rules: bool = True) -> None:
    """Check every rule; raise the first ``KernelRuleError`` found, pointing at the kernel line.

    ``rules=False`` skips the per-instruction operand rules (already checked at emit time for the same
    target) and runs only the dataflow checks.
    """
    if rules:
        for ins in program.instructions:
            check_instruction(ins, program, target)
    _dataflow(program)


# The operators an in-place update may combine its running value with and stay an associative reduction
# (AWS's affine_range page: "associative reductions are not considered loop carried dependencies", its
# example being nc_matmul accumulation into one buffer). Stated once: the error message and
# docs/simulator.md quote this set.
REDUCTION_OPS = ASSOCIATIVE

EXEMPT_TEXT = ("associative accumulations are exempt: nc_matmul accumulating into PSUM, and an in-place "
               "elementwise update t = t <op> x whose every operator on t is the same one of "
               + ", ".join(sorted(REDUCTION_OPS)))


def _chain_ops(ins: Instruction, role: str) -> tuple | None:
    """The operators applied to operand ``role`` on its way to the destination, in order, for the
    elementwise rows that are a chain of binary operators; None for other rows (never a reduction)."""
    a = ins.attrs
    if ins.opcode == "tensor_tensor":
        return (a.get("op"),)
    if ins.opcode in ("tensor_scalar", "tensor_scalar_reduce") and role == "data":
        return tuple(op for op in (a.get("op0"), a.get("op1")) if op is not None)
    if ins.opcode == "scalar_tensor_tensor":
        return (a.get("op0"), a.get("op1")) if role == "data" else (a.get("op1"),) if role == "operand1" else None
    return None


def _in_place_reduction(ins: Instruction, role: str, ap: AccessPattern) -> bool:
    """``t = t + x`` in an affine_range: an elementwise instruction reading exactly the view it writes, that
    combines it with the other operands by one associative operator throughout (``t = (t + a) + b``,
    not ``t = t * 0.5 + b``), is a reduction, not a loop-carried dependency (see ``REDUCTION_OPS``)."""
    if role in ins.dst or ap not in ins.dst.values() or ELEMENTWISE not in opdef(ins.opcode).categories:
        return False
    ops = _chain_ops(ins, role)
    return bool(ops) and len(set(ops)) == 1 and ops[0] in REDUCTION_OPS


def _distinct(ap: AccessPattern) -> bool:
    """True when no two elements of the access pattern are the same memory element."""
    span = 1
    for stride, size in sorted(ap.dims, key=lambda d: abs(d[0])):
        if size <= 1:
            continue
        if abs(stride) < span:
            return False
        span += abs(stride) * (size - 1)
    return True


def _last_uses(program: Program, fam: dict) -> dict[str, int]:
    last: dict[str, int] = {}
    for idx, ins in enumerate(program.instructions):
        for ap in (*ins.src.values(), *ins.dst.values()):
            last[fam[ap.tensor][0]] = idx
    return last


def _dataflow(program: Program) -> None:
    # Inputs and constants are initialised and never written by the kernel (checked below). Stamps of
    # the other tensors are made on first touch and dropped after their last use, so memory follows the
    # live set rather than every tile a long kernel ever made.
    #
    # Reading memory nothing wrote only matters when the result reaches memory the caller sees
    # (simulator.taint).
    fam = _families(program)
    visible = {program.root(n).name for n in program.outputs} | \
        {n for n in program.tensors if program.tensors[n].kind == "input"}
    taint = Taints(program, visible, lambda arr, ap: _view(arr, ap, fam[ap.tensor][1]))
    tracked = {n for n in program.tensors if program.root(n).kind not in ("input", "constant")}
    keep = set(program.outputs)
    last_use = _last_uses(program, fam)
    stamps: dict[str, np.ndarray] = {}
    # Shortcuts that keep the checks exact: how many elements of a tensor nothing wrote yet (None once a
    # write with overlapping elements makes the count unknown), and the range of writer indices seen.
    unwritten: dict[str, int | None] = {}
    writers: dict[str, tuple[int, int]] = {}

    def stamps_of(name: str) -> np.ndarray:
        # Keyed by the storage's root: ``name`` may be an alias of it.
        root, ratio = fam[name]
        st = stamps.get(root)
        if st is None:
            n = program.tensors[root].size * (program.tensors[root].np_dtype.itemsize // (
                program.tensors[name].np_dtype.itemsize // ratio))
            st = stamps[root] = np.full(n, UNWRITTEN, dtype=np.int32)
            unwritten.setdefault(root, st.size)
        return st

    def view_of(ap: AccessPattern) -> np.ndarray:
        return _view(stamps_of(ap.tensor), ap, fam[ap.tensor][1])

    def count_unwritten(view: np.ndarray, ap: AccessPattern) -> int:
        hit = view == UNWRITTEN
        return int(np.count_nonzero(hit.any(axis=-1) if fam[ap.tensor][1] > 1 else hit))

    affine = {lid for lid, lp in program.loops.items() if lp.kind == "affine"}
    iter_start: dict[tuple[int, int], int] = {}
    loop_start: dict[int, int] = {}
    for idx, ins in enumerate(program.instructions):
        for lid, it in ins.loops:
            iter_start.setdefault((lid, it), idx)
            loop_start.setdefault(lid, idx)
        row = opdef(ins.opcode)
        reads = list(ins.src.items())
        read_back = dst_reads(row, ins)
        accumulating = bool(read_back)
        reads += [(role, ins.dst[role]) for role in read_back]
        read_taints = []
        for role, ap in reads:
            if ap.tensor not in tracked or role in row.dynamic_reads:
                continue  # which elements a run-time-addressed operand reads is unknown here
            view = view_of(ap)
            root = fam[ap.tensor][0]
            exempt_carry = (accumulating and role in ins.dst and ACCUMULATE in row.categories) or \
                _in_place_reduction(ins, role, ap)
            # An accumulating destination is read too: accumulating onto memory nothing wrote would add
            # whatever the buffer held (NaN here, stale data on the hardware).
            missing = count_unwritten(view, ap) if unwritten.get(root) != 0 else 0
            if missing or root in taint.arrays:
                read_taints.append((role, ap, taint.read(idx, role, ap, root, view == UNWRITTEN, missing)))
            if exempt_carry:
                continue
            first_w, last_w = writers.get(root, (idx, -1))
            for lid, it in ins.loops:
                if lid not in affine or it == 0:
                    continue
                lo, hi = loop_start[lid], iter_start[(lid, it)]
                if last_w < lo or first_w >= hi:
                    continue  # no write of this tensor falls in an earlier iteration of this loop
                carried = view[(view >= lo) & (view < hi)]
                if carried.size:
                    writer = program.instructions[int(carried.max())]
                    loop = program.loops[lid]
                    where = f" (written at {writer.loc})" if writer.loc else ""
                    at = f" at {loop.loc}" if loop.loc else ""
                    raise fail("loop-carried-dependency",
                               f"iteration {it} of the affine_range{at} reads {program.tensors[ap.tensor].label} "
                               f"written by an earlier iteration{where}; affine_range iterations must be "
                               "independent: use nl.sequential_range for a loop-carried value (only "
                               f"{EXEMPT_TEXT})", ins, program, role, ap)
        for role, ap in ins.dst.items():
            spec = program.root(ap.tensor)
            root = spec.name
            if spec.kind == "constant":
                raise fail("write-to-constant", f"writes constant {program.tensors[ap.tensor].label}", ins, program, role, ap)
            view = view_of(ap)
            taint.write(ins, row.categories, ap, root, stamps_of(ap.tensor).size, read_taints, fam[ap.tensor][1],
                        row.taint)
            left = unwritten.get(root)
            if left:
                unwritten[root] = left - int(np.count_nonzero(view == UNWRITTEN)) if _distinct(ap) else None
            view[...] = idx
            first_w, _ = writers.get(root, (idx, idx))
            writers[root] = (first_w, idx)
        for ap in (*ins.src.values(), *ins.dst.values()):
            root = fam[ap.tensor][0]
            if last_use[root] == idx and root not in keep:
                taint.check(root)
                stamps.pop(root, None)
                taint.arrays.pop(root, None)
    for root in list(taint.arrays):
        taint.check(root)
    for name in program.outputs:
        if name not in tracked:
            continue
        spec = program.tensors[name]
        missing = count_unwritten(view_of(AccessPattern.row_major(name, spec.shape)),
                                  AccessPattern.row_major(name, spec.shape))
        if missing:
            raise KernelRuleError("output-not-written", f"output {spec.label} has {missing} of {spec.size} "
                                  "elements that the kernel never writes", operand=name, shape=spec.shape,
                                  dtype=spec.dtype, buffer=spec.buffer, loc=spec.loc)
