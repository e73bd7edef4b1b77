"""Names of AWS NKI that nkihub does not simulate, and what a kernel sees when it uses one.

Each public module (``nki.language``, ``neuronxcc.nki.isa`` ...) ends with
``__getattr__ = unsupported.module_getattr("<public module name>")``. A lookup that fails there raises
:class:`NotSimulatedName` when AWS NKI documents the name (``nkihub/nki/compat/nki_api.md``): the message names the
public module, says why it is not simulated, and points at the kernel line; any other name raises an
``AttributeError`` that names the public module (``neuronxcc.nki.language``), never an internal one.
``NotSimulatedName`` is also an ``AttributeError``, so ``getattr(nl, name, None)`` and ``hasattr`` keep
working for feature detection.
"""
from __future__ import annotations

import dis
import functools
import importlib
import importlib.abc
import sys

from nkihub.nki import tracing
from nkihub.simulator.errors import NotSimulatedError


class NotSimulatedName(NotSimulatedError, AttributeError):
    """A documented AWS NKI name this package does not provide (looked up as an attribute)."""


class NotSimulatedImport(NotSimulatedError, ImportError):
    """A documented AWS NKI name this package does not provide (``from nki.language import name``)."""


def _coverage():
    # The inventory of documented names, loaded on the first miss only (import_module: a from-import
    # would probe the package's own __getattr__ and recurse).
    return importlib.import_module("nkihub.nki.compat.coverage")


@functools.lru_cache(maxsize=None)
def _documented() -> dict[str, frozenset]:
    coverage = _coverage()
    names: dict[str, set] = {}
    for e in coverage.inventory():
        names.setdefault(e.module, set()).add(e.name)
    return {m: frozenset(n) for m, n in names.items()}


def why(module: str, name: str) -> str:
    """The reason AWS NKI's ``module.name`` (or module ``module`` when ``name`` is empty) is not
    simulated (from the coverage table)."""
    coverage = _coverage()
    key = f"{module}.{name}" if name else module
    return coverage.GAPS.get(key) or coverage.GAPS.get(module) or "not implemented yet"


def not_simulated(what: str, reason: str) -> NotSimulatedError:
    """A :class:`NotSimulatedError` for ``what`` (e.g. ``"dma_copy(dst_rmw_op=...)"``) at the kernel line
    being traced."""
    return NotSimulatedError(f"{what} is part of AWS NKI but nkihub does not simulate it: {reason}",
                             rule="not-simulated", loc=tracing.caller_loc())


def _importing(depth: int) -> bool:
    """True when the frame ``depth`` levels up is executing ``from module import name``."""
    frame = sys._getframe(depth + 1)
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and dis.opname[code[frame.f_lasti]] == "IMPORT_FROM"


def missing(module: str, name: str, importing: bool = False) -> Exception:
    """The error for a failed lookup of ``module.name`` (``module`` is the public name). An import of the
    name gets an ImportError (Python turns attribute errors there into one naming the internal module)."""
    if name in _documented().get(module, ()):
        cls = NotSimulatedImport if importing else NotSimulatedName
        return cls(f"{module}.{name} is part of AWS NKI but nkihub does not simulate it: {why(module, name)}",
                   rule="not-simulated", loc=tracing.caller_loc())
    if importing:
        return ImportError(f"cannot import name '{name}' from '{module}'", name=module)
    return AttributeError(f"module '{module}' has no attribute '{name}'")


class _DocumentedModules(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: an import of an AWS NKI module nkihub lacks (``import nki.collectives``)
    fails saying so at the importing line, instead of a bare ModuleNotFoundError."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(("nki.", "neuronxcc.nki.")):
            return None
        documented = _documented()
        if fullname in documented or any(m.startswith(fullname + ".") for m in documented):
            raise NotSimulatedImport(f"{fullname} is part of AWS NKI but nkihub does not simulate it: "
                                     f"{why(fullname, '')}", rule="not-simulated", loc=tracing.caller_loc())
        return None


if not any(isinstance(f, _DocumentedModules) for f in sys.meta_path):
    sys.meta_path.append(_DocumentedModules())


def module_getattr(module: str):
    """A module ``__getattr__`` (PEP 562) raising :func:`missing` errors for ``module``."""
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)   # dunder probes (copy, pickle, inspect) stay plain
        raise missing(module, name, importing=_importing(1))
    return __getattr__
