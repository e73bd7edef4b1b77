"""Simulator time and memory against the work, both engines: is time linear in the work, and does memory
follow the data rather than the instructions?

    .venv/bin/python benchmarks/bench_scale.py [--quick] [--cases matmul,flash,vit] [--engines fast,reference]
                                              [--samples /tmp/ext/samples] [--out out/bench] [--more N]

Cases, each over sizes spanning at least 64x in work (16x with ``--quick``):

- ``matmul``: the AWS matrix-multiplication tutorial's ``nki_matmul_fully_optimized_`` (from an
  aws-neuron/nki-samples checkout, run unmodified; ``git clone https://github.com/aws-neuron/nki-samples
  /tmp/ext/samples``), A^T [K, M] x B [K, N] bf16 on trn1, up to AWS's published shape [8192, 4096] x
  [8192, 8192];
- ``flash``: neuron/flash-attn's causal forward, (1, 8, S, 128) bf16, S from 512 to 4096;
- ``vit``: neuron/vit-block, one fused ViT-B encoder layer (S 197, D 768, 12 heads, MLP 3072) bf16 over
  batches of 1 to 64 images.

Every (case, size, engine) runs in a fresh subprocess, so its peak resident memory (``ru_maxrss``) is its own.
The child imports, makes the inputs and notes its resident memory (``base``), then traces the kernel
(``nki.jit``'s specialize: trace, checks, allocation) and calls it three times (the fast engine binds its steps
on the first call and makes its batched plan a slice after each call, within ``NKIHUB_SIM_PLAN_BUDGET`` of the
call's time); with ``--more N`` up to N more calls, until the fast engine's plan is complete and tried (kept
when its runs beat the bound steps, else dropped), and one call after it (the replay it settled on). Printed
per run: instructions, the kernel's HBM bytes (inputs and outputs), wall and CPU seconds of the trace and of
each call, the peak RSS and the simulator's share of it (peak minus ``base``), against the bound stated in
docs/simulator.md; then per case and size the reference's time over the fast engine's for each call (CPU
and wall) and a verdict: the fast engine at or ahead of the reference at every call (by CPU seconds, which other
processes inflate less than wall time). Then per case and engine the growth exponent of each time and of the memory, fitted over
the sizes (least squares of log time against log work; 1.0 is linear), and a log-log plot
``bench_scale.png`` in ``--out``. Times are of this machine in this run (other processes inflate wall times
more than CPU times).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SAMPLES = Path("/tmp/ext/samples")
MATMUL_FILE = "src/nki_samples/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py"

# case -> sizes (smallest first); --quick takes the first three
SIZES = {
    "matmul": [(1024, 2048, 1024), (2048, 2048, 2048), (4096, 2048, 4096), (4096, 4096, 4096), (8192, 4096, 8192)],
    "flash": [512, 1024, 2048, 4096],
    "vit": [1, 4, 16, 64],
}
VIT = dict(s=197, d=768, heads=12, hidden=3072, eps=1e-12)
GIB = 1 << 30


def work(case: str, size) -> float:
    """Flops of the matmuls (the work that grows): 2MNK; causal attention 2 S^2 D per head (half of 4 S^2 D);
    a ViT layer's projections, MLP and attention per image."""
    if case == "matmul":
        k, m, n = size
        return 2.0 * m * n * k
    if case == "flash":
        return 2.0 * 8 * size * size * 128
    s, d, h = VIT["s"], VIT["d"], VIT["hidden"]
    return size * (2.0 * s * (4 * d * d + 2 * d * h) + 4.0 * s * s * d)


def label(case: str, size) -> str:
    if case == "matmul":
        return "K%d M%d N%d" % size
    if case == "flash":
        return f"S {size}"
    return f"{size} img"


