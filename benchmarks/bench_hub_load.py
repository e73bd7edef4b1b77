"""Load test of the local Hub: N client processes fetch a kernel (cold and warm cache) while one process
publishes new versions of it, on loopback, for a fixed time per stage.

    .venv/bin/python benchmarks/bench_hub_load.py [--clients 1,2,4,8,16] [--seconds 10]

The server runs as its own process (``nkihub serve``). Each client loops until the stage ends,
alternating a cold fetch (a fresh, empty cache) and a warm one (its own cache), each through
``nkihub.kernels.install_kernel(repo, version=1)``: the same resolve, download and verification path as
``nkihub.kernels.get``, without the import. After every fetch the client checks the variant independently:
every file against ``metadata.json`` and the files against each other (``kernel.json``'s version and
``ops.py``'s constant are the ones the publisher wrote together), so a torn or mixed snapshot counts
as corrupt. Every HTTP request is timed (to its response headers) through huggingface_hub's client
factory. Printed per stage: requests/s, request p50/p99, fetches/s, fetch p50/p99 (cold, warm), failed
requests (5xx, transport errors, failed fetches), 4xx answers, corrupt files (must be 0), versions
published meanwhile; then the largest N the server held (no failure, no corrupt file).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = "neuron/load-toy"


def write_package(root: Path, minor: int) -> Path:
    """A kernel source package whose kernel.json version and ops.FACTOR are tied: 1.0.<minor>, minor."""
    pkg = root / f"pkg-{minor}" / "load_toy"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .ops import FACTOR, scale\n")
    (pkg / "ops.py").write_text(f"FACTOR = {minor}\n\n\ndef scale(x):\n    return [v * FACTOR for v in x]\n"
                                + "# padding so that a file takes several reads\n" * 200)
    (pkg / "kernel.json").write_text(json.dumps({"name": "load-toy", "package": "load_toy",
                                                 "version": f"1.0.{minor}", "functions": ["scale"]}))
    return pkg


def wait_for_start(clock, seconds: float) -> float:
    """Block until the stage's clock is set (every process is ready); return the stage's deadline."""
    while clock.value == 0.0:
        time.sleep(0.005)
    while time.time() < clock.value:
        time.sleep(0.001)
    return clock.value + seconds


def publisher(url: str, root: str, clock, seconds: float, first: int, ready, out) -> None:
    os.environ["HF_ENDPOINT"] = url
    from nkihub.hub_client import PublishConflictError
    from nkihub.kernels.publish import publish

    done, conflicts, minor = 0, 0, first
    ready.put("publisher")
    deadline = wait_for_start(clock, seconds)
    while time.time() < deadline:
        try:
            publish(write_package(Path(root), minor), REPO)
            done += 1
        except PublishConflictError:
            conflicts += 1
        minor += 1
    out.put({"published": done, "conflicts": conflicts})


def client(url: str, root: str, clock, seconds: float, ready, out) -> None:
    os.environ["HF_ENDPOINT"] = url
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    import httpx2
    from huggingface_hub import set_client_factory

    from nkihub import kernels
    from nkihub.kernels.verify import verify_variant

    requests: list[float] = []
    statuses: dict[int, int] = {}

    def on_request(request):
        request.extensions["t0"] = time.perf_counter()

    client_errors: list[str] = []

    def on_response(response):
        requests.append(time.perf_counter() - response.request.extensions["t0"])
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        if response.status_code >= 400 and len(client_errors) < 5:
            client_errors.append(f"{response.status_code} {response.request.method} {response.request.url.path}")

    from huggingface_hub.utils._http import hf_request_event_hook

    set_client_factory(lambda: httpx2.Client(event_hooks={"request": [hf_request_event_hook, on_request],
                                                          "response": [on_response]},
                                             follow_redirects=True, timeout=60))
    warm = Path(root) / f"warm-{os.getpid()}"
    fetches = {"cold": [], "warm": []}
    failed = corrupt = 0
    errors: list[str] = []
    os.environ["KERNELS_CACHE"] = str(warm)
    kernels.install_kernel(REPO, version=1)  # imports and first-use setup happen before the clock starts
    requests.clear()
    statuses.clear()
    client_errors.clear()
    ready.put("client")
    deadline = wait_for_start(clock, seconds)
    n = 0
    while time.time() < deadline:
        kind = "cold" if n % 2 == 0 else "warm"
        cache = Path(tempfile.mkdtemp(dir=root, prefix="cold-")) if kind == "cold" else warm
        os.environ["KERNELS_CACHE"] = str(cache)
        t0 = time.perf_counter()
        try:
            path = kernels.install_kernel(REPO, version=1)
            fetches[kind].append(time.perf_counter() - t0)
            bad = verify_variant(path)
            spec = json.loads((path / "load_toy" / "kernel.json").read_text())
            factor = (path / "load_toy" / "ops.py").read_text().splitlines()[0]
            minor = int(spec["version"].split(".")[2])
            corrupt += len(bad) + (factor != f"FACTOR = {minor}")
        except Exception as e:  # a failed fetch is a failed request: counted, and its reason kept
            failed += 1
            errors.append(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
        if kind == "cold":
            shutil.rmtree(cache, ignore_errors=True)
        n += 1
    out.put({"requests": requests, "statuses": statuses, "fetches": fetches, "failed": failed, "corrupt": corrupt,
             "errors": errors[:5], "client_errors": client_errors})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(root: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "nkihub.cli", "serve", "--root", str(root), "--port",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"the Hub did not start: {proc.stderr.read()[-2000:]}")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def stage(url: str, root: Path, n: int, seconds: float, first_version: int) -> dict:
    ctx = mp.get_context("spawn")
    out, ready, clock = ctx.Queue(), ctx.Queue(), ctx.Value("d", 0.0)
    procs = [ctx.Process(target=client, args=(url, str(root), clock, seconds, ready, out)) for _ in range(n)]
    procs.append(ctx.Process(target=publisher, args=(url, str(root), clock, seconds, first_version, ready, out)))
    for p in procs:
        p.start()
    for _ in procs:  # every process has imported and fetched once: only then does the clock start
        ready.get(timeout=600)
    clock.value = time.time() + 0.2
    results = [out.get(timeout=seconds + 300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    pub = next(r for r in results if "published" in r)
    clients = [r for r in results if "requests" in r]
    requests = [t for r in clients for t in r["requests"]]
    statuses: dict[int, int] = {}
    for r in clients:
        for code, k in r["statuses"].items():
            statuses[code] = statuses.get(code, 0) + k
    cold = [t for r in clients for t in r["fetches"]["cold"]]
    warm = [t for r in clients for t in r["fetches"]["warm"]]
    failed = sum(r["failed"] for r in clients) + sum(k for c, k in statuses.items() if c >= 500)
    return {"N": n, "seconds": seconds, "requests": len(requests), "req_per_s": len(requests) / seconds,
            "req_p50_ms": pct(requests, 0.5), "req_p99_ms": pct(requests, 0.99),
            "fetch_per_s": (len(cold) + len(warm)) / seconds,
            "cold_p50_ms": pct(cold, 0.5), "cold_p99_ms": pct(cold, 0.99),
            "warm_p50_ms": pct(warm, 0.5), "warm_p99_ms": pct(warm, 0.99),
            "failed": failed, "http_4xx": sum(k for c, k in statuses.items() if 400 <= c < 500),
            "corrupt": sum(r["corrupt"] for r in clients), "published": pub["published"],
            "publish_conflicts": pub["conflicts"], "errors": sorted({e for r in clients for e in r["errors"]})[:5],
            "client_errors": sorted({e for r in clients for e in r["client_errors"]})[:5]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1,2,4,8,16", help="comma-separated client counts, one stage each")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each stage")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.clients.split(",")]
    root = Path(tempfile.mkdtemp(prefix="nkihub-load-"))
    server, url = start_server(root / "hub")
    try:
        os.environ["HF_ENDPOINT"] = url
        from nkihub.kernels.publish import publish

        publish(write_package(root, 0), REPO)
        print(f"Hub {url}; {REPO} v1.0.0 published; stages of {args.seconds:g} s\n")
        head = (f"{'N':>3} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'fetch/s':>7} {'cold p50/p99 ms':>16} "
                f"{'warm p50/p99 ms':>16} {'failed':>6} {'4xx':>4} {'corrupt':>7} {'published':>9}")
        print(head)
        held = 0
        for i, n in enumerate(counts):
            r = stage(url, root, n, args.seconds, first_version=1 + 100_000 * i)
            print(f"{n:>3} {r['req_per_s']:>7.1f} {r['req_p50_ms']:>7.1f} {r['req_p99_ms']:>7.1f} "
                  f"{r['fetch_per_s']:>7.2f} {r['cold_p50_ms']:>7.0f}/{r['cold_p99_ms']:<8.0f} "
                  f"{r['warm_p50_ms']:>7.0f}/{r['warm_p99_ms']:<8.0f} {r['failed']:>6} {r['http_4xx']:>4} "
                  f"{r['corrupt']:>7} {r['published']:>9}", flush=True)
            for e in r["errors"]:
                print(f"      error: {e}")
            for e in r["client_errors"]:
                print(f"      4xx/5xx: {e}")
            if r["failed"] == 0 and r["corrupt"] == 0 and r["requests"] > 0:
                held = max(held, n)
        print(f"\nlargest N held (0 failed requests, 0 corrupt files): {held}")
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
