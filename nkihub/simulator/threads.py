"""The fast engine's compute threads ("lanes") and the thread pools kept quiet while they run.

Each lane is a daemon thread that sets its own torch intra-op pool to one thread once (torch keeps that
setting per thread, so the caller's torch is untouched) and runs each task inside one
``np.errstate(all="ignore")`` scope. While a plan runs, numpy's BLAS is limited to one thread per
caller (``executor.blas_pinned``): two lanes each calling a one-thread BLAS use both cores, where BLAS
threads, torch's OpenMP threads and the lanes competing for two cores made runs many times slower.

Tasks of one run are queued on the lanes under one lock, so the runs of several Python threads keep
the same order on every lane and a run's lanes never wait on each other across another run.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

_lock = threading.Lock()
_lanes: list["_Lane"] = []


class _Lane(threading.Thread):
    def __init__(self, index: int):
        super().__init__(name=f"nkihub-sim-{index}", daemon=True)
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()

    def run(self) -> None:
        if torch is not None:
            torch.set_num_threads(1)
        while True:
            fn, fut = self.tasks.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                with np.errstate(all="ignore"):
                    fut.set_result(fn())
            except BaseException as exc:  # handed to the caller, which re-raises it
                fut.set_exception(exc)


def run_on_lanes(tasks: list) -> list:
    """Run ``tasks[i]()`` on lane ``i`` (started on first use) and return their results in order; the
    first exception raised by a task is re-raised here (after every task has finished)."""
    futures = []
    with _lock:
        while len(_lanes) < len(tasks):
            lane = _Lane(len(_lanes))
            lane.start()
            _lanes.append(lane)
        for lane, fn in zip(_lanes, tasks):
            fut: Future = Future()
            lane.tasks.put((fn, fut))
            futures.append(fut)
    errors = [f.exception() for f in futures]
    for exc in errors:
        if exc is not None:
            raise exc
    return [f.result() for f in futures]
