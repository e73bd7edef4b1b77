"""The fast engine: a Program compiled once into ready-to-run steps, replayed on the simulator's lanes.

``Replay`` has the interface of the reference ``executor.Executor`` and gives the same bits. What it does
differently, measured on the library kernels (see docs/simulator.md):

- **Bound once.** A workspace holds a buffer for every tensor, inputs and outputs included (inputs are
  copied in, outputs copied out), so every operand view is built once. Each instruction becomes a step:
  its row's ``bind`` (``simulator.isa.fast``) resolves views, broadcasts, fp32 work arrays and ALU
  functions at bind time; a row without a bind runs its ``execute`` on the bound views.
- **Fast exact casts** (``simulator.convert``) and one ``np.errstate`` per run instead of one per call.
- **Batched** (from the second call, ``simulator.batching``): independent same-shaped instructions
  run as one stacked operation, split over two lanes (``simulator.threads``).

``executor_for`` picks the engine named by ``NKIHUB_SIM_ENGINE`` (``simulator.config``).
"""
from __future__ import annotations

import threading

import numpy as np

from simulator import config
from simulator.errors import NkiError, SimulationError
from simulator.executor import Executor, blas_pinned, fill_value, strided
from simulator.isa import ExecContext, opdef
from simulator.isa.fast import NoBind, Scratch
from simulator.program import Program
from simulator.targets import get_target
from simulator.threads import run_on_lanes


def generic_step(execute, ins, src: dict, dst: dict):
    """A step running a row's ``execute`` on stacked operands, one instruction at a time."""
    k = next(iter((*dst.values(), *src.values()))).shape[0] if (src or dst) else 1
    if k == 1:
        s1 = {r: v[0] for r, v in src.items()}
        d1 = {r: v[0] for r, v in dst.items()}
        return lambda ctx: execute(ins, s1, d1, ctx)
    per = [({r: v[i] for r, v in src.items()}, {r: v[i] for r, v in dst.items()}) for i in range(k)]

    def step(ctx):
        for s, d in per:
            execute(ins, s, d, ctx)
    return step


def bind_step(ins, src: dict, dst: dict, scratch: Scratch):
    """The step of one instruction (or of ``k`` stacked ones): its row's bind, else its execute."""
    row = opdef(ins.opcode)
    step = None
    if row.bind is not None:
        try:
            step = row.bind(ins, src, dst, scratch)
        except NoBind:
            step = None
    return step or generic_step(row.execute, ins, src, dst)


def run_steps(steps, instructions, ctx) -> None:
    """Run bound steps in order; an exception that is not a kernel error names the instruction."""
    i = 0
    try:
        for i, step in enumerate(steps):
            step(ctx)
    except NkiError:
        raise
    except Exception as exc:  # a simulator defect or an unchecked rule: say where
        ins = instructions[i]
        raise SimulationError(f"{ins.opcode} failed in the simulator: {exc}", loc=ins.loc) from exc


class _Workspace:
    """Buffers of every tensor of one Program and the steps bound to them."""

    def __init__(self, rp: "Replay"):
        self.bufs = [np.full(spec.size, fill, dtype=dt) for spec, fill, dt in
                     zip(rp._specs, rp._fills, rp._dtypes)]
        self._load_constants(rp)
        self.scratch = Scratch()
        self.steps = []
        for ins in rp.program.instructions:
            src = {r: self._view(rp, ap)[None] for r, ap in ins.src.items()}
            dst = {r: self._view(rp, ap)[None] for r, ap in ins.dst.items()}
            self.steps.append(bind_step(ins, src, dst, self.scratch))

    def _view(self, rp: "Replay", ap) -> np.ndarray:
        i = rp._index[ap.tensor]
        item = rp._dtypes[i].itemsize
        return strided(self.bufs[i], ap.offset, ap.shape, tuple(s * item for s, _ in ap.dims))

    def _load_constants(self, rp: "Replay") -> None:
        for i, spec in enumerate(rp._specs):
            if spec.kind == "constant":
                self.bufs[i][...] = np.frombuffer(spec.data, dtype=rp._dtypes[i])

    def refill(self, rp: "Replay") -> None:
        for i, buf in enumerate(self.bufs):
            if rp._specs[i].kind != "input":
                buf.fill(rp._fills[i])
        self._load_constants(rp)

    def load(self, rp: "Replay", inputs) -> None:
        for i, arr in zip(rp._inputs, inputs):
            spec = rp._specs[i]
            arr = np.asarray(arr)
            if tuple(arr.shape) != tuple(spec.shape):
                raise ValueError(f"input '{spec.name}' has shape {tuple(arr.shape)}, the program was "
                                 f"compiled for {tuple(spec.shape)}")
            np.copyto(self.bufs[i].reshape(spec.shape), arr, casting="unsafe")

    def outputs(self, rp: "Replay") -> list[np.ndarray]:
        return [self.bufs[i].reshape(rp._specs[i].shape).copy() for i in rp._outputs]


class Replay:
    """Runs one Program on the fast engine. Build once, call :meth:`run` many times (thread-safe).

    ``checked``: the Program passed ``simulator.validate`` (no read of unwritten memory), so pooled
    buffers need no NaN refill between runs.
    """

    def __init__(self, program: Program, target=None, *, checked: bool = False):
        self.program = program
        self.target = get_target(target or program.meta.get("target"))
        self.checked = checked
        names = list(program.tensors)
        self._index = {n: i for i, n in enumerate(names)}
        self._specs = [program.tensors[n] for n in names]
        self._dtypes = [s.np_dtype for s in self._specs]
        self._fills = [fill_value(dt) for dt in self._dtypes]
        self._inputs = [self._index[n] for n in program.inputs]
        self._outputs = [self._index[n] for n in program.outputs]
        for ins in program.instructions:
            opdef(ins.opcode)   # an unknown opcode fails here, not in the middle of a run
        self._pool: list[_Workspace] = []
        self._lock = threading.Lock()

    def _take(self) -> _Workspace:
        with self._lock:
            ws = self._pool.pop() if self._pool else None
        if ws is None:
            return _Workspace(self)
        if not self.checked:
            ws.refill(self)
        return ws

    def run(self, inputs, *, echo_prints: bool = True, ctx: ExecContext | None = None) -> list[np.ndarray]:
        """Run with ``inputs`` (arrays in the Program's input order); return the outputs as numpy arrays
        of their declared shapes and dtypes."""
        if len(inputs) != len(self.program.inputs):
            raise ValueError(f"{self.program.name} takes {len(self.program.inputs)} tensor inputs, got "
                             f"{len(inputs)}")
        ctx = ctx or ExecContext(self.target, echo=echo_prints)
        ws = self._take()
        try:
            ws.load(self, inputs)
            instructions = self.program.instructions
            if config.fast_threads() == 0:
                with np.errstate(all="ignore"):
                    run_steps(ws.steps, instructions, ctx)
            else:
                with blas_pinned(1):
                    run_on_lanes([lambda: run_steps(ws.steps, instructions, ctx)])
            outs = ws.outputs(self)
        finally:
            with self._lock:
                self._pool.append(ws)
        self.last_context = ctx
        return outs


def executor_for(program: Program, target=None, *, checked: bool = False):
    """The engine ``NKIHUB_SIM_ENGINE`` selects for ``program``: a :class:`Replay` (``fast``, the
    default) or the reference :class:`~simulator.executor.Executor`; both have ``run(inputs)``."""
    if config.engine() == "reference":
        return Executor(program, target, checked=checked)
    return Replay(program, target, checked=checked)
