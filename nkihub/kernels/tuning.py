"""Tune a kernel package: run the ``nki.autotune`` sweeps its ``kernel.json`` declares and write the
best config per (shapes, target) to ``tuned.json`` in the package, where :mod:`kernels.tuned` applies
it at launch and ``nkihub publish`` puts it on the card.

``kernel.json`` declares what to tune::

    "tuning": {"kernels": [{
        "kernel": "matmul_kernel",                       # a kernel of the package's nki_kernels module
        "space": {"k_group": [1, 2, 4, 8], "m_tiles": [1, 2, 3, 4]},
        "cases": [{"args": ["512x768:bfloat16", "768x3072:bfloat16"],      # tensors and constants, in order
                   "check": ["256x384:bfloat16", "384x512:bfloat16"],      # small inputs, simulated
                   "default": {"k_group": 4}}]                            # what the launcher passes today
    }]}

Each case is estimated at ``args`` on every target and simulated at ``check`` against the kernel with
its default config (which the library's tests check against the torch reference); a candidate that
breaks a rule or differs never wins. Every figure is a cost-model estimate.
"""
from __future__ import annotations

import ast
import importlib
import json
import sys
from pathlib import Path

import numpy as np

from .publish import PublishError, read_kernel_spec
from .tuned import FILE, FORMAT_VERSION, tensor_key
from .vendor import self_module

TARGETS = ("trn1", "trn2")


def parse_arg(text, rng=None):
    """``"512x768:bfloat16"`` -> an array of that shape and dtype (random normal with ``rng``, else
    zeros); anything else is a constant (a JSON value, or a string holding a Python literal)."""
    from nkihub.simulator.dtypes import as_dtype
    if isinstance(text, str) and ":" in text and text.split(":")[0].replace("x", "").isdigit():
        dims, dtype = text.split(":", 1)
        shape = tuple(int(d) for d in dims.split("x"))
        dt = as_dtype(dtype)
        return rng.standard_normal(shape).astype(np.float32).astype(dt) if rng is not None else np.zeros(shape, dt)
    if isinstance(text, str):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    return text


def tuning_spec(package_dir) -> list[dict]:
    """The kernels to tune declared in ``kernel.json`` (empty when it declares none)."""
    spec = read_kernel_spec(package_dir)
    kernels = (spec.get("tuning") or {}).get("kernels") or []
    for i, k in enumerate(kernels):
        for field in ("kernel", "space", "cases"):
            if not k.get(field):
                raise PublishError(f"{Path(package_dir) / 'kernel.json'}: tuning.kernels[{i}] lacks {field!r}")
    return kernels


def _kernel(package_dir: Path, package: str, name: str):
    module = self_module(package_dir, package)
    if module is None:   # a package outside nkihub: import it from its parent directory
        sys.path.insert(0, str(package_dir.resolve().parent))
        module = package
    mod = importlib.import_module(f"{module}.nki_kernels")
    try:
        return getattr(mod, name)
    except AttributeError:
        raise PublishError(f"{package}: tuning names kernel {name!r}, which nki_kernels does not have") from None


def sweep(package_dir, targets=TARGETS, *, workers=None, ray=None, use_cache=True, progress=None) -> list:
    """Run every declared sweep; returns ``[(kernel name, case, TuneReport), ...]``."""
    from nkihub import nki
    package_dir = Path(package_dir)
    package = read_kernel_spec(package_dir)["package"]
    out = []
    for k in tuning_spec(package_dir):
        kernel = _kernel(package_dir, package, k["kernel"])
        for case in k["cases"]:
            rng = np.random.default_rng(0)
            args = [parse_arg(a) for a in case["args"]]
            check = [parse_arg(a, rng) for a in case["check"]] if case.get("check") else None
            report = nki.autotune.tune(kernel, *args, space=k["space"], target=targets, check_args=check,
                                       default=case.get("default"), workers=workers, ray=ray,
                                       use_cache=use_cache, progress=progress)
            out.append((k["kernel"], case, report))
    return out


