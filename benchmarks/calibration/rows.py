"""The calibration set: published latencies of NKI kernels, each with the code that was measured.

Rows live in ``rows.toml`` beside this module (one ``[[rows]]`` table each; its header says what the fields
mean). A row's kernel is outside code and never enters this repository: ``Snapshots`` reads the file from a
git snapshot of its repository at the row's commit, writes it into a scratch folder outside the repository
and imports it from there, unmodified (``benchmarks/nki_samples_harness.Loader``).
"""
from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

ROWS_FILE = Path(__file__).with_name("rows.toml")
KINDS = ("matmul", "attention", "normalisation", "elementwise", "scan")
TARGETS = ("trn1", "trn2", "trn3")
SPLITS = ("fit", "held-out")
_REQUIRED = ("id", "kind", "target", "split", "measured_us", "statistic", "source", "where", "kernel", "args")


class RowError(ValueError):
    """A row of the calibration set that breaks the file's rules (names the row and the field)."""


@dataclass(frozen=True)
class Row:
    """One published measurement: what ran (``kernel``, ``args``, ``kwargs``, ``target``), what it took
    (``measured_us``, ``statistic``) and where that is written (``source``, ``where``)."""

    id: str
    kind: str
    target: str
    split: str
    measured_us: float
    statistic: str
    source: str
    where: str
    kernel: dict
    args: tuple
    kwargs: dict = field(default_factory=dict)
    excluded: str | None = None


def load(path: Path = ROWS_FILE) -> list[Row]:
    """The rows of ``path``, checked: every field present, kinds/targets/splits from the lists above, ids
    unique, a kernel that names a repo and a commit and either a ``path`` + ``function`` or a ``trace`` +
    ``candidate`` + ``harness``."""
    rows, seen = [], set()
    for k, raw in enumerate(tomllib.loads(Path(path).read_text())["rows"]):
        where = f"{path}: row {k + 1} ({raw.get('id', 'no id')})"
        missing = [f for f in _REQUIRED if f not in raw]
        if missing:
            raise RowError(f"{where}: missing {', '.join(missing)}")
        for name, allowed in (("kind", KINDS), ("target", TARGETS), ("split", SPLITS)):
            if raw[name] not in allowed:
                raise RowError(f"{where}: {name} {raw[name]!r} is not one of {', '.join(allowed)}")
        kern = raw["kernel"]
        forms = ({"path", "function"}, {"package", "module", "function"}, {"trace", "candidate", "harness"},
                 {"doc", "line", "function"})
        if not ({"repo", "commit"} <= set(kern) and any(f <= set(kern) for f in forms)):
            raise RowError(f"{where}: kernel needs repo, commit and path + function, package + module + "
                           "function, trace + candidate + harness, or doc + line + function")
        if raw["id"] in seen:
            raise RowError(f"{where}: id {raw['id']!r} is used twice")
        if not float(raw["measured_us"]) > 0:
            raise RowError(f"{where}: measured_us must be positive")
        seen.add(raw["id"])
        rows.append(Row(raw["id"], raw["kind"], raw["target"], raw["split"], float(raw["measured_us"]),
                        raw["statistic"], raw["source"], raw["where"], dict(kern), tuple(raw["args"]),
                        dict(raw.get("kwargs", {})), raw.get("excluded")))
    return rows


def _value(v):
    if isinstance(v, dict) and "object" in v:   # a configuration object of the kernel's own package
        module, _, name = v["object"].rpartition(".")
        return getattr(importlib.import_module(module), name)(**{k: _value(x) for k, x in v.get("kwargs", {}).items()})
    if isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], list):
        dtype = getattr(ml_dtypes, v[0], None) or np.dtype(v[0])
        return np.zeros(tuple(v[1]), dtype=dtype)
    if isinstance(v, list):
        return tuple(_value(x) for x in v)
    return v


def arguments(row: Row) -> tuple[list, dict]:
    """The row's positional and keyword arguments: zero arrays of the measured shapes and dtypes (the cost
    model reads only those), the numbers and tuples as given, and ``{object = "pkg.mod.Class", kwargs}``
    built from the kernel's package (import the kernel first: ``Snapshots.kernel``)."""
    return [_value(a) for a in row.args], {k: _value(v) for k, v in row.kwargs.items()}


