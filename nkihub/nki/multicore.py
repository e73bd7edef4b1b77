"""Several cores in one Program: the program instances of a launch grid (the logical cores of an SPMD
launch, e.g. ``kernel[nl.nc(2)]`` on trn2/trn3, which share HBM) and, with :func:`run_ranks`, several
ranks (kernel invocations with their own inputs and outputs, as collectives run them).

Each instance is traced in turn. Where its code reaches a synchronisation point (a collective, a core
barrier, a sendrecv) the builder records a :class:`Sync` instead of an instruction. :func:`merge` then
interleaves the instances' instruction streams at those points: every instance runs up to its next point
(their instructions taken in turn, as cores running side by side progress together), and when all the
members of a point are there, one instruction carrying every member's operands stands for it. So data a
core writes before a barrier or a collective is what the others read after it, as on the hardware, and the
dataflow checks and the cost model see one ordered Program.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from nkihub.nki import tracing
from nkihub.simulator.errors import KernelRuleError, NkiError, SourceLoc
from nkihub.simulator.program import Instruction
from nkihub.simulator.validate import check_instruction


@dataclass
class Sync:
    """One instance's part in a synchronisation point: ``members`` are the instance indices taking part
    (in participant order); events merge when every member waits on an event with the same ``key``.
    ``dst``/``src`` map roles to this participant's access patterns."""

    opcode: str
    key: tuple
    members: tuple
    dst: dict = field(default_factory=dict)
    src: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    engine: str = "dma"
    loc: SourceLoc | None = None
    combine: object = None      # optional: the merged attrs from every member's event (in member order)


def participant_role(i: int, role: str) -> str:
    """The role of participant ``i``'s operand ``role`` in a merged instruction (``p1_src0``)."""
    return f"p{i}_{role}"


def instance_count(b: "tracing.Builder") -> int:
    """Program instances per rank of the launch being traced."""
    return math.prod(b.grid) if b.grid else 1


def instance_index(b: "tracing.Builder", rank: int, program_ids: tuple) -> int:
    """The index (trace order) of the instance of ``rank`` with ``program_ids``."""
    flat = 0
    for g, i in zip(b.grid, program_ids):
        flat = flat * g + i
    return rank * instance_count(b) + flat


def _merged(events: list, program) -> Instruction:
    first = events[0][1]
    dst, src = {}, {}
    for i, (_, ev) in enumerate(events):
        dst.update({participant_role(i, r): ap for r, ap in ev.dst.items()})
        src.update({participant_role(i, r): ap for r, ap in ev.src.items()})
    attrs = dict(first.attrs, n=len(events))
    if first.combine is not None:
        attrs.update(first.combine([ev for _, ev in events]))
    return Instruction(first.opcode, first.engine, dst, src, attrs, first.loc, ())


def merge(b: "tracing.Builder") -> None:
    """Interleave the traced instances of ``b`` at their synchronisation points (see the module doc)."""
    instrs = b.program.instructions
    starts = [start for _, _, start in b.instances]
    ends = starts[1:] + [len(instrs)]
    queues: list[list] = [[] for _ in b.instances]
    for inst, pos, ev in b.syncs:
        queues[inst].append((pos, ev))
    cursor, out = list(starts), []
    while True:
        # Between synchronisation points the cores run at once: their instructions are interleaved in
        # step (round robin), so one core's early writes (zeroing a shared output) come before another
        # core's late ones, as when two cores run the same code side by side.
        runs = []
        for i, q in enumerate(queues):
            stop = q[0][0] if q else ends[i]
            runs.append(instrs[cursor[i]:stop])
            cursor[i] = stop
        for step in itertools.zip_longest(*runs):
            out.extend(ins for ins in step if ins is not None)
        waiting = [i for i, q in enumerate(queues) if q]
        if not waiting:
            break
        ready = False
        def blocked(m, key) -> bool:
            # Waiting at ``key`` with everything before it emitted (not an event later in its stream).
            return bool(queues[m]) and queues[m][0][0] == cursor[m] and queues[m][0][1].key == key

        for i in waiting:
            if not queues[i]:
                continue   # merged earlier in this pass
            ev = queues[i][0][1]
            if blocked(i, ev.key) and all(blocked(m, ev.key) for m in ev.members):
                events = [(m, queues[m].pop(0)[1]) for m in ev.members]
                ins = _merged(events, b.program)
                check_instruction(ins, b.program, b.target)
                out.append(ins)
                ready = True
        if not ready:
            raise _deadlock(queues, waiting)
    b.program.instructions = out


def _deadlock(queues, waiting) -> KernelRuleError:
    i = waiting[0]
    ev = queues[i][0][1]
    missing = [m for m in ev.members if not queues[m] or queues[m][0][1].key != ev.key]
    other = next((queues[m][0][1] for m in missing if queues[m]), None)
    why = (f"instance {missing[0]} waits at {other.opcode} ({other.loc})" if other is not None
           else f"instance {missing[0]} finished without reaching it")
    return KernelRuleError("collective-mismatch", f"{ev.opcode}: instance {i} waits for instances "
                           f"{list(ev.members)} but {why}; every member must reach the same collectives, "
                           "barriers and sendrecvs in the same order", loc=ev.loc)


def run_ranks(kernel, rank_args: list, *, target=None) -> list:
    """Run ``kernel`` as ``len(rank_args)`` ranks, each with its own arguments (a dict of keyword
    arguments, or a tuple of positional ones), in one Program on the simulator, so ``nki.collectives``
    calls exchange data between them. Returns each rank's result (numpy arrays, as a call would)."""
    from nkihub.nki.arrays import is_array, to_numpy
    from nkihub.nki.jit import CompiledKernel, _flat, _signature_key
    from nkihub.nki.runtime import NeedsRuntime
    from nkihub.simulator.targets import get_target
    tgt = get_target(target or kernel.options.get("platform_target"))
    bounds = [kernel._bind(*((a, {}) if isinstance(a, tuple) else ((), a))) for a in rank_args]
    key = (tgt.name, kernel.grid, "ranks", tuple(_signature_key(bd) for bd in bounds))
    try:
        entry = kernel._cache.get(key)
        if entry is None:
            try:
                entry = kernel._cache[key] = CompiledKernel(kernel._trace(bounds[0], tgt, ranks=bounds), tgt)
            except NeedsRuntime as exc:
                raise KernelRuleError("dynamic-control-flow", f"{exc}; registers in Python control flow "
                                      "are not supported in multi-rank launches") from None
        arrays = [to_numpy(v) for bd in bounds for _, v in _flat(bd) if is_array(v)]
        outs = entry.executor.run(arrays)
    except NkiError as exc:
        raise exc.with_traceback(None) from None
    per = len(outs) // len(bounds)
    kind = entry.program.meta.get("returns")
    results = [outs[r * per:(r + 1) * per] for r in range(len(bounds))]
    return [None if kind == "none" else res[0] if kind == "single" else tuple(res) for res in results]


__all__ = ["Sync", "instance_index", "merge", "participant_role", "run_ranks"]
