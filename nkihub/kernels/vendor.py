"""What a published kernel may import, and how ``nkihub publish`` makes a package stand alone.

A package on the Hub runs where nkihub is not installed (Hugging Face ``kernels`` on a Trainium
machine, or on a CPU machine with an NKI simulator), so it may import only the standard library,
torch, numpy, the public NKI API (``nki``, ``nki.language``, ``nki.isa``) and its own modules.
In-tree, library kernels share helpers (``nkihub.kernels.library.common``, the op-registration helper
``nkihub.kernels.torch_ops``, another kernel's tile helpers); :func:`vendor_package` copies each nkihub module
a package reaches into the package as ``_<name>.py`` and rewrites the imports to it, as Hugging Face's
kernel-builder writes ``_ops.py`` into every build, so the in-tree sources keep one copy of each helper.
Anything else the import graph reaches (``nkihub.simulator``, ``nkihub.hub_client``, ``nkihub.nki`` internals, other
distributions) is refused with the file, line and import that reached it.
"""
from __future__ import annotations

import ast
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the directory holding the `nkihub` package
PUBLIC_NKI = ("nki", "nki.language", "nki.isa")
EXTERNAL = ("torch", "numpy")
RULE = ("a published kernel may import only the standard library, torch, numpy, the public NKI API "
        "(nki, nki.language, nki.isa) and its own modules")


class VendorError(ValueError):
    """An import a published kernel cannot have; the message names the file, line and import."""


@dataclass
class VendorResult:
    """What :func:`vendor_package` did: ``vendored`` maps nkihub module -> file written into the
    package; ``requires`` lists the distributions the package imports (``nki``, ``numpy``, ``torch``)."""

    vendored: dict[str, str] = field(default_factory=dict)
    requires: set[str] = field(default_factory=set)


