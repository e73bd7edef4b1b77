"""A Ray cluster on this machine for tests and benchmarks: ``ray start --head --block`` on loopback,
stopped by its own process id when the block ends (never ``ray stop``, which would stop every Ray
process of the machine)."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_cluster(num_cpus: int = 2, timeout_s: float = 180.0):
    """Start a Ray head on 127.0.0.1 (``num_cpus`` CPUs, no dashboard, 100 MB object store) and yield its
    address (``127.0.0.1:PORT``); stop it and remove its session files on exit."""
    import ray  # noqa: F401  (the optional extra nkihub[ray]: fail here, before starting anything)
    port = _free_port()
    temp = Path("/tmp") / f"ray-nk-{os.getpid()}-{port}"   # short: Ray's socket paths have a length limit
    log = Path(tempfile.mkdtemp(prefix="nki-ray-")) / "ray.log"
    ray_cli = Path(sys.executable).parent / "ray"
    cmd = [str(ray_cli), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
           f"--num-cpus={num_cpus}", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}",
           "--object-store-memory=100000000"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        deadline = time.monotonic() + timeout_s
        while "Ray runtime started" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start did not come up:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        import ray
        if ray.is_initialized():
            ray.shutdown()
        proc.send_signal(signal.SIGINT)   # --block stops the cluster's processes on SIGINT
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)   # the process group started here, nothing else
            proc.wait()
        shutil.rmtree(temp, ignore_errors=True)
        shutil.rmtree(log.parent, ignore_errors=True)
