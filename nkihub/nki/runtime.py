"""Run-time values while a kernel is traced: registers in Python control flow (``while reg:``,
``nl.dynamic_range(reg)``, ``nl.fori_loop``/``nl.while_loop`` bounds and conditions).

A kernel normally traces without data. When its Python needs a value only the run can know (a register
loaded from a tensor), tracing raises :class:`NeedsRuntime`; ``nki.jit`` then traces the kernel again for
the call's actual inputs with an :class:`Eager` runner attached to the builder, which executes the
instructions traced so far whenever such a value is read. The Program that results is the path this data
takes (dynamic loops unrolled for their actual trip counts); it is marked data-dependent, so a call with
other data traces again, and it is neither replayed for other inputs nor written to the disk cache.
"""
from __future__ import annotations

import numpy as np

from nkihub.simulator.errors import SimulationError, is_kernel_error
from nkihub.simulator.executor import fill_value, strided
from nkihub.simulator.isa import ExecContext, opdef


class NeedsRuntime(Exception):
    """Raised while tracing without data when the kernel reads a run-time value (``what``)."""

    def __init__(self, what: str):
        super().__init__(f"{what} needs a value known only when the kernel runs")
        self.what = what


class Eager:
    """Executes a Program's instructions as they are traced, on the kernel's actual inputs (by tensor
    name), so trace-time code can read memory: :meth:`read` runs everything traced so far first."""

    def __init__(self, program, target, inputs: dict):
        self.program = program
        self.inputs = inputs
        self.bufs: dict[str, np.ndarray] = {}
        self.done = 0
        self.ctx = ExecContext(target, echo=False)

    def _buf(self, name: str) -> np.ndarray:
        buf = self.bufs.get(name)
        if buf is None:
            spec = self.program.tensors[name]
            if spec.alias_of is not None:
                buf = self._buf(self.program.root(name).name).view(spec.np_dtype)
            elif spec.kind == "input":
                buf = np.array(self.inputs[name], dtype=spec.np_dtype).reshape(-1)
            elif spec.kind == "constant":
                buf = np.frombuffer(spec.data, dtype=spec.np_dtype).copy()
            else:
                buf = np.full(spec.size, fill_value(spec.np_dtype), dtype=spec.np_dtype)
            self.bufs[name] = buf
        return buf

    def _views(self, aps: dict, writeable: bool) -> dict:
        out = {}
        for role, ap in aps.items():
            buf = self._buf(ap.tensor)
            out[role] = strided(buf, ap.offset, ap.shape, tuple(s * buf.itemsize for s, _ in ap.dims), writeable)
        return out

    def flush(self) -> None:
        """Execute the instructions traced since the last flush."""
        instructions = self.program.instructions
        while self.done < len(instructions):
            ins = instructions[self.done]
            self.done += 1
            try:
                opdef(ins.opcode).execute(ins, self._views(ins.src, False), self._views(ins.dst, True), self.ctx)
            except Exception as exc:  # a simulator defect or an unchecked rule: say where
                if is_kernel_error(exc):
                    raise
                raise SimulationError(f"{ins.opcode} failed in the simulator: {exc}", loc=ins.loc) from exc

    def read(self, tensor) -> np.ndarray:
        """The current contents of an ``NkiTensor`` view (after running everything traced so far)."""
        self.flush()
        return np.array(self._views({"t": tensor.to_ap()}, False)["t"])
