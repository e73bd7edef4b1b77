"""Import a kernel package from bytes that were verified, never from the files they came from.

CPython's own loader rereads each module from disk when it is imported (a submodule imported lazily,
minutes after the load was checked, reads whatever is there then) and prefers a ``__pycache__``
``.pyc`` when one is present, which nothing checks. Here every module of a kernel package is compiled
from the bytes the load verified, held in memory; a module name under the package that was not among
them cannot be imported at all; nothing is read from or written to ``__pycache__``.

A :class:`VerifiedPackage` is a meta-path finder for one top-level module name (``_kernels_...``) and
the loader of its modules. ``__file__`` and ``__path__`` still name the files on disk, so code that
locates data beside itself keeps working; ``loader.get_data`` serves the verified bytes of any file.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import linecache
import sys
import threading
from pathlib import Path
from types import ModuleType

_lock = threading.RLock()


class VerifiedPackage(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Finder and loader of the package ``name`` whose files are ``files`` (path in package -> bytes).

    ``root`` is the package directory on disk, used only to name files (``__file__``, tracebacks).
    """

    def __init__(self, name: str, root: Path, files: dict[str, bytes], where: str):
        self.name, self.root, self.files, self.where = name, Path(root), dict(files), where

    # ---- finder ------------------------------------------------------------------------------
    def _rel(self, fullname: str) -> tuple[str, bool] | None:
        parts = fullname.split(".")[1:]
        base = "/".join(parts)
        init = f"{base}/__init__.py" if base else "__init__.py"
        if init in self.files:
            return init, True
        if base and f"{base}.py" in self.files:
            return f"{base}.py", False
        return None

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name and not fullname.startswith(self.name + "."):
            return None
        found = self._rel(fullname)
        if found is None:
            # refuse here rather than return None: the path finder would then import the file from disk
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: {fullname.split('.')[-1]!r} is not a verified file of the kernel "
                f"{self.where} (only files recorded on the Hub and checked at load are importable)", name=fullname)
        rel, is_pkg = found
        origin = self.root / rel
        spec = importlib.util.spec_from_loader(fullname, self, origin=str(origin), is_package=is_pkg)
        spec.has_location = True
        if is_pkg:
            spec.submodule_search_locations = [str(origin.parent)]
        return spec

    # ---- loader ------------------------------------------------------------------------------
    def _source_rel(self, fullname: str) -> str:
        found = self._rel(fullname)
        if found is None:
            raise ImportError(f"{fullname!r} is not part of {self.name!r}", name=fullname)
        return found[0]

    def is_package(self, fullname: str) -> bool:
        return self._source_rel(fullname).endswith("__init__.py")

    def get_source(self, fullname: str) -> str:
        return importlib.util.decode_source(self.files[self._source_rel(fullname)])

    def get_filename(self, fullname: str) -> str:
        return str(self.root / self._source_rel(fullname))

    def get_code(self, fullname: str):
        rel = self._source_rel(fullname)
        return compile(self.files[rel], str(self.root / rel), "exec", dont_inherit=True)

    def exec_module(self, module: ModuleType) -> None:
        rel = self._source_rel(module.__name__)
        filename = str(self.root / rel)
        lines = importlib.util.decode_source(self.files[rel]).splitlines(keepends=True)
        # tracebacks and inspect read linecache; without this they would show the file as it is now
        linecache.cache[filename] = (len(self.files[rel]), None, lines, filename)
        exec(self.get_code(module.__name__), module.__dict__)  # noqa: S102 - the verified source

    def get_data(self, path) -> bytes:
        try:
            rel = Path(path).resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            rel = None
        if rel not in self.files:
            raise FileNotFoundError(f"{path} is not a verified file of the kernel {self.where}")
        return self.files[rel]


def import_verified(name: str, root: Path, files: dict[str, bytes], where: str) -> ModuleType:
    """Import the package in ``files`` (paths relative to the package directory ``root``) as ``name``.

    ``files`` must hold ``__init__.py``. The finder stays registered for the life of the process so
    lazy imports of submodules keep resolving to the verified bytes; on failure every module of the
    package is removed again.
    """
    if "__init__.py" not in files:
        raise ImportError(f"the kernel {where} has no {root.name}/__init__.py")
    with _lock:
        finder = VerifiedPackage(name, root, files, where)
        sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, VerifiedPackage) and f.name == name)]
        sys.meta_path.insert(0, finder)
        spec = finder.find_spec(name)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            for mod in [n for n in sys.modules if n == name or n.startswith(name + ".")]:
                del sys.modules[mod]
            sys.meta_path.remove(finder)
            raise
        return module