def tuned_data(results) -> dict:
    """The ``tuned.json`` content for sweep results: per kernel, one entry per (tensor shapes, target)."""
    kernels: dict[str, list] = {}
    for name, case, report in results:
        tensors = tensor_key([parse_arg(a) for a in case["args"]])
        for target in report.targets:
            best, default = report.best.get(target), report.default_result(target)
            if best is None:
                continue
            kernels.setdefault(name, []).append({
                "target": target, "tensors": tensors, "config": best.config.kwargs,
                "estimate_us": round(best.latency_s * 1e6, 3),
                "default": report.default.kwargs if report.default is not None else None,
                "default_us": round(default.latency_s * 1e6, 3) if default is not None and default.latency_s else None,
                "candidates": sum(r.target == target for r in report.results),
                "passed": sum(r.target == target and r.status == "ok" for r in report.results),
            })
    return {"version": FORMAT_VERSION, "kernels": kernels,
            "note": "best configs found by nki.autotune; latencies are cost-model estimates, not measurements"}


def tune_package(package_dir, targets=TARGETS, **kw) -> tuple[Path, list]:
    """Sweep ``package_dir`` and write its ``tuned.json``; returns (path, results)."""
    results = sweep(package_dir, targets, **kw)
    path = Path(package_dir) / FILE
    path.write_text(dumps(tuned_data(results)))
    return path, results


def recheck(package_dir) -> list[dict]:
    """Re-estimate every entry of ``package_dir``'s tuned.json, its tuned config and its default, under
    the current cost rules (estimate only: traced and checked against the rules at the full shapes,
    nothing simulated). Cost rules and kernels change after a sweep; a row whose figures moved from the
    stored ones, or whose tuned config no longer beats its default, says ``nkihub tune-package`` must run again.

    Returns one dict per entry: kernel, target, shapes, config, default, ``stored_us``/``stored_default_us``
    (tuned.json) and ``tuned_us``/``default_us`` (now; None with ``reason`` when the candidate fails).
    """
    from nkihub.nki.autotune.candidate import OK, KernelRef, Task, evaluate, specs
    from nkihub.nki.autotune.space import Config
    package_dir = Path(package_dir)
    package = read_kernel_spec(package_dir)["package"]
    path = package_dir / FILE
    data = json.loads(path.read_text()) if path.is_file() else {}
    rows = []
    for k in tuning_spec(package_dir):
        kernel = _kernel(package_dir, package, k["kernel"])
        entries = data.get("kernels", {}).get(k["kernel"], [])
        for case in k["cases"]:
            args = [parse_arg(a) for a in case["args"]]
            key = tensor_key(args)
            for e in (e for e in entries if e["tensors"] == key):
                row = {"kernel": k["kernel"], "target": e["target"], "shapes": " ".join(map(str, case["args"][:3])),
                       "config": e["config"], "default": e["default"], "stored_us": e["estimate_us"],
                       "stored_default_us": e.get("default_us"), "reason": ""}
                for field, config in (("tuned_us", e["config"]), ("default_us", e["default"])):
                    r = evaluate(Task(KernelRef.of(kernel), Config(config), e["target"], specs(args)), kernel) \
                        if config is not None else None
                    row[field] = round(r.latency_s * 1e6, 3) if r is not None and r.status == OK else None
                    if r is not None and r.status != OK:
                        row["reason"] = f"{field[:-3]} {r.status}: {r.reason}"
                rows.append(row)
    return rows


def dumps(data: dict) -> str:
    """tuned.json text: one line per entry, so a retune shows as a readable diff."""
    kernels = ",\n".join(f"  {json.dumps(name)}: [\n" + ",\n".join(f"   {json.dumps(e)}" for e in entries) + "\n  ]"
                         for name, entries in data["kernels"].items())
    return (f'{{\n "version": {data["version"]},\n "note": {json.dumps(data["note"])},\n'
            f' "kernels": {{\n{kernels}\n }}\n}}\n')
