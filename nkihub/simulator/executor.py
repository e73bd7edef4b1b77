"""The numpy executor: runs a Program instruction by instruction with the hardware's numerics.

Every tensor is a flat numpy buffer of its dtype; new buffers start as NaN (integers at their maximum,
dtypes without NaN at their largest value), so reading memory nothing wrote shows up. Operands are
strided views of those buffers.

Speed: the views of internal tensors are bound once per workspace (a set of buffers) and workspaces are
pooled, so a replayed call builds views only for its inputs and outputs and touches no fresh pages.
A reused workspace is refilled with NaN before each run, unless the Program passed the validator's
dataflow checks (``checked=True``): then no instruction reads an element before the same run wrote it,
so the stale contents are never observed and the refill is skipped.
"""
from __future__ import annotations

import contextlib
import threading

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided

from nkihub.simulator import config
from nkihub.simulator.errors import SimulationError, is_kernel_error
from nkihub.simulator.isa import ExecContext, opdef
from nkihub.simulator.program import Program
from nkihub.simulator.targets import get_target


_pin_lock = threading.Lock()
_pin_depth = 0
_pin_limiter = None
_blas = None


def sim_threads() -> int:
    """BLAS threads while the reference executor runs a Program: ``NKIHUB_SIM_THREADS`` (read on each
    call), default 1; 0 leaves BLAS alone. The same variable sets the torch-op pinning of ``kernels``."""
    return config.sim_threads(1)


@contextlib.contextmanager
def blas_pinned(threads: int | None = None):
    """Keep numpy's BLAS on ``threads`` (default ``sim_threads()``) threads while a Program runs.

    The simulator's matmuls are tile-sized (one instruction is at most 128 x 128 x 512 on trn1/trn2):
    one BLAS thread is as fast as two, while BLAS threads spinning against torch's OpenMP threads or
    other processes made replays 5-10x slower when measured on a 2-core machine. Reference counted
    across Python threads (thread pools are process-wide): the first run in pins, the last one out
    restores. Needs threadpoolctl; without it BLAS keeps its thread count.
    """
    global _pin_depth, _pin_limiter, _blas
    n = sim_threads() if threads is None else threads
    if n <= 0:
        yield
        return
    with _pin_lock:
        if _blas is None:
            try:
                from threadpoolctl import ThreadpoolController
                _blas = ThreadpoolController().select(user_api="blas")
            except ImportError:
                _blas = False
        _pin_depth += 1
        if _pin_depth == 1 and _blas:
            _pin_limiter = _blas.limit(limits=n)
    try:
        yield
    finally:
        with _pin_lock:
            _pin_depth -= 1
            if _pin_depth == 0 and _pin_limiter is not None:
                limiter, _pin_limiter = _pin_limiter, None
                limiter.restore_original_limits()


def fill_value(dtype: np.dtype):
    """What a fresh buffer of ``dtype`` holds: NaN, else the largest value (integers, fp4)."""
    if dtype.kind == "b":
        return True
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    if np.isnan(np.array(np.nan, dtype=dtype).astype(np.float32)):
        return np.nan
    return ml_dtypes.finfo(dtype).max


def check_inputs(program: Program, inputs) -> None:
    """ValueError unless ``inputs`` holds one array per tensor input of ``program``."""
    if len(inputs) != len(program.inputs):
        raise ValueError(f"{program.name} takes {len(program.inputs)} tensor inputs, got {len(inputs)}")


def input_array(spec, value) -> np.ndarray:
    """``value`` as an array of input ``spec``'s shape (ValueError naming the input otherwise)."""
    arr = np.asarray(value)
    if tuple(arr.shape) != tuple(spec.shape):
        raise ValueError(f"input '{spec.name}' has shape {tuple(arr.shape)}, the program was "
                         f"compiled for {tuple(spec.shape)}")
    return arr


def strided(buf: np.ndarray, offset: int, shape, strides, writeable: bool = True) -> np.ndarray:
    """A strided view of a flat buffer. Built on an unsigned integer view and cast back, because
    ``as_strided`` goes through ``__array_interface__``, which loses some ml_dtypes (float8_e5m2 reads
    back as the unknown type '<f1')."""
    raw = buf.view(f"u{buf.dtype.itemsize}")
    return as_strided(raw[offset:], shape, strides, writeable=writeable).view(buf.dtype)


class _Workspace:
    """Buffers of the internal tensors of one Program and the operand views bound to them."""

    def __init__(self, ex: "Executor"):
        self.bufs = {i: np.full(ex._specs[i].size, ex._fills[i], dtype=ex._dtypes[i]) for i in ex._internal}
        ex._bind_aliases(self.bufs)
        self.plan = []
        for execute, ins, srcs, dsts in ex._ops:
            self.plan.append((execute, ins, self._bind(srcs, False), self._bind(dsts, True)))

    def _bind(self, operands, writeable):
        fixed, lazy = {}, []
        for op in operands:
            role, i, o, shape, strides = op
            if i in self.bufs:
                fixed[role] = strided(self.bufs[i], o, shape, strides, writeable)
            else:
                lazy.append(op)
        return fixed, tuple(lazy)

    def refill(self, ex: "Executor") -> None:
        for i, buf in self.bufs.items():
            if i not in ex._aliases:
                buf.fill(ex._fills[i])


