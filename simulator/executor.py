"""The numpy executor: runs a Program instruction by instruction with the hardware's numerics.

Every tensor is a flat numpy buffer of its dtype; new buffers start as NaN (integers at their maximum),
so reading memory nothing wrote shows up. Operands are strided views of those buffers. The plan of
views is built once per Program and replayed on every call.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from simulator.errors import NkiError, SimulationError
from simulator.isa import ExecContext, opdef
from simulator.program import Program
from simulator.targets import get_target


def _fill_value(dtype: np.dtype):
    if dtype.kind == "f" or dtype.name.startswith(("bfloat", "float")):
        return np.nan
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


class Executor:
    """Runs one Program. Build once, call :meth:`run` many times (thread-safe)."""

    def __init__(self, program: Program, target=None):
        self.program = program
        self.target = get_target(target or program.meta.get("target"))
        names = list(program.tensors)
        self._index = {n: i for i, n in enumerate(names)}
        self._specs = [program.tensors[n] for n in names]
        self._dtypes = [s.np_dtype for s in self._specs]
        self._plan = []
        for ins in program.instructions:
            row = opdef(ins.opcode)
            self._plan.append((row.execute, ins, self._views_of(ins.src), self._views_of(ins.dst)))

    def _views_of(self, aps: dict):
        out = []
        for role, ap in aps.items():
            i = self._index[ap.tensor]
            item = self._dtypes[i].itemsize
            out.append((role, i, ap.offset, ap.shape, tuple(s * item for s, _ in ap.dims)))
        return tuple(out)

    def _buffers(self, inputs) -> list[np.ndarray]:
        bufs = []
        prog = self.program
        by_name = dict(zip(prog.inputs, inputs))
        for spec, dt in zip(self._specs, self._dtypes):
            if spec.kind == "input":
                arr = np.asarray(by_name[spec.name])
                if tuple(arr.shape) != tuple(spec.shape):
                    raise ValueError(f"input '{spec.name}' has shape {tuple(arr.shape)}, the program was "
                                     f"compiled for {tuple(spec.shape)}")
                bufs.append(np.ascontiguousarray(arr, dtype=dt).reshape(-1))
            elif spec.kind == "constant":
                bufs.append(np.frombuffer(spec.data, dtype=dt).copy())
            else:
                bufs.append(np.full(spec.size, _fill_value(dt), dtype=dt))
        return bufs

    def run(self, inputs, *, echo_prints: bool = True, ctx: ExecContext | None = None) -> list[np.ndarray]:
        """Run with ``inputs`` (arrays in the Program's input order); return the outputs as numpy arrays
        of their declared shapes and dtypes."""
        if len(inputs) != len(self.program.inputs):
            raise ValueError(f"{self.program.name} takes {len(self.program.inputs)} tensor inputs, got "
                             f"{len(inputs)}")
        ctx = ctx or ExecContext(self.target, echo=echo_prints)
        bufs = self._buffers(inputs)
        for execute, ins, srcs, dsts in self._plan:
            src = {r: as_strided(bufs[i][o:], shape, strides, writeable=False) for r, i, o, shape, strides in srcs}
            dst = {r: as_strided(bufs[i][o:], shape, strides) for r, i, o, shape, strides in dsts}
            try:
                execute(ins, src, dst, ctx)
            except NkiError:
                raise
            except Exception as exc:  # a simulator defect or an unchecked rule: say where
                raise SimulationError(f"{ins.opcode} failed in the simulator: {exc}", loc=ins.loc) from exc
        self.last_context = ctx
        return [bufs[self._index[n]].reshape(self.program.tensors[n].shape).copy() for n in self.program.outputs]


def run_program(program: Program, inputs, target=None) -> list[np.ndarray]:
    """Run a Program once (see :class:`Executor` to run it many times)."""
    return Executor(program, target).run(inputs)
