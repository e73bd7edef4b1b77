"""``nki.compile``: a kernel compiled for a target, as a versioned artifact, cached on disk.

Compiling traces the kernel for the arguments' shapes and dtypes, validates it, allocates SBUF and PSUM,
and schedules it on the target's engine queues; the dependencies (semaphore edges) and the instruction
order per queue go to ``program.meta["compile"]``. The result is cached in memory (on the jitted kernel)
and on disk under a key computed BEFORE tracing from the sources of every project module the kernel can
reach (its own file and, transitively, the modules whose functions, classes or namespaces it refers to),
its name, the argument signature, the target and the toolchain (nki + simulator sources): a second process
with the same kernel and shapes loads the artifact and traces nothing.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
import sysconfig
import types
from pathlib import Path

from nkihub.nki import config
from nkihub.nki.jit import ByData, CompiledKernel, JitKernel, _signature_key, jit
from nkihub.simulator.costmodel import schedule
from nkihub.simulator.errors import NkiError
from nkihub.simulator.program import Program
from nkihub.simulator.targets import get_target

ARTIFACT_VERSION = 1   # of program.meta["compile"]; the Program file has its own FORMAT_VERSION
_TOOLCHAIN: list[str] = []


def toolchain_digest() -> str:
    """sha256 over the sources of ``nki`` and ``simulator``: any change to the compiler invalidates the
    cache (computed once per process)."""
    if not _TOOLCHAIN:
        root = Path(__file__).resolve().parent.parent
        h = hashlib.sha256()
        for pkg in ("nki", "simulator"):
            for path in sorted((root / pkg).rglob("*.py")):
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
        _TOOLCHAIN.append(h.hexdigest())
    return _TOOLCHAIN[0]


def _outside_project(path: str) -> bool:
    # Installed packages and the standard library change only with an install (the toolchain digest
    # covers nki and simulator); everything else a kernel reaches is hashed.
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    own = Path(__file__).resolve().parent.parent
    resolved = str(Path(path).resolve())
    return any(resolved.startswith(str(Path(r).resolve()) + os.sep) for r in roots) or \
        any(resolved.startswith(str(own / pkg) + os.sep) for pkg in ("nki", "simulator"))


def source_files(fn) -> list[str]:
    """The source files a kernel can reach: its own module and, transitively, every project module
    that module (or one it reaches) refers to through a module, function or class global. Editing any
    of them changes the cache key."""
    start = sys.modules.get(fn.__module__)
    seen: dict[str, None] = {}
    stack = [start] if start is not None else []
    visited = set()
    while stack:
        module = stack.pop()
        if id(module) in visited:
            continue
        visited.add(id(module))
        path = getattr(module, "__file__", None)
        if not path or _outside_project(path):
            continue
        seen[path] = None
        for value in list(vars(module).values()):
            if isinstance(value, types.ModuleType):
                stack.append(value)
            else:
                inner = getattr(value, "fn", value)  # a JitKernel's function
                owner = sys.modules.get(getattr(inner, "__module__", None) or "")
                if owner is not None and (inspect.isfunction(inner) or inspect.isclass(inner)):
                    stack.append(owner)
    return sorted(seen)


def cache_key(kernel: JitKernel, signature, target) -> str | None:
    """The disk-cache key of a kernel for an argument signature and target, or None when the kernel's
    source cannot be read or an argument has no stable text (such kernels are not disk-cached)."""
    fn = kernel.fn
    try:
        files = source_files(fn) or [inspect.getsourcefile(fn)]
        source = "".join(f"{path}\n{Path(path).read_text()}" for path in files)
    except (TypeError, OSError):
        try:
            source = inspect.getsource(fn)
        except (TypeError, OSError):
            return None
    sig = repr(signature)
    if " at 0x" in sig:
        return None
    text = json.dumps([source, fn.__module__, fn.__qualname__, sig, list(kernel.grid), target.name,
                       toolchain_digest(), ARTIFACT_VERSION])
    return hashlib.sha256(text.encode()).hexdigest()


def annotate(program: Program, target):
    """Schedule ``program`` and record its queues and semaphore edges in ``program.meta["compile"]``;
    returns the ``costmodel.Schedule``."""
    sch = schedule(program, target)
    program.meta["compile"] = {
        "version": ARTIFACT_VERSION, "target": target.name,
        "queues": sch.queue_order(),
        "semaphores": [[j, i] for i, waits in enumerate(sch.waits) for j in waits],
        "estimated_latency_s": sch.latency_s,
    }
    program.meta["target"] = target.name
    return sch


def _compile(kernel, args, kwargs, target, cache: bool):
    """(program, schedule or None when the program came from a cache)."""
    k = kernel if isinstance(kernel, JitKernel) else jit(kernel)
    tgt = get_target(target)
    bound = k._bind(args, kwargs)
    sig = _signature_key(bound)
    mem_key = (tgt.name, k.grid, sig)
    entry = k._cache.get(mem_key)
    if isinstance(entry, ByData):
        entry, cache = None, False   # traced per input data: never from or to the disk cache
    if entry is not None and "compile" in entry.program.meta:
        return entry.program, None
    directory = config.cache_dir() if cache else None
    key = cache_key(k, sig, tgt) if directory is not None else None
    path = directory / f"{key}.json" if key else None
    if entry is None and path is not None and path.exists():
        try:
            program = Program.load(path)
        except (ValueError, KeyError, OSError):
            program = None  # a stale or damaged artifact: compile again and overwrite it
        if program is not None and program.meta.get("compile", {}).get("version") == ARTIFACT_VERSION:
            k._cache.setdefault(mem_key, CompiledKernel(program, tgt))
            return k._cache[mem_key].program, None
    program = k.specialize(*args, target=tgt, **kwargs).program
    sch = annotate(program, tgt)
    if path is not None and not program.meta.get("data_dependent"):
        program.meta["compile"]["key"] = key
        try:
            program.save(path)
        except OSError:
            pass  # a read-only cache only costs a recompile next time
    return program, sch


def compile(kernel, *args, target=None, cache: bool = True, **kwargs) -> Program:  # noqa: A001
    """Compile ``kernel`` (an ``@nki.jit`` kernel or a plain kernel function) for the shapes and dtypes
    of ``args`` on ``target`` (trn1/trn2/trn3; default ``NEURON_PLATFORM_TARGET_OVERRIDE`` else trn2).

    Returns the validated, allocated and scheduled ``Program`` (``program.meta["compile"]`` holds the
    instruction order per queue and the semaphore edges). ``program.save(path)`` writes the versioned
    artifact, ``Program.load(path)`` reads it. ``cache=False`` skips the disk cache.
    """
    try:
        return _compile(kernel, args, kwargs, target, cache)[0]
    except NkiError as exc:
        raise exc.with_traceback(None) from None