def engine_tables(engine, program: Program, target, checked: bool) -> None:
    """What both engines (this one and ``simulator.replay.Replay``) set up for a Program: its tensors in
    order with their numpy dtypes and fill values, the indices of inputs and outputs, and of aliases
    (dtype reinterpretations, which view their root's buffer) to their roots."""
    engine.program = program
    engine.target = get_target(target or program.meta.get("target"))
    engine.checked = checked
    names = list(program.tensors)
    engine._index = {n: i for i, n in enumerate(names)}
    engine._specs = [program.tensors[n] for n in names]
    engine._dtypes = [s.np_dtype for s in engine._specs]
    engine._fills = [fill_value(dt) for dt in engine._dtypes]
    engine._inputs = [engine._index[n] for n in program.inputs]
    engine._outputs = [engine._index[n] for n in program.outputs]
    engine._aliases = {i: engine._index[program.root(s.name).name] for i, s in enumerate(engine._specs)
                       if s.alias_of is not None}


class Executor:
    """Runs one Program. Build once, call :meth:`run` many times (thread-safe).

    ``checked``: the Program passed ``simulator.validate`` (no read of unwritten memory), so pooled
    buffers need no NaN refill between runs.
    """

    def __init__(self, program: Program, target=None, *, checked: bool = False):
        engine_tables(self, program, target, checked)
        # Buffers only for the tensors instructions use: tracing leaves tiles behind that were written in
        # place of their destination (thousands in a long kernel), which would cost memory for nothing.
        used = {self._index[ap.tensor] for ins in program.instructions
                for ap in (*ins.dst.values(), *ins.src.values())}
        used |= {self._aliases[i] for i in used if i in self._aliases}
        self._internal = [i for i, s in enumerate(self._specs)
                          if s.kind not in ("input", "constant") and i not in self._outputs
                          and i not in self._aliases and i in used]
        self._ops = []
        written = set()
        for ins in program.instructions:
            row = opdef(ins.opcode)
            self._ops.append((row.execute, ins, self._operands(ins.src), self._operands(ins.dst)))
            written.update(self._index[ap.tensor] for ap in ins.dst.values())
        # Inputs are used in place (no copy) unless an unchecked Program writes one.
        self._copy_inputs = any(self._specs[i].kind in ("input", "constant") for i in written)
        self._pool: list[_Workspace] = []
        self._lock = threading.Lock()

    def _operands(self, aps: dict):
        out = []
        for role, ap in aps.items():
            i = self._index[ap.tensor]
            item = self._dtypes[i].itemsize
            out.append((role, i, ap.offset, ap.shape, tuple(s * item for s, _ in ap.dims)))
        return tuple(out)

    def _bind_aliases(self, bufs: dict) -> None:
        """Add the buffers of aliases whose root is in ``bufs``: the root's bytes seen as the alias dtype."""
        for i, root in self._aliases.items():
            if root in bufs:
                bufs[i] = bufs[root].view(self._dtypes[i])

    def _outer_buffers(self, inputs) -> dict[int, np.ndarray]:
        """Buffers of inputs, constants and outputs for one run (outputs fresh: they are returned)."""
        bufs = {}
        by_name = dict(zip(self.program.inputs, inputs))
        for i, (spec, dt) in enumerate(zip(self._specs, self._dtypes)):
            if spec.kind == "input":
                arr = input_array(spec, by_name[spec.name])
                flat = np.ascontiguousarray(arr, dtype=dt).reshape(-1)
                bufs[i] = flat.copy() if self._copy_inputs else flat
            elif spec.kind == "constant":
                bufs[i] = np.frombuffer(spec.data, dtype=dt).copy()
        for i in self._outputs:
            if i not in bufs:
                bufs[i] = np.full(self._specs[i].size, self._fills[i], dtype=self._dtypes[i])
        self._bind_aliases(bufs)
        return bufs

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
        check_inputs(self.program, inputs)
        ctx = ctx or ExecContext(self.target, echo=echo_prints)
        outer = self._outer_buffers(inputs)
        ws = self._take()
        try:
            with blas_pinned():
                self._execute(ws, outer, ctx)
        finally:
            with self._lock:
                self._pool.append(ws)
        self.last_context = ctx
        return [outer[i].reshape(self._specs[i].shape) for i in self._outputs]

    @staticmethod
    def _execute(ws: _Workspace, outer: dict, ctx: ExecContext) -> None:
        """Run every instruction of a workspace's plan, binding input/output views for this run."""
        for execute, ins, (src, src_lazy), (dst, dst_lazy) in ws.plan:
            if src_lazy:
                src = dict(src)
                for r, i, o, shape, strides in src_lazy:
                    src[r] = strided(outer[i], o, shape, strides, False)
            if dst_lazy:
                dst = dict(dst)
                for r, i, o, shape, strides in dst_lazy:
                    dst[r] = strided(outer[i], o, shape, strides)
            try:
                execute(ins, src, dst, ctx)
            except Exception as exc:  # a simulator defect or an unchecked rule: say where
                if is_kernel_error(exc):
                    raise
                raise SimulationError(f"{ins.opcode} failed in the simulator: {exc}", loc=ins.loc) from exc


def run_program(program: Program, inputs, target=None) -> list[np.ndarray]:
    """Run a Program once (see :class:`Executor` to run it many times)."""
    return Executor(program, target).run(inputs)
