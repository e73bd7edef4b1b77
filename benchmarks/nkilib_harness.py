"""Run AWS's production NKI kernels (aws-neuron/nki-library) unmodified on nkihub's simulator, each against
the library's own torch reference, one row per kernel, and count how many match.

Get a snapshot of the library (it is never committed here), then run the harness on it:

    mkdir -p /tmp/nkilib && git --git-dir=/work/.mirror/aws-neuron+nki-library/repo archive HEAD | tar -x -C /tmp/nkilib
    # or: git clone https://github.com/aws-neuron/nki-library /tmp/nkilib
    .venv/bin/pip install -e ".[benchmarks]"         # scipy, which some references import
    .venv/bin/python benchmarks/nkilib_harness.py /tmp/nkilib
    .venv/bin/python benchmarks/nkilib_harness.py /tmp/nkilib --only cumsum,rope -v
    .venv/bin/python benchmarks/nkilib_harness.py --list   # the kernel list and where each row's shapes come from
    .venv/bin/python benchmarks/nkilib_harness.py /tmp/nkilib --full   # the rows at their tests' largest shapes

Each row runs in its own process with a time limit, through four stages: it *imports* (the kernel module
and its reference import against nkihub's ``nki``), *traces* (the kernel traces into a Program for the
row's inputs), *runs* (the simulator executes it) and *matches* (every output is within the tolerance
the library's integration test uses, by that test's validator rule). The table prints the stage each
row reached, the row's wall time and the peak resident memory of its process (``ru_maxrss``: imports, inputs,
trace, run and reference together), and the first line of the error that stopped it. ``--full`` runs the
rows that have a full-shape variant (``nkilib_compat.rows.full_shape``: the largest shape the test lists)
at that shape instead, with a longer time limit. The kernels' code is never edited; what
only the references need (``neuron_dtypes``, which is not on PyPI) comes from a labelled stand-in
(benchmarks/nkilib_compat/standins.py).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

DEFAULT_SNAPSHOT = "/tmp/ext/nkilib"
STAGES = ("fails to import", "imports", "traces", "runs", "matches")


def _first_line(exc: BaseException, snapshot: str) -> str:
    """``Type: first message line (file:line)``: the innermost frame inside the snapshot, if any."""
    msg = getattr(exc, "message", None)
    if msg is not None:   # an nki error: its message and rule (its str starts with the rendered location)
        msg = [f"{msg}" + (f" [rule: {exc.rule}]" if getattr(exc, "rule", None) else "")]
    else:
        msg = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {msg[0] if msg else ''}"
    where = None
    for fr in traceback.extract_tb(exc.__traceback__):
        if fr.filename.startswith(snapshot):
            where = f"{os.path.relpath(fr.filename, snapshot)}:{fr.lineno}"
    loc = getattr(exc, "loc", None)
    if loc is not None and getattr(loc, "file", None):
        where = f"{os.path.relpath(loc.file, snapshot) if loc.file.startswith(snapshot) else loc.file}:{loc.line}"
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f"{os.path.relpath(exc.filename, snapshot)}:{exc.lineno}"
        if os.path.abspath(exc.filename).startswith(snapshot):   # the library's source, not the simulator
            text = f"their file does not parse: {text}"
    return f"{text} ({where})" if where else text


def _outputs(result) -> list:
    if result is None:
        return []
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


def run_row(snapshot: str, name: str, full: bool = False) -> dict:
    """Run one row in this process (its full-shape variant with ``full``); returns {name, stage, error,
    detail, seconds, peak_gb} (peak_gb: this process's peak resident memory so far, GB)."""
    from nkilib_compat import snapshot as snap
    from nkilib_compat.compare import compare
    from nkilib_compat.rows import FULL, ROWS, Lib
    import numpy as np

    t0 = time.perf_counter()
    res = {"name": name, "stage": STAGES[0], "error": "", "detail": ""}

    def done():
        res["seconds"] = round(time.perf_counter() - t0, 2)
        res["peak_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20), 2)
        return res

    snap.prepare(snapshot)
    import nki
    from nkihub.nki.arrays import to_numpy
    from nkilib_compat.catalogue.pending import NotLaunchable
    try:
        case = (FULL if full else ROWS)[name].build(Lib())
    except NotLaunchable as exc:   # imported fine; the harness cannot launch this row yet
        res["stage"], res["error"] = "imports", f"not launched: {exc}"
        return done()
    except Exception as exc:  # noqa: BLE001  the row reports any failure, it never stops the table
        res["error"] = _first_line(exc, snapshot)
        return done()
    res["stage"] = "imports"
    kernel = case.kernel if isinstance(case.kernel, nki.JitKernel) else nki.jit(case.kernel)
    launch = kernel[case.lnc] if case.lnc > 1 else kernel
    try:
        if case.ranks is not None:   # ranks trace into one Program and run in one call
            from nkihub.nki.multicore import run_ranks
            results = run_ranks(launch, case.ranks, target=case.target)
        else:
            launch.trace(**case.inputs, target=case.target)
    except Exception as exc:  # noqa: BLE001
        res["error"] = _first_line(exc, snapshot)
        return done()
    res["stage"] = "traces"
    try:
        if case.ranks is not None:
            outs = [to_numpy(o) for r in results for o in _outputs(r)]
        else:
            outs = [to_numpy(o) for o in _outputs(launch.run(**case.inputs, target=case.target))]
    except Exception as exc:  # noqa: BLE001
        res["error"] = _first_line(exc, snapshot)
        return done()
    res["stage"] = "runs"
    if case.check is not None:
        try:
            ok, summary = case.check(outs)
        except Exception as exc:  # noqa: BLE001
            res["error"] = "validation failed: " + _first_line(exc, snapshot)
            return done()
        res["detail"] = summary
        if not ok:
            res["error"] = f"does not match: {summary}"
            return done()
        res["stage"] = "matches"
        return done()
    try:
        expected = case.expected() if callable(case.expected) else case.expected
    except Exception as exc:  # noqa: BLE001
        res["error"] = "reference failed: " + _first_line(exc, snapshot)
        return done()
    if len(outs) != len(expected):
        res["error"] = f"the kernel returned {len(outs)} outputs, the reference {len(expected)}"
        return done()
    details = []
    for i, (o, e) in enumerate(zip(outs, expected)):
        ok, summary = compare(o, np.asarray(e), case.rtol, case.atol)
        details.append(f"out{i}: {summary}")
        if not ok:
            res["error"] = f"output {i} does not match: {summary}"
            res["detail"] = "; ".join(details)
            return done()
    res["stage"] = "matches"
    res["detail"] = "; ".join(details)
    return done()


def _child(snapshot: str, name: str, timeout: float, full: bool = False) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), snapshot, "--one", name] + (["--full"] if full else [])
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"name": name, "stage": "imports", "error": f"timed out after {timeout:.0f} s",
                "seconds": round(time.perf_counter() - t0, 2)}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    err = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"name": name, "stage": STAGES[0], "error": f"harness child died: {err}",
            "seconds": round(time.perf_counter() - t0, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot", nargs="?", default=DEFAULT_SNAPSHOT,
                    help=f"unpacked aws-neuron/nki-library checkout (default {DEFAULT_SNAPSHOT})")
    ap.add_argument("--only", help="comma-separated row names")
    ap.add_argument("--list", action="store_true", help="print the kernel list and exit")
    ap.add_argument("--timeout", type=float, help="seconds per row (default 120, 1800 with --full)")
    ap.add_argument("--full", action="store_true",
                    help="run the rows that have one at their test's largest shape (see nkilib_compat.rows.FULL)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each row's comparison detail")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from nkilib_compat.rows import FULL, ROWS
    from nkilib_compat import catalogue  # noqa: F401  (registers the rows)

    if args.one:
        print(json.dumps(run_row(str(Path(args.snapshot).resolve()), args.one, args.full)))
        return 0
    table = FULL if args.full else ROWS
    timeout = args.timeout or (1800.0 if args.full else 120.0)
    names = list(table) if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in table]
    if unknown:
        ap.error(f"unknown rows {unknown}{' (with no full shape)' if args.full else ''}; --list shows them")
    if args.list:
        print(f"{len(table)} kernels (each public nki-library entry point with a torch reference or an "
              "integration test):")
        for r in table.values():
            extra = f"  [needs {r.needs}]" if r.needs else ""
            print(f"  {r.name:28s} {r.kernel}\n  {'':28s} reference {r.reference}; shapes from {r.source}{extra}")
        return 0
    snapshot = str(Path(args.snapshot).resolve())
    if not (Path(snapshot) / "src" / "nkilib_src" / "nkilib").is_dir():
        ap.error(f"{snapshot} is not an nki-library checkout (no src/nkilib_src/nkilib); see --help")
    results = []
    width = max(len(n) for n in names)
    print(f"{'kernel':{width}s}  {'stage':15s} {'secs':>6s} {'peak GB':>7s}  first error")
    for n in names:
        if args.full:
            print(f"{n}: {FULL[n].source}", flush=True)
        r = _child(snapshot, n, timeout, args.full)
        results.append(r)
        peak = f"{r['peak_gb']:7.2f}" if "peak_gb" in r else f"{'-':>7s}"
        print(f"{n:{width}s}  {r['stage']:15s} {r.get('seconds', 0):6.1f} {peak}  {r['error']}", flush=True)
        if args.verbose and r.get("detail"):
            print(f"{'':{width}s}  {r['detail']}")
    counts = {s: sum(r["stage"] == s for r in results) for s in STAGES}
    print("\nstages reached: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print(f"{counts['matches']} of {len(results)} kernels run unmodified and match")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
