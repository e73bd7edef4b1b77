"""Tracing: the builder that records instructions into a Program while a kernel's Python runs.

The current builder is an explicit context (a ``ContextVar``), never a patched module. Each instruction
carries the kernel source line that made it, found by walking past this project's own frames.
"""
from __future__ import annotations

import contextlib
import functools
import contextvars
import linecache
import os
import sys
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nkihub.simulator.errors import KernelRuleError, SourceLoc
from nkihub.simulator.program import AccessPattern, Instruction, LoopInfo, Program, TensorSpec
from nkihub.simulator.validate import check_instruction

_ROOT = Path(__file__).resolve().parent.parent
_INTERNAL = tuple(str(_ROOT / pkg) + os.sep for pkg in ("nki", "simulator", "_toplevel"))
_current: contextvars.ContextVar["Builder | None"] = contextvars.ContextVar("nki_builder", default=None)


@functools.lru_cache(maxsize=None)
def _positions(code) -> tuple:
    return tuple(code.co_positions())


@functools.lru_cache(maxsize=1 << 16)
def _loc_at(code, filename: str, lasti: int, lineno: int) -> SourceLoc:
    # One SourceLoc per bytecode offset: an unrolled loop emits thousands of instructions from one line.
    # The file name is part of the key because equal code objects from different files compare equal.
    positions = _positions(code)
    idx = lasti // 2
    line, col, end_col = lineno, 0, None
    if 0 <= idx < len(positions):
        p_line, _, p_col, p_end = positions[idx]
        line, col, end_col = p_line or lineno, p_col or 0, p_end
    text = linecache.getline(filename, line).rstrip("\n")
    if end_col is not None and text and len(text) < end_col:
        end_col = None  # the expression spans lines: underline from the column to the line's end
    return SourceLoc(filename, line, col, end_col, text)


