"""The top-level names ``nki`` and ``neuronxcc.nki`` as aliases of nkihub's own modules, yielding to AWS's.

AWS kernels say ``import nki`` / ``import neuronxcc.nki``; nkihub's implementation lives at ``nkihub.nki``
(and its old dialect at ``nkihub.nki.compat``). nkihub's wheel holds no top-level ``nki/`` or ``neuronxcc/``:
it installs ``nkihub-aliases.pth``, which appends the directory ``nkihub/_toplevel`` to ``sys.path``, after
site-packages. That directory holds two tiny packages, ``nki`` and ``neuronxcc``, found only when no
earlier ``sys.path`` entry has one: where AWS's distribution is installed, its package wins by ordinary
path order, and installing or uninstalling either distribution never touches the other's files.

When nkihub's ``nki`` stand-in is imported it replaces itself in ``sys.modules`` with ``nkihub.nki`` and
registers :class:`AliasFinder`, which answers ``nki.<sub>`` with the module ``nkihub.nki.<sub>`` itself,
so there is one module object per module (``nki.language is nkihub.nki.language``). The finder stands
aside whenever ``sys.modules["nki"]`` is not nkihub's (AWS's package imported first).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading

_lock = threading.Lock()


class _AliasLoader(importlib.abc.Loader):
    """Loads ``alias`` as the already importable module ``real`` (the very same module object)."""

    def __init__(self, real: str):
        self.real = real
        self._spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.real)
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        # the import system set __spec__ to the alias's spec; the module keeps its own name and spec
        module.__spec__ = self._spec


class AliasFinder(importlib.abc.MetaPathFinder):
    """Answers ``alias`` and ``alias.<sub>`` with ``target`` and ``target.<sub>`` while ``alias`` is ours."""

    def __init__(self, alias: str, target: str):
        self.alias, self.target = alias, target

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.alias and not fullname.startswith(self.alias + "."):
            return None
        if fullname != self.alias:
            bound = sys.modules.get(self.alias)
            if bound is None or getattr(bound, "__name__", None) != self.target:
                return None  # AWS's package (or nothing) answers this name
        real = self.target + fullname[len(self.alias):]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real))


def bind(alias: str, target: str):
    """Make ``alias`` (and its submodules) name the module ``target`` (and its submodules); returns the
    target module. Called by the stand-in packages in ``nkihub/_toplevel``."""
    with _lock:
        if not any(isinstance(f, AliasFinder) and f.alias == alias for f in sys.meta_path):
            sys.meta_path.insert(0, AliasFinder(alias, target))
    module = importlib.import_module(target)
    sys.modules[alias] = module
    return module


def resolve(name: str) -> str:
    """Whose module the top-level ``name`` (``"nki"`` or ``"neuronxcc"``) is here: ``"nkihub"`` when nkihub's
    stand-in answers it, ``"other"`` when another distribution's package does, ``"none"``. Imports nothing."""
    spec = importlib.machinery.PathFinder.find_spec(name)
    if spec is None or spec.origin is None and not spec.submodule_search_locations:
        return "none"
    where = spec.origin or next(iter(spec.submodule_search_locations))
    ours = importlib.util.find_spec("nkihub").submodule_search_locations[0]
    return "nkihub" if where.startswith(ours) else "other"