# -- child: one (case, size, engine) ---------------------------------------------------------------------
def _rss() -> int:
    """Resident bytes of this process now (Linux)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _bf16(shape, seed, scale=1.0):
    """Random bf16 array made in slices (no full-size fp32 temporary inflating the peak)."""
    import ml_dtypes
    import numpy as np
    rng = np.random.default_rng(seed)
    out = np.empty(shape, ml_dtypes.bfloat16)
    flat = out.reshape(shape[0], -1)
    for i in range(0, flat.shape[0], 256):
        flat[i:i + 256] = rng.standard_normal((min(256, flat.shape[0] - i), flat.shape[1]), dtype=np.float32) * scale
    return out


def _case(case: str, size, samples: Path):
    """(kernel, args, target) of one run."""
    if case == "matmul":
        sys.path.insert(0, str(HERE))
        from nki_samples_harness import Loader
        kernel = Loader(samples)(MATMUL_FILE).nki_matmul_fully_optimized_
        k, m, n = size
        return kernel, [_bf16((k, m), 0), _bf16((k, n), 1)], "trn1"
    if case == "flash":
        from nkihub.kernels.library.flash_attn.nki_kernels import flash_fwd_kernel
        q, k, v = (_bf16((1, 8, size, 128), s) for s in range(3))
        return flash_fwd_kernel, [q, k, v, True, 1 / math.sqrt(128)], "trn2"
    from nkihub.kernels.library.vit_block.nki_kernels import vit_block_kernel
    s, d, h = VIT["s"], VIT["d"], VIT["hidden"]
    vec = lambda n, seed: _bf16((n,), seed, 0.1)  # noqa: E731
    mat = lambda o, i, seed: _bf16((o, i), seed, 0.03)  # noqa: E731
    params = [1 + vec(d, 1), vec(d, 2), mat(d, d, 3), vec(d, 4), mat(d, d, 5), vec(d, 6), mat(d, d, 7), vec(d, 8),
              mat(d, d, 9), vec(d, 10), 1 + vec(d, 11), vec(d, 12), mat(h, d, 13), vec(h, 14), mat(d, h, 15),
              vec(d, 16)]
    return vit_block_kernel, [_bf16((size, s, d), 0), *params, VIT["heads"], VIT["eps"]], "trn2"


def _timed(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def child(case: str, size, engine: str, samples: Path, more: int = 0) -> dict:
    os.environ["NKIHUB_SIM_ENGINE"] = engine
    kernel, args, target = _case(case, size, samples)
    import numpy as np
    base = _rss()
    compiled, trace_w, trace_c = _timed(lambda: kernel.specialize(*args, target=target))
    program = compiled.program
    hbm = sum(program.tensors[n].size * program.tensors[n].np_dtype.itemsize
              for n in {*program.inputs, *program.outputs})
    calls, settled = [], None
    for n in range(3 + more):
        if n >= 3 and not getattr(compiled.executor, "settling", False):
            break
        out, w, c = _timed(lambda: kernel(*args, target=target))
        calls.append((w, c))
        del out
    note = getattr(compiled.executor, "batch_note", "")
    if more and engine == "fast" and not getattr(compiled.executor, "settling", False):
        out, w, c = _timed(lambda: kernel(*args, target=target))
        settled = (len(calls) + 1, w, c, note.startswith("batched"))
        del out
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    return {"case": case, "size": list(size) if isinstance(size, tuple) else size, "engine": engine,
            "work": work(case, size), "instructions": len(program.instructions), "hbm_bytes": hbm,
            "input_bytes": sum(a.nbytes for a in arrays), "base_rss": base,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "end_rss": _rss(),
            "trace": (trace_w, trace_c), "calls": calls, "settled": settled, "note": note}


# -- parent ------------------------------------------------------------------------------------------------
def run_one(case, size, engine, samples: Path, timeout: float, more: int = 0) -> dict:
    cmd = [sys.executable, __file__, "--child", json.dumps([case, size, engine, str(samples), more])]
    env = dict(os.environ, NKIHUB_SIM_CROSSCHECK="0")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"case": case, "size": size, "engine": engine, "error": f"timed out after {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"case": case, "size": size, "engine": engine, "error": tail[0]}


def bound(r: dict) -> float:
    """The fast engine's memory bound of docs/simulator.md for one run: the simulator's share of the peak
    (peak RSS minus the process with its inputs) at most 3x the kernel's HBM bytes (workspace copies, the
    returned outputs, the validator's and the planner's per-element tables of written tensors), plus twice
    NKIHUB_SIM_BATCH_MEMORY (the batched plan's storage), plus 12 KB per instruction (the Program, its plan
    and bound steps), plus 0.1 GiB."""
    from nkihub.simulator import config
    budget = config.batch_memory() if hasattr(config, "batch_memory") else 256 << 20   # (older trees)
    return 3 * r["hbm_bytes"] + 2 * budget + 12_000 * r["instructions"] + 0.1 * GIB


def fit(xs, ys) -> float | None:
    """Slope of log y against log x (least squares); None with fewer than two points."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def table(rows: list[dict]) -> str:
    head = (f"{'case':7}{'size':>20}{'engine':>10}{'instrs':>8}{'HBM MB':>8}{'trace s':>9}{'1st s':>8}{'2nd s':>8}"
            f"{'replay s':>9}{'cpu 1st':>8}{'cpu 2nd':>8}{'cpu rep':>8}{'peak GB':>8}{'sim GB':>7}{'bound':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        name = label(r["case"], tuple(r["size"]) if isinstance(r["size"], list) else r["size"])
        if "error" in r:
            lines.append(f"{r['case']:7}{name:>20}{r['engine']:>10}  error: {r['error']}")
            continue
        (w1, c1), (w2, c2), (w3, c3) = r["calls"][:3]
        sim = (r["peak_rss"] - r["base_rss"]) / GIB
        ok = "ok" if r["peak_rss"] - r["base_rss"] <= bound(r) else "OVER"
        lines.append(f"{r['case']:7}{name:>20}{r['engine']:>10}{r['instructions']:>8}{r['hbm_bytes'] / 1e6:>8.0f}"
                     f"{r['trace'][0]:>9.2f}{w1:>8.2f}{w2:>8.2f}{w3:>9.2f}{c1:>8.2f}{c2:>8.2f}{c3:>8.2f}{r['peak_rss'] / GIB:>8.2f}"
                     f"{sim:>7.2f}{ok:>7}")
    lines.append("1st, 2nd, replay: the first three calls (the fast engine binds on the first and makes its batched "
                 "plan a slice after each call); wall seconds, then CPU seconds of all threads. peak: "
                 "the subprocess's peak RSS; sim: peak minus the process with its inputs; bound: sim <= 3 x HBM "
                 "bytes + 2 x NKIHUB_SIM_BATCH_MEMORY + 12 KB per instruction + 0.1 GiB, the fast engine's bound "
                 "(docs/simulator.md; the reference engine keeps a buffer per tensor and is shown against it too)")
    return "\n".join(lines)


def verdicts(rows: list[dict]) -> str:
    """Per case and size: the reference's seconds over the fast engine's for each of the three calls (CPU,
    then wall; above 1 the fast engine is ahead), the first call after the fast engine settled how it replays
    (``--more``: its batched plan complete and tried, kept or dropped) with the reference's replay over that
    call, and a verdict by CPU seconds."""
    good = {(r["case"], json.dumps(r["size"]), r["engine"]): r for r in rows if "error" not in r}
    head = (f"{'case':7}{'size':>20}{'cpu 1st':>8}{'cpu 2nd':>8}{'cpu 3rd':>8}{'wall 1st':>9}{'wall 2nd':>9}"
            f"{'wall 3rd':>9}{'settled':>9}{'as':>5}{'cpu':>6}{'wall':>6}  verdict")
    lines = [head, "-" * len(head)]
    for (case, size, engine), fast in good.items():
        ref = good.get((case, size, "reference"))
        if engine != "fast" or ref is None:
            continue
        sz = json.loads(size)
        name = label(case, tuple(sz) if isinstance(sz, list) else sz)
        cpu = [rc / fc for (_, fc), (_, rc) in zip(fast["calls"][:3], ref["calls"][:3])]
        wall = [rw / fw for (fw, _), (rw, _) in zip(fast["calls"][:3], ref["calls"][:3])]
        b = fast.get("settled")
        rep_w, rep_c = ref["calls"][2]
        late = (f"{'call ' + str(b[0]):>9}{'bat' if b[3] else 'unb':>5}{rep_c / b[2]:>6.2f}{rep_w / b[1]:>6.2f}" if b
                else f"{'-':>9}{'-':>5}{'-':>6}{'-':>6}")
        behind = [str(k + 1) for k, x in enumerate(cpu) if x < 1.0]
        verdict = "at or ahead at every call" if not behind else f"BEHIND at call {', '.join(behind)}"
        lines.append(f"{case:7}{name:>20}" + "".join(f"{x:>8.2f}" for x in cpu) + "".join(f"{x:>9.2f}" for x in wall)
                     + late + "  " + verdict)
    lines.append("reference seconds over fast seconds per call (above 1: the fast engine is ahead); settled: the "
                 "first call after the fast engine's batched plan was complete and tried (--more), as bat(ched) or "
                 "unb(atched, the plan dropped as no faster), with the reference's third call over it (CPU, wall); "
                 "verdict by CPU seconds")
    return "\n".join(lines)


def exponents(rows: list[dict]) -> tuple[str, dict]:
    good = [r for r in rows if "error" not in r]
    out, lines = {}, []
    head = (f"{'case':7}{'engine':>10}{'sizes':>6}{'work span':>10}{'trace':>7}{'1st':>7}{'replay':>7}{'cpu rep':>8}"
            f"{'sim mem':>8}")
    lines += [head, "-" * len(head)]
    for case in dict.fromkeys(r["case"] for r in good):
        for engine in dict.fromkeys(r["engine"] for r in good if r["case"] == case):
            rs = sorted((r for r in good if r["case"] == case and r["engine"] == engine), key=lambda r: r["work"])
            xs = [r["work"] for r in rs]
            e = {"trace": fit(xs, [r["trace"][0] for r in rs]),
                 "first": fit(xs, [r["trace"][0] + r["calls"][0][0] for r in rs]),
                 "replay": fit(xs, [r["calls"][2][0] for r in rs]),
                 "replay_cpu": fit(xs, [r["calls"][2][1] for r in rs]),
                 "memory": fit(xs, [max(1, r["peak_rss"] - r["base_rss"]) for r in rs])}
            out[(case, engine)] = e
            f = lambda v: "   -" if v is None else f"{v:7.2f}"  # noqa: E731
            span = xs[-1] / xs[0] if xs else 0
            lines.append(f"{case:7}{engine:>10}{len(rs):>6}{span:>9.0f}x{f(e['trace'])}{f(e['first'])}"
                         f"{f(e['replay'])}{f(e['replay_cpu']):>8}{f(e['memory']):>8}")
    lines.append("growth exponents against the work (log-log least squares; 1.0 is linear): trace, first call "
                 "(trace + call), replay wall and CPU, and the simulator's memory (peak minus base)")
    return "\n".join(lines), out


def plot(rows: list[dict], ex: dict, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    good = [r for r in rows if "error" not in r]
    cases = list(dict.fromkeys(r["case"] for r in good))
    fig = Figure(figsize=(4.2 * max(1, len(cases)), 7.5))
    colours = {"fast": "tab:blue", "reference": "tab:red"}
    for col, case in enumerate(cases):
        top = fig.add_subplot(2, len(cases), col + 1)
        bottom = fig.add_subplot(2, len(cases), len(cases) + col + 1)
        for engine in dict.fromkeys(r["engine"] for r in good if r["case"] == case):
            rs = sorted((r for r in good if r["case"] == case and r["engine"] == engine), key=lambda r: r["work"])
            xs = [r["work"] / 1e9 for r in rs]
            e = ex.get((case, engine), {})
            c = colours.get(engine, "tab:gray")
            rep = e.get("replay")
            top.plot(xs, [r["calls"][2][0] for r in rs], "o-", color=c,
                     label=f"{engine} replay" + (f" (x^{rep:.2f})" if rep is not None else ""))
            top.plot(xs, [r["trace"][0] + r["calls"][0][0] for r in rs], "s--", color=c, alpha=0.6,
                     label=f"{engine} trace + 1st call")
            mem = e.get("memory")
            bottom.plot(xs, [(r["peak_rss"] - r["base_rss"]) / GIB for r in rs], "o-", color=c,
                        label=f"{engine} peak - base" + (f" (x^{mem:.2f})" if mem is not None else ""))
        rs = sorted((r for r in good if r["case"] == case and r["engine"] == "fast"), key=lambda r: r["work"]) or \
            sorted((r for r in good if r["case"] == case), key=lambda r: r["work"])
        bottom.plot([r["work"] / 1e9 for r in rs], [bound(r) / GIB for r in rs], ":", color="black", label="bound")
        bottom.plot([r["work"] / 1e9 for r in rs], [r["hbm_bytes"] / GIB for r in rs], "-.", color="0.5",
                    label="HBM data")
        for ax in (top, bottom):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("work (GFLOP)")
            ax.legend(fontsize=6)
        top.set_title(case, fontsize=9)
        top.set_ylabel("wall seconds")
        bottom.set_ylabel("GiB")
    fig.suptitle("nkihub simulator: time and memory against the work (this machine, this run)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the three smallest sizes of each case (16x in work)")
    ap.add_argument("--cases", default="matmul,flash,vit")
    ap.add_argument("--engines", default="fast,reference")
    ap.add_argument("--samples", default=str(DEFAULT_SAMPLES), help="aws-neuron/nki-samples checkout (matmul)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--more", type=int, default=0,
                    help="up to N more calls of the fast engine, until its batched plan is complete and tried, "
                         "then one more")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        case, size, engine, samples, more = json.loads(args.child)
        print("RESULT " + json.dumps(child(case, tuple(size) if isinstance(size, list) else size, engine,
                                           Path(samples), more)), flush=True)
        return 0
    samples = Path(args.samples)
    load = f", load average {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
    print(f"cores: {os.cpu_count()}{load}", flush=True)
    rows = []
    for case in [c for c in args.cases.split(",") if c]:
        if case == "matmul" and not (samples / MATMUL_FILE).is_file():
            print(f"matmul: skipped, no nki-samples checkout at {samples} (git clone "
                  f"https://github.com/aws-neuron/nki-samples {samples})")
            continue
        for size in SIZES[case][:3] if args.quick else SIZES[case]:
            for engine in [e for e in args.engines.split(",") if e]:
                r = run_one(case, size, engine, samples, args.timeout, args.more)
                rows.append(r)
                if "error" in r:
                    print(f"  {case} {label(case, size)} {engine}: error: {r['error']}", flush=True)
                else:
                    print(f"  {case} {label(case, size)} {engine}: replay {r['calls'][2][0]:.2f} s, peak "
                          f"{r['peak_rss'] / GIB:.2f} GiB ({r['note'] or 'reference'})", flush=True)
    print(table(rows))
    if hasattr(os, "getloadavg"):
        print("load average at the end: %.2f %.2f %.2f (1, 5, 15 min)" % os.getloadavg())
    print(verdicts(rows))
    text, ex = exponents(rows)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_scale.json").write_text(json.dumps(rows, indent=1))
    if any("error" not in r for r in rows):
        print(f"plot: {plot(rows, ex, out / 'bench_scale.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