def _external(module: str) -> str | None:
    """The distribution an allowed import belongs to ('' for the standard library), None if not allowed."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names:
        return ""
    if top in EXTERNAL:
        return top
    if module in PUBLIC_NKI:
        return "nki"
    return None


def _source(module: str) -> tuple[Path, bool] | None:
    """(file, is_package) of an nkihub module that may be vendored, or None."""
    if not module.startswith("nkihub.kernels.") or module == "nkihub.kernels.library":
        return None  # the `nkihub.kernels` package itself is nkihub's API, never carried
    base = ROOT.joinpath(*module.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    return None


def _is_module(module: str) -> bool:
    base = ROOT.joinpath(*module.split("."))
    return (base / "__init__.py").is_file() or base.with_suffix(".py").is_file()


def vendored_name(module: str) -> str:
    """File stem a vendored module gets: ``nkihub.kernels.torch_ops`` -> ``_torch_ops``,
    ``nkihub.kernels.library.matmul.nki_kernels`` -> ``_matmul_nki_kernels``."""
    for prefix in ("nkihub.kernels.library.", "nkihub.kernels."):
        if module.startswith(prefix):
            module = module[len(prefix):]
            break
    return "_" + module.replace(".", "_")


def self_module(package_dir: Path, package: str) -> str | None:
    """The in-tree module name of the package being published (``nkihub.kernels.library.vit_attn``), also for
    a staged copy of a library kernel; None for a package nkihub does not have."""
    try:
        rel = package_dir.resolve().relative_to(ROOT)
        return ".".join(rel.parts)
    except ValueError:
        pass
    twin = ROOT / "nkihub" / "kernels" / "library" / package / "kernel.json"
    if twin.is_file() and (package_dir / "kernel.json").is_file():
        names = {json.loads(p.read_text()).get("name") for p in (twin, package_dir / "kernel.json")}
        if len(names) == 1:
            return f"nkihub.kernels.library.{package}"
    return None


class _Rewriter:
    """Rewrites one file's imports; ``owner`` is its in-tree module name, ``depth`` its directory depth
    inside the published package (vendored files sit at the top)."""

    def __init__(self, job: "_Job", path: Path, owner: str, is_package: bool, depth: int, label: str):
        self.job, self.path, self.owner, self.is_package = job, path, owner, is_package
        self.depth, self.label = depth, label

    def _absolute(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module
        parts = self.owner.split(".") if self.is_package else self.owner.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        return ".".join(parts + ([node.module] if node.module else []))

    def _own(self, module: str) -> str | None:
        own = self.job.self_name
        if own and (module == own or module.startswith(own + ".")):
            return module[len(own):].lstrip(".")
        return None

    def _fail(self, node, what: str, why: str):
        raise VendorError(f"{self.label}:{node.lineno}: imports {what}: {why}; {RULE}")

    def _target(self, node, module: str) -> str:
        """Relative module path (``.x`` / ``.._y``) for an nkihub module, vendoring it if needed."""
        dots = "." * (self.depth + 1)
        own = self._own(module)
        if own is not None:
            return dots + own
        if _source(module) is None:
            self._fail(node, module, "not a module nkihub can carry into the package" if module.startswith("nkihub.kernels")
                       else "not allowed")
        return dots + self.job.vendor(module)

    def _require(self, kind: str) -> None:
        if kind:
            self.job.result.requires.add(kind)

    def _from(self, node, module: str, name: str, asname: str | None) -> str:
        """``from <pkg> import <mod> as <asname>`` for the nkihub module ``module.name``."""
        target = self._target(node, f"{module}.{name}" if module else name)
        dots = len(target) - len(target.lstrip("."))
        pkg, _, mod = target[dots:].rpartition(".")
        return f"from {'.' * dots}{pkg} import {mod} as {asname or name}"

    def statement(self, node) -> str | None:
        """The rewritten import statement, or None to keep it."""
        if isinstance(node, ast.Import):
            out, changed = [], False
            for alias in node.names:
                kind = _external(alias.name)
                if kind is not None:
                    self._require(kind)
                    out.append(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else ""))
                    continue
                if not alias.asname:
                    self._fail(node, alias.name, "write `import ... as name` or `from ... import name`")
                out.append(self._from(node, "", alias.name, alias.asname))
                changed = True
            return "; ".join(out) if changed else None
        module = self._absolute(node)
        if node.level and self.job.vendored_file(self.path) is None:
            if self._own(module) is not None or self.job.self_name is None:
                return None  # a relative import inside the package stays as it is
        kind = _external(module)
        if kind is not None and not node.level:
            self._require(kind)
            return None
        if module == "nki" and not node.level:  # `from nki import language as nl`, `from nki import jit`
            self._require("nki")
            return None
        subs = [a for a in node.names if _is_module(f"{module}.{a.name}")]
        if subs and len(subs) != len(node.names):
            self._fail(node, module, "mixes submodules and names in one import; split it")
        if subs:
            return "; ".join(self._from(node, module, a.name, a.asname) for a in subs)
        names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
        return f"from {self._target(node, module)} import {names}"

    def rewrite(self, text: str) -> str:
        tree = ast.parse(text, filename=str(self.path))
        lines = text.splitlines(keepends=True)
        edits = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                new = self.statement(node)
                if new is not None:
                    edits.append((node, new))
        for node, new in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
            first, last = node.lineno - 1, node.end_lineno - 1
            head, tail = lines[first][: node.col_offset], lines[last][node.end_col_offset:]
            # keep the line count, so tracebacks point at the published file's real lines
            lines[first: last + 1] = [head + new + "\n" * (last - first) + tail]
        return "".join(lines)


class _Job:
    def __init__(self, out_dir: Path, self_name: str | None):
        self.out_dir, self.self_name, self.result = out_dir, self_name, VendorResult()
        self._files: dict[Path, str] = {}

    def vendored_file(self, path: Path) -> str | None:
        return self._files.get(path)

    def vendor(self, module: str) -> str:
        if module in self.result.vendored:
            return self.result.vendored[module][:-3]
        src, is_package = _source(module)
        name = vendored_name(module)
        dst = self.out_dir / f"{name}.py"
        if dst.exists():
            raise VendorError(f"{module} would be carried in as {dst.name}, but the package has a file of that name")
        self.result.vendored[module] = f"{name}.py"
        self._files[dst] = module
        origin = src.relative_to(ROOT).as_posix()
        text = _Rewriter(self, dst, module, is_package, 0, f"{module} ({origin})").rewrite(src.read_text())
        dst.write_text(f"# Carried into this package from nkihub's {origin} by `nkihub publish`.\n{text}")
        return name


def vendor_package(package_dir: str | Path, out_dir: str | Path, package: str) -> VendorResult:
    """Copy the package in ``package_dir`` to ``out_dir`` (bytecode skipped) with every nkihub module it
    imports carried in as ``_<name>.py`` and its imports rewritten; VendorError names the first import
    that is not allowed. ``package`` is the package's import name (``vit_attn``)."""
    package_dir, out_dir = Path(package_dir), Path(out_dir)
    shutil.copytree(package_dir, out_dir, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"))
    job = _Job(out_dir, self_module(package_dir, package))
    own = job.self_name or package
    for path in sorted(out_dir.rglob("*.py")):
        if job.vendored_file(path) is not None:
            continue
        rel = path.relative_to(out_dir)
        parts = rel.with_suffix("").parts
        is_package = parts[-1] == "__init__"
        owner = ".".join((own, *parts[:-1])) if is_package else ".".join((own, *parts))
        label = f"{package}/{rel.as_posix()}"
        path.write_text(_Rewriter(job, path, owner, is_package, len(parts) - 1, label).rewrite(path.read_text()))
    check_standalone(out_dir, package)
    return job.result


# What Hugging Face kernels' tooling knows as a Python dependency, per backend (its python_depends.json):
# `nki` only for neuron. The cpu backend has no name for it, so a torch-cpu variant declares none there
# and records what it needs in nkihub's own metadata.
_KNOWN_DEPENDS = {"neuron": ("nki",), "cpu": ()}


def python_depends(requires, backend: str) -> list[str]:
    """``python-depends`` of a variant's metadata.json: the distributions in ``requires`` that Hugging
    Face's tooling can check for ``backend`` (torch is a given, numpy comes with it)."""
    return sorted(set(requires) & set(_KNOWN_DEPENDS.get(backend, ())))


def check_standalone(package_dir: str | Path, package: str | None = None) -> None:
    """Raise VendorError naming the first import in ``package_dir`` that is neither allowed nor a module
    of the package itself (every ``.py`` file, imports inside functions included)."""
    package_dir = Path(package_dir)
    package = package or package_dir.name
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(package_dir)
        here = list(rel.parts[:-1])
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            label = f"{package}/{rel.as_posix()}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _external(alias.name) is None:
                        raise VendorError(f"{label}: imports {alias.name}; {RULE}")
            elif isinstance(node, ast.ImportFrom):
                if not node.level:
                    if _external(node.module) is None and node.module != "nki":
                        raise VendorError(f"{label}: imports {node.module}; {RULE}")
                    continue
                if node.level > len(here) + 1:
                    raise VendorError(f"{label}: a relative import reaches outside the package; {RULE}")
                target = package_dir.joinpath(*here[: len(here) - node.level + 1],
                                              *(node.module.split(".") if node.module else []))
                if not (target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()):
                    raise VendorError(f"{label}: imports {'.' * node.level}{node.module or ''}, which the "
                                      f"package does not have; {RULE}")
