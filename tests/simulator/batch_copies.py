"""Copies of a one-instruction Program laid out so the fast engine runs them as one batched step: what
the op tests use to check every row of the instruction table stacked (``simulator.batching``)."""
from __future__ import annotations

import math
from unittest import mock

import numpy as np

from nkihub.simulator import dataflow
from nkihub.simulator.program import AccessPattern, Instruction, Program, TensorSpec


def _row_major(dims_shape, stride0: int, offset: int, tensor: str) -> AccessPattern:
    part, *free = dims_shape
    inner = AccessPattern.row_major(tensor, free or (1,))
    dims = ((stride0, part),) + (inner.dims if free else ())
    return AccessPattern(tensor, offset, dims)


def staged_copies(prog: Program, inputs: list, k: int, col0: int = 1, gap: int = 3):
    """``k`` copies of ``prog``'s one instruction, each reading its sources from and writing its
    destinations to internal tiles (copied in from and out to the host tensors with dma_copy), so its
    operands live in the fast engine's renamed storage. A staged operand of shape [P, f...] sits at
    column ``col0`` of a tile ``col0 + prod(f) + gap`` wide (``gap`` > 0: partitions not back to back).
    Host tensors get a leading axis of k; returns (program, inputs)."""
    (ins,) = prog.instructions
    rep = Program(f"{prog.name}_x{k}")
    for spec in prog.tensors.values():
        rep.add_tensor(TensorSpec(spec.name, (k, *spec.shape), spec.dtype, spec.buffer, spec.kind))
    rep.inputs, rep.outputs = list(prog.inputs), list(prog.outputs)

    def host(ap: AccessPattern, j: int) -> AccessPattern:
        return AccessPattern.row_major(ap.tensor, ap.shape, j * prog.tensors[ap.tensor].size)

    def stage(ap: AccessPattern, name: str) -> AccessPattern:
        spec = prog.tensors[ap.tensor]
        width = col0 + math.prod(ap.shape[1:]) + gap
        rep.add_tensor(TensorSpec(name, (ap.shape[0], width), spec.dtype, spec.buffer, "internal"))
        return _row_major(ap.shape, width, col0, name)

    copy = lambda dst, src: Instruction("dma_copy", "dma", {"dst": dst}, {"src": src}, {})  # noqa: E731
    for j in range(k):
        src = {r: stage(ap, f"stage{j}_src_{r}") for r, ap in ins.src.items()}
        dst = {r: stage(ap, f"stage{j}_dst_{r}") for r, ap in ins.dst.items()}
        for r, ap in ins.src.items():
            rep.instructions.append(copy(src[r], host(ap, j)))
        for r, ap in ins.dst.items():
            if prog.tensors[ap.tensor].kind == "input":     # a destination with initial contents
                rep.instructions.append(copy(dst[r], host(ap, j)))
        rep.instructions.append(Instruction(ins.opcode, ins.engine, dst, src, ins.attrs))
        for r, ap in ins.dst.items():
            rep.instructions.append(copy(host(ap, j), dst[r]))
    return rep, [np.ascontiguousarray(np.broadcast_to(np.asarray(a), (k, *np.shape(a)))) for a in inputs]


def folding(on: bool):
    """A context in which batched plans fold copies (``simulator.dataflow.FOLD_COPIES``) or keep them all:
    kept, the staging copies put the staged instruction's operands in renamed storage; folded, it reads
    the host tensors in place (and a staged copy with equal dtypes is itself folded away)."""
    return mock.patch.object(dataflow, "FOLD_COPIES", on)


def staged(rep: Program) -> list:
    """The copies of the staged instruction in ``rep`` (``staged_copies``): the instructions reading and
    writing staging tiles only."""
    return [i for i, ins in enumerate(rep.instructions)
            if all(ap.tensor.startswith("stage") for ap in (*ins.src.values(), *ins.dst.values()))]