def caller_loc() -> SourceLoc | None:
    """The first frame outside nki/simulator (and the import machinery): the kernel line being traced."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL + ("<frozen importlib",)):
        frame = frame.f_back
    if frame is None:
        return None
    return _loc_at(frame.f_code, frame.f_code.co_filename, frame.f_lasti, frame.f_lineno)


def current() -> "Builder | None":
    """The builder of the kernel being traced, or None outside tracing."""
    return _current.get()


def require(what: str) -> "Builder":
    """The current builder; a clear error when called outside a kernel."""
    b = _current.get()
    if b is None:
        raise RuntimeError(f"{what} can only be used inside a kernel being traced (a function decorated "
                           "with @nki.jit, called with arrays)")
    return b


class _Marks:
    """One flag per element of a PSUM tile, kept as one value while every element has it (a long kernel
    makes thousands of tiles that are written whole: a flag array each held 0.5 GB for the matmul
    tutorial at 8192 x 4096 x 8192)."""

    __slots__ = ("size", "value", "array")

    def __init__(self, size: int):
        self.size, self.value, self.array = size, False, None

    def _covers(self, ap: AccessPattern) -> bool:
        if ap.size != self.size:
            return False
        span = 1
        for stride, n in sorted(ap.dims):
            if n > 1:
                if stride != span:
                    return False
                span *= n
        return ap.offset == 0

    def set(self, ap: AccessPattern, value: bool) -> None:
        if self._covers(ap):
            self.value, self.array = value, None
            return
        if self.array is None:
            self.array = np.full(self.size, self.value, dtype=bool)
        as_strided(self.array[ap.offset:], ap.shape, tuple(s for s, _ in ap.dims))[...] = value

    def any(self, ap: AccessPattern) -> bool:
        if self.array is None:
            return self.value and ap.size > 0
        return bool(as_strided(self.array[ap.offset:], ap.shape, tuple(s for s, _ in ap.dims),
                               writeable=False).any())


class Builder:
    """Records tensors, loops and instructions of one kernel trace into a ``Program``."""

    def __init__(self, name: str, target):
        self.program = Program(name, meta={"target": target.name})
        self.target = target
        self.loop_stack: list[tuple[int, int]] = []
        self._names: dict[str, int] = {}
        self._psum_by_matmul: dict[str, _Marks] = {}
        self._psum_written: dict[str, _Marks] = {}
        self._psum_zeroed: dict[str, np.ndarray] = {}   # PSUM element -> index in _zeroers, or -1
        self._zeroers: list[list] = []                   # [memset instruction, elements not yet overwritten]
        self.program_ids: tuple[int, ...] = ()
        self.grid: tuple[int, ...] = ()
        self.shared_outputs: list = []     # SPMD: shared_hbm tensors in creation order, reused per program
        self._shared_cursor = 0
        # Multi-core: each traced program instance (a logical core of a grid launch, of one rank) and the
        # synchronisation points its code reached (collectives, barriers); see nki.multicore.
        self.rank = 0                      # the rank (kernel invocation) being traced
        self.n_ranks = 1
        self.instances: list = []          # (rank, program ids, first instruction index)
        self.syncs: list = []              # (instance index, instruction index, nki.multicore.Sync)
        self.runtime = None                # nki.runtime.Eager when tracing with the call's data

    @contextlib.contextmanager
    def active(self):
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    def begin_instance(self, program_ids: tuple) -> None:
        """Start tracing the program instance ``program_ids`` of the current rank."""
        self.program_ids = program_ids
        self._shared_cursor = 0
        self.instances.append((self.rank, program_ids, len(self.program.instructions)))

    def sync(self, event) -> None:
        """Record that the instance being traced reaches synchronisation point ``event`` here."""
        self.syncs.append((len(self.instances) - 1, len(self.program.instructions), event))

    def runtime_read(self, tensor, what: str) -> np.ndarray:
        """The run-time contents of ``tensor`` (an NkiTensor view) for Python control flow; without the
        call's data this raises ``nki.runtime.NeedsRuntime`` (``nki.jit`` then traces with the data)."""
        if self.runtime is None:
            from nkihub.nki.runtime import NeedsRuntime
            raise NeedsRuntime(what)
        return self.runtime.read(tensor)

    def fresh_name(self, prefix: str) -> str:
        prefix = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in prefix) or "t"
        n = self._names.get(prefix, 0)
        self._names[prefix] = n + 1
        name = prefix if n == 0 else f"{prefix}_{n}"
        while name in self.program.tensors:
            n += 1
            self._names[prefix] = n + 1
            name = f"{prefix}_{n}"
        return name

    def new_tensor(self, shape, dtype: str, buffer: str, kind: str = "internal", name: str | None = None,
                   loc: SourceLoc | None = None, data: bytes | None = None) -> TensorSpec:
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise KernelRuleError("shape", f"negative dimension in shape {shape}", loc=loc or caller_loc())
        spec = TensorSpec(self.fresh_name(name or buffer), shape, dtype, buffer, kind,
                          loc or caller_loc(), None, data, core=max(0, len(self.instances) - 1))
        return self.program.add_tensor(spec)

    def new_loop(self, kind: str, trip_count: int, loc: SourceLoc | None) -> int:
        lid = len(self.program.loops)
        self.program.loops[lid] = LoopInfo(lid, kind, trip_count, loc)
        return lid

    def emit(self, opcode: str, engine: str, dst: dict[str, AccessPattern], src: dict[str, AccessPattern],
             attrs: dict | None = None) -> Instruction:
        """Append one instruction after checking its operand rules for the builder's target."""
        ins = Instruction(opcode, engine, dst, src, attrs or {}, caller_loc(), tuple(self.loop_stack))
        check_instruction(ins, self.program, self.target)
        self.program.instructions.append(ins)
        self._track_psum(ins)
        return ins

    def write_in_place(self, value: AccessPattern, dst: AccessPattern) -> bool:
        """``dst[...] = value`` where ``value`` is the whole fresh tile the last instruction just wrote and
        nothing has read: retarget that instruction to write ``dst`` itself, as the compiler does, instead
        of copying (a copy would cost a second engine pass the hardware never runs). Only when the result
        is the same: equal shapes, and equal dtypes or an fp32 temporary (the engines compute in fp32, so
        one rounding into ``dst`` equals rounding to fp32 then copying). True when done."""
        if not self.program.instructions or (self.runtime is not None and
                                              self.runtime.done >= len(self.program.instructions)):
            return False   # nothing to retarget, or it already ran (tracing with data)
        last = self.program.instructions[-1]
        spec, dspec = self.program.tensors[value.tensor], self.program.tensors[dst.tensor]
        roles = [r for r, ap in last.dst.items() if ap == value]
        if (len(roles) != 1 or spec.kind != "internal" or not spec.on_chip or not dspec.on_chip
                or value.shape != dst.shape or value != AccessPattern.row_major(spec.name, spec.shape)
                or any(ap.tensor == value.tensor for ap in (*last.src.values(),
                                                             *(a for r, a in last.dst.items() if r != roles[0])))
                or not (spec.dtype == dspec.dtype or (spec.dtype == "float32" and dspec.np_dtype.kind == "f"))):
            return False
        old = last.dst
        last.dst = {**old, roles[0]: dst}
        try:
            check_instruction(last, self.program, self.target)
        except KernelRuleError:
            last.dst = old
            return False
        self.forget_psum(value.tensor)
        self._track_psum(last)
        self.forget_psum(value.tensor)
        return True

    def forget_psum(self, name: str) -> None:
        """Drop the PSUM bookkeeping of a tile no instruction writes any more (its only writer was
        retargeted): a long kernel makes thousands of such temporaries."""
        self._psum_by_matmul.pop(name, None)
        self._psum_written.pop(name, None)

    # PSUM accumulation auto-detection (nc_matmul accumulate=None): the first matmul write to a PSUM
    # location overwrites; later matmul writes accumulate; any other write ends the group.
    def _marks(self, name: str, table: dict | None = None) -> "_Marks":
        table = self._psum_by_matmul if table is None else table
        marks = table.get(name)
        if marks is None:
            marks = table[name] = _Marks(self.program.tensors[name].size)
        return marks

    def _any(self, ap: AccessPattern, table: dict) -> bool:
        return self._marks(ap.tensor, table).any(ap)

    def forget_psum(self, name: str) -> None:
        """Drop the PSUM bookkeeping of a tile no instruction writes any more (a matmul's fresh result tile
        retargeted elsewhere): a kernel of many matmuls would otherwise hold two flags per element each."""
        for table in (self._psum_by_matmul, self._psum_written, self._psum_zeroed):
            table.pop(name, None)

    def psum_accumulating(self, ap: AccessPattern) -> bool:
        """True when a matmul wrote part of ``ap`` and nothing else wrote it since (an open group)."""
        from nkihub.nki import placement
        logical = placement.written(self, ap, by_matmul=True)   # direct allocation: per logical block
        return self._any(ap, self._psum_by_matmul) if logical is None else logical

    def psum_written(self, ap: AccessPattern) -> bool:
        """True when any instruction so far wrote part of PSUM view ``ap``."""
        from nkihub.nki import placement
        logical = placement.written(self, ap)
        return self._any(ap, self._psum_written) if logical is None else logical

    def _track_psum(self, ins: Instruction) -> None:
        from nkihub.nki import placement
        placement.note_writes(self, ins)
        for ap in ins.src.values():
            if isinstance(ap, AccessPattern) and ap.tensor in self._psum_zeroed:
                self._zero_marks(ap)[...] = -1   # the zeros were read: that memset must run
        for ap in ins.dst.values():
            if self.program.tensors[ap.tensor].buffer != "psum":
                continue
            self._marks(ap.tensor).set(ap, ins.opcode in ("nc_matmul", "nc_matmul_mx"))
            self._marks(ap.tensor, self._psum_written).set(ap, True)
            self._fold_zero_init(ins, ap)

    # PSUM zero-initialisation folded into the matmuls: ``nl.zeros(..., buffer=nl.psum)`` then matmuls into
    # it compiles to matmuls whose first write to each location overwrites (the nc_matmul reference: the
    # first matmul to a PSUM location must overwrite; accumulating onto a memset is undefined on v2/v3), so
    # the memset never runs. A memset is dropped once matmuls have overwritten every element it zeroed
    # before anything read them; the values are the same (a product added to zeros is the product).
    def _zero_marks(self, ap: AccessPattern) -> np.ndarray:
        from numpy.lib.stride_tricks import as_strided
        marks = self._psum_zeroed.get(ap.tensor)
        if marks is None:   # only tensors a zero memset wrote get marks (a matmul's fresh tile never does)
            marks = self._psum_zeroed[ap.tensor] = np.full(self.program.tensors[ap.tensor].size, -1, np.int32)
        return as_strided(marks[ap.offset:], ap.shape, tuple(s * marks.itemsize for s, _ in ap.dims))

    def _fold_zero_init(self, ins: Instruction, ap: AccessPattern) -> None:
        zeroing = ins.opcode == "memset" and ins.attrs.get("value") == 0.0
        if not zeroing and ap.tensor not in self._psum_zeroed:
            return
        marks = self._zero_marks(ap)
        if zeroing:
            # Elements an earlier memset zeroed now carry this one's mark, so that one is never dropped.
            marks[...] = len(self._zeroers)
            self._zeroers.append([ins, marks.size])
            return
        first = int(marks.flat[0]) if marks.size else -1
        if ins.opcode in ("nc_matmul", "nc_matmul_mx") and first >= 0 and (marks == first).all():
            ins.attrs["accumulate"] = False
            entry = self._zeroers[first]
            entry[1] -= marks.size
            if entry[1] <= 0:
                entry[0].attrs["_folded"] = True
        marks[...] = -1
        if not (self._psum_zeroed[ap.tensor] >= 0).any():
            del self._psum_zeroed[ap.tensor]

    def finish(self) -> Program:
        """Drop the instructions folded away while tracing (PSUM zero-initialisation); the Program."""
        if any(ins.attrs.get("_folded") for ins in self.program.instructions):
            self.program.instructions = [ins for ins in self.program.instructions if not ins.attrs.get("_folded")]
        return self.program
