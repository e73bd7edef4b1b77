"""Errors of the machine, rendered like a compiler's: ``file:line:col``, the source line and a caret.

``nki`` re-exports these; they live here so the validator and executor can raise them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLoc:
    """Where in a kernel's source an instruction or tensor was made."""

    file: str
    line: int
    col: int = 0
    end_col: int | None = None
    text: str = ""

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "col": self.col, "end_col": self.end_col, "text": self.text}

    @classmethod
    def from_json(cls, d: dict | None) -> "SourceLoc | None":
        return None if d is None else cls(d["file"], d["line"], d.get("col", 0), d.get("end_col"), d.get("text", ""))

    def render(self) -> str:
        """``file:line:col`` then the source line and a caret under the column."""
        head = f"{self.file}:{self.line}:{self.col + 1}"
        if not self.text:
            return head
        stripped = self.text.rstrip("\n")
        indent = len(stripped) - len(stripped.lstrip())
        col = max(self.col, indent)
        width = max(1, (self.end_col - col) if self.end_col and self.end_col > col else 1)
        return f"{head}\n    {stripped.strip()}\n    {' ' * (col - indent)}{'^' * width}"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class NkiError(Exception):
    """Base of every error a kernel can cause."""

    def __init__(self, message: str, *, rule: str | None = None, loc: SourceLoc | None = None):
        self.message = message
        self.rule = rule
        self.loc = loc
        super().__init__(self._render())

    def _render(self) -> str:
        rule = f" [rule: {self.rule}]" if self.rule else ""
        if self.loc is None:
            return f"{self.message}{rule}"
        return f"{self.loc.render()}\nerror: {self.message}{rule}"


class KernelRuleError(NkiError, ValueError):
    """A kernel broke a hardware or language rule; names the rule, the operand and the source line.

    ``tensor`` is the operand's tensor as the author knows it (``TensorSpec.label``: ``'y_t' (sbuf_1)``)."""

    def __init__(self, rule: str, message: str, *, operand: str | None = None, shape=None, dtype=None,
                 buffer=None, loc: SourceLoc | None = None, tensor: str | None = None):
        self.operand, self.shape, self.dtype, self.buffer = operand, shape, dtype, buffer
        self.tensor = tensor
        detail = ""
        if operand is not None:
            bits = [tensor, f"shape {tuple(shape)}" if shape is not None else None, str(dtype) if dtype else None,
                    buffer]
            detail = f"operand '{operand}' ({', '.join(b for b in bits if b)}): "
        super().__init__(detail + message, rule=rule, loc=loc)


class SimulationError(NkiError, RuntimeError):
    """The simulator found a problem while running a Program (e.g. a non-finite value where none may be)."""


def index_fault(index: int, size: int, loc: SourceLoc | None, hint: str) -> IndexError:
    """The error of a run-time access outside a tensor (an indirect DMA address): an ``IndexError`` worded
    as numpy words one for the tensor's flat elements, which is the type and text AWS's simulator raises
    and its tests expect; the kernel line and ``hint`` ride along as a note (they show in tracebacks)."""
    exc = IndexError(f"index {index} is out of bounds for axis 0 with size {size}")
    exc.add_note((loc.render() + "\n" if loc is not None else "") + hint)
    exc.nki_fault = True
    return exc


def is_kernel_error(exc: BaseException) -> bool:
    """True for errors the kernel caused (pass them on as they are), False for simulator defects."""
    return isinstance(exc, NkiError) or getattr(exc, "nki_fault", False)


class UninitializedWarning(RuntimeWarning):
    """Elements nothing wrote were moved, unchanged, into memory the caller sees (a partly written tile
    stored whole): the rule ``read-uninitialized`` as a warning, since nothing was computed from them."""


class NotSimulatedError(NkiError, NotImplementedError):
    """Something AWS NKI has (a name, a form, an option) that this simulator does not model; names it and
    the kernel line that asked for it."""
