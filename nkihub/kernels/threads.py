"""Keep numpy's BLAS and torch's thread pools from fighting while the simulator runs inside a torch op.

A torch model spends most of its time in torch's own (OpenMP) thread pool; when a kernel op hands
control to the numpy simulator, numpy's BLAS wakes its own pool while torch's threads are still
spinning, and on a small machine the two pools oversubscribe the cores. The simulator's matmuls are
tile-sized (at most 128 x 512), where one BLAS thread is as fast as many, so :func:`pinned` limits
numpy's BLAS (to ``NKIHUB_SIM_THREADS``, default 1) for the duration of the op and restores it after.
torch's own pool is left alone: its size is process-wide, and other Python threads (a data loader, a
second model) keep using it while an op simulates; ``pinned(torch_threads=True)`` pins it as well.

Pinning is process-wide (thread pools are), so it is reference counted: with several Python threads
inside ops at once, the first one in pins and the last one out restores.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_saved: tuple | None = None  # (torch threads, threadpoolctl limiter) of the outermost pin
_controller = None


def _blas_controller():
    """A cached threadpoolctl controller for the BLAS libraries loaded in this process."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        import numpy  # noqa: F401  (its BLAS must be loaded before the controller looks for it)

        _controller = ThreadpoolController().select(user_api="blas")
    return _controller


def blas_threads() -> list[int]:
    """The thread count of each BLAS library loaded (numpy's OpenBLAS, MKL, ...)."""
    return [lib.num_threads for lib in _blas_controller().lib_controllers]


def _pin(n: int, torch_threads: bool):
    import torch

    before = torch.get_num_threads() if torch_threads else None
    if torch_threads:
        torch.set_num_threads(n)
    return before, _blas_controller().limit(limits=n)


def _restore(saved) -> None:
    import torch

    before, limiter = saved
    limiter.restore_original_limits()
    if before is not None:
        torch.set_num_threads(before)


@contextmanager
def pinned(threads: int | None = None, *, torch_threads: bool = False):
    """Limit BLAS (and torch's pool when ``torch_threads``) to ``threads`` threads (default
    ``NKIHUB_SIM_THREADS``, 1) inside the block; the outermost block's settings apply.

    Re-entrant and safe across Python threads; ``threads=0`` (or the variable set to 0) pins nothing.
    """
    global _depth, _saved
    if threads is None:
        from .config import sim_threads

        threads = sim_threads()
    if threads <= 0:
        yield
        return
    with _lock:
        _depth += 1
        if _depth == 1:
            try:
                _saved = _pin(threads, torch_threads)
            except BaseException:
                _depth -= 1
                raise
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                saved, _saved = _saved, None
                _restore(saved)
