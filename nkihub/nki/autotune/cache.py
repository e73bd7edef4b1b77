"""The autotuner's disk cache, under the compile cache (``NKI_CACHE_DIR``, default
``~/.cache/nkihub/nki``) in ``autotune/``:

- ``candidates/<key>.json``: the result of one candidate, keyed by the kernel's sources and the
  toolchain (as the compile cache), the config, the target, the argument shapes and the check case.
  Candidates are deterministic, so a sweep that crashed resumes from these.
- ``best/<kernel>.json``: the best config per (key values, target), read by later calls instead of
  tuning again.

``NKI_CACHE_DIR=off`` turns both off. Files are written whole (temp file, then rename).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
from pathlib import Path

from nkihub.nki import config as nki_config
from nkihub.nki.autotune.candidate import Result, Task


def root() -> Path | None:
    """The autotune cache directory, or None when the disk cache is off."""
    base = nki_config.cache_dir()
    return None if base is None else base / "autotune"


def kernel_digest(kernel) -> str:
    """sha256 over the kernel's name and file, the sources it can reach and the toolchain (nki +
    simulator), so an edit to any of them retunes (the module's name is left out: a file loaded under
    another name, as ``nkihub tune`` and worker processes do, is the same kernel)."""
    from nkihub.nki.compile import source_files, toolchain_digest
    fn = kernel.fn
    try:
        where = str(Path(inspect.getsourcefile(fn)).resolve())
    except TypeError:
        where = fn.__module__
    h = hashlib.sha256(f"{where}:{fn.__qualname__}:{toolchain_digest()}".encode())
    try:
        for path in source_files(fn) or [inspect.getsourcefile(fn)]:
            h.update(Path(path).read_bytes())
    except (TypeError, OSError):
        h.update(inspect.getsource(fn).encode())
    return h.hexdigest()


def task_key(digest: str, task: Task) -> str:
    check = task.check.digest() if task.check is not None else ""
    text = json.dumps([digest, task.config.kwargs, task.target, repr(task.args), repr(sorted(task.kwargs.items())),
                       check], default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _write(path: Path, data) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs a re-evaluation next time


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def load_result(digest: str, task: Task) -> Result | None:
    """The cached result of ``task``, or None."""
    base = root()
    data = _read(base / "candidates" / f"{task_key(digest, task)}.json") if base else None
    try:
        return Result.from_json(data, cached=True) if data else None
    except (KeyError, TypeError, ValueError):
        return None


def store_result(digest: str, task: Task, result: Result) -> None:
    base = root()
    if base is not None:
        _write(base / "candidates" / f"{task_key(digest, task)}.json", result.to_json())


def best_key(key_values, target: str) -> str:
    return f"{target}|{json.dumps(key_values, default=repr)}"


def load_best(digest: str) -> dict:
    """Every cached best config of a kernel: ``best_key(...)`` -> ``{"config", "latency_s", ...}``."""
    base = root()
    data = _read(base / "best" / f"{digest}.json") if base else None
    return data if isinstance(data, dict) else {}


def store_best(digest: str, key: str, entry: dict) -> None:
    base = root()
    if base is None:
        return
    from filelock import FileLock
    path = base / "best" / f"{digest}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):   # several processes may tune the same kernel
        data = load_best(digest)
        data[key] = entry
        _write(path, data)