def candidate_code(trace_text: str, index: int) -> str:
    """The code of candidate ``index`` (0 = the first kernel) of an Autocomp trace: a ``CodeCandidate(...)``
    expression whose ``parent`` chain leads back to the first. Read with ``ast``, never evaluated."""
    node = ast.parse(trace_text, mode="eval").body
    chain = []
    while isinstance(node, ast.Call):
        kw = {k.arg: k.value for k in node.keywords}
        chain.append(kw)
        node = kw.get("parent")
    chain.reverse()
    if not 0 <= index < len(chain):
        raise RowError(f"the trace has {len(chain)} candidates; no candidate {index}")
    return ast.literal_eval(chain[index]["code"])


def doc_code_block(doc_text: str, line: int) -> str:
    """The Python code of the reStructuredText ``.. code-block:: python`` directive on ``line`` (1-based) of
    ``doc_text``: its indented body, dedented. A kernel published only inside a tutorial page is read so."""
    import textwrap
    lines = doc_text.splitlines()
    if not 1 <= line <= len(lines) or not lines[line - 1].strip().startswith(".. code-block:: python"):
        raise RowError(f"line {line} of the document is not a '.. code-block:: python' directive")
    indent = len(lines[line - 1]) - len(lines[line - 1].lstrip())
    body = []
    for text in lines[line:]:
        if text.strip() and len(text) - len(text.lstrip()) <= indent:
            break
        body.append(text)
    return textwrap.dedent("\n".join(body)).strip("\n") + "\n"


def jit_function_name(code: str) -> str:
    """The name of the first ``@nki.jit`` function ``code`` defines."""
    for node in ast.parse(code).body:
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            return node.name
    raise RowError("the candidate defines no @nki.jit function")


class Snapshots:
    """Files of public repositories at given commits, read from git snapshots under ``roots`` (a mirror
    ``<root>/<owner>+<name>/repo`` or a clone ``<root>/<owner>+<name>`` / ``<root>/<name>``) and written
    under ``scratch/<owner>+<name>@<commit>/`` to be imported from there."""

    def __init__(self, roots, scratch: Path):
        self.roots = [Path(r) for r in roots]
        self.scratch = Path(scratch)

    def git_dir(self, repo: str) -> Path | None:
        owner, name = repo.split("/")
        for root in self.roots:
            for cand in (root / f"{owner}+{name}" / "repo", root / f"{owner}+{name}" / ".git", root / name / ".git"):
                if cand.exists():
                    return cand
        return None

    def _git(self, repo: str) -> Path:
        git = self.git_dir(repo)
        if git is None:
            raise FileNotFoundError(f"no snapshot of {repo}: clone https://github.com/{repo} into one of "
                                    f"{', '.join(map(str, self.roots))}")
        return git

    def text(self, repo: str, commit: str, path: str) -> str:
        return subprocess.run(["git", f"--git-dir={self._git(repo)}", "show", f"{commit}:{path}"], check=True,
                              capture_output=True, text=True).stdout

    def folder(self, repo: str, commit: str) -> Path:
        return self.scratch / f"{repo.replace('/', '+')}@{commit[:12]}"

    def kernel(self, row: Row):
        """The row's kernel object, imported from the scratch copy."""
        from nki_samples_harness import Loader
        k = row.kernel
        folder = self.folder(k["repo"], k["commit"])
        if "package" in k:
            return getattr(self._package(k, folder), k["function"])
        if "trace" in k:
            code = candidate_code(self.text(k["repo"], k["commit"], k["trace"]), int(k["candidate"]))
            harness = self.text(k["repo"], k["commit"], k["harness"])
            if "# SUBSTITUTE HERE" not in harness:
                raise RowError(f"{row.id}: the harness has no '# SUBSTITUTE HERE' line")
            rel, function = f"candidates/{row.id.replace('-', '_')}.py", jit_function_name(code)
            text = harness.replace("# SUBSTITUTE HERE", code)
        elif "doc" in k:
            rel, function = f"docs/{row.id.replace('-', '_')}.py", k["function"]
            text = doc_code_block(self.text(k["repo"], k["commit"], k["doc"]), int(k["line"]))
        else:
            rel, function, text = k["path"], k["function"], self.text(k["repo"], k["commit"], k["path"])
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        return getattr(Loader(folder)(rel), function)

    def _package(self, k: dict, folder: Path):
        """Import ``module`` from the snapshot's ``package`` folder (the whole folder, for its relative
        imports), unpacked once under ``folder``."""
        root = folder / k["package"]
        if not root.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            archive = subprocess.run(["git", f"--git-dir={self._git(k['repo'])}", "archive", k["commit"],
                                      k["package"]], check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
        top = k["module"].split(".")[0]
        for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            if not str(getattr(sys.modules[name], "__file__", "") or "").startswith(str(root)):
                del sys.modules[name]   # a package of the same name from elsewhere
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        return importlib.import_module(k["module"])
