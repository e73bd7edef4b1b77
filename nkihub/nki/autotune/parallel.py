"""Where candidates are evaluated: in this process, in local worker processes (one per core by default),
or on an existing Ray cluster (``ray=ADDRESS`` or ``RAY_ADDRESS``; Ray is the optional extra
``nkihub[ray]``). Every executor runs the same :func:`nki.autotune.candidate.evaluate` on the same tasks,
so the results do not depend on where they ran.

An executor's ``map(tasks)`` yields ``(index, result)`` as candidates finish.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import types
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from nkihub.nki.autotune.candidate import evaluate


class Inline:
    """Evaluates candidates one after another in this process (also the kernel of a non-portable ref)."""

    name = "inline"

    def __init__(self, kernel=None):
        self.kernel = kernel

    def map(self, tasks):
        for i, task in enumerate(tasks):
            yield i, evaluate(task, self.kernel)

    def close(self) -> None:
        pass


def _pin_worker() -> None:
    # one candidate per core: numpy's BLAS must not start a thread per core in every worker
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)


@contextlib.contextmanager
def _bare_main():
    """While worker processes start: a ``__main__`` with no file and no module name. A spawned process
    runs the parent's main script again (as ``__mp_main__``) before its first task, so a script that
    tunes at its top level, with no ``if __name__ == "__main__":`` guard, would sweep again in every
    worker (multiprocessing stops that with "An attempt has been made to start a new process before the
    current process has finished its bootstrapping phase"). The workers need nothing from the script: a
    task carries its kernel (by module, file or value, see KernelRef) and its data."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class LocalPool:
    """Worker processes on this machine (spawned, without the user's main script: a worker imports the
    kernel by its reference)."""

    name = "local"

    def __init__(self, workers: int):
        self.workers = workers
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_pin_worker)

    def map(self, tasks):
        with _bare_main():   # the pool starts its processes as tasks are submitted
            futures = {self._pool.submit(evaluate, task): i for i, task in enumerate(tasks)}
        while futures:
            done, _ = wait(futures, return_when=FIRST_COMPLETED)
            for f in done:
                yield futures.pop(f), f.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class RayCluster:
    """An existing Ray cluster at ``address`` (``ray start --head`` prints it; ``auto`` finds a local one)."""

    name = "ray"

    def __init__(self, address: str):
        try:
            import ray
        except ImportError:
            raise ImportError("--ray / RAY_ADDRESS needs Ray: pip install 'nkihub[ray]'") from None
        self._ray = ray
        self.address = address
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        self._remote = ray.remote(num_cpus=1)(evaluate)

    @property
    def workers(self) -> int:
        return int(self._ray.cluster_resources().get("CPU", 1))

    def map(self, tasks):
        refs = {self._remote.remote(task): i for i, task in enumerate(tasks)}
        while refs:
            done, _ = self._ray.wait(list(refs), num_returns=1)
            for ref in done:
                yield refs.pop(ref), self._ray.get(ref)

    def close(self) -> None:
        pass  # the cluster is the user's: leave it running (ray.shutdown() only disconnects at exit)


def ray_address(ray: str | None) -> str | None:
    """The Ray cluster to use: ``ray`` if given, else ``RAY_ADDRESS``, else None (local workers)."""
    return ray or os.environ.get("RAY_ADDRESS", "").strip() or None


def executor(workers: int | None, ray: str | None, portable: bool, kernel=None, n_tasks: int | None = None):
    """The executor for a sweep: Ray when an address is given, else ``workers`` local processes (default
    one per core), else this process (one worker, one task, or a kernel other processes cannot find)."""
    address = ray_address(ray)
    if address is not None:
        if not portable:
            raise ValueError("a Ray sweep needs a kernel defined at the top level of a module or file")
        return RayCluster(address)
    n = workers if workers is not None else (os.cpu_count() or 1)
    if n < 1:
        raise ValueError(f"autotune workers={workers}: at least 1")
    if n == 1 or not portable or (n_tasks is not None and n_tasks <= 1):
        return Inline(kernel)
    return LocalPool(n if n_tasks is None else min(n, n_tasks))
