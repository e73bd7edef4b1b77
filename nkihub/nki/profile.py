"""``nki.profile`` and ``nki.benchmark``: the cost-model estimate of a kernel on a target.

Neither runs the kernel's math: the kernel is traced (or loaded from the compile cache) and its Program
is scheduled on the target's engine queues. Every figure of the returned report is an estimate.
"""
from __future__ import annotations

from nkihub.nki.compile import _compile
from nkihub.simulator.errors import NkiError
from nkihub.simulator.report import Report, summarize
from nkihub.simulator.costmodel import schedule
from nkihub.simulator.targets import get_target


def profile(kernel, *args, target=None, **kwargs) -> Report:
    """Estimate ``kernel`` on ``target`` (argument, else ``NEURON_PLATFORM_TARGET_OVERRIDE``, else trn2)
    for the shapes and dtypes of ``args`` (numpy arrays or torch tensors; their values are not read).

    Returns a ``simulator.report.Report``: ``lines`` (per source line: critical-path time, busy time, wait
    and what it waited for; the first is the bottleneck line), ``latency_s``, ``engine_active`` (engine ->
    fraction), ``bottleneck``, ``mfu``, ``hfu``, HBM and DMA figures, the critical path, the costliest
    source lines; ``.table()`` prints it. Nothing is written to disk: ``.timeline.save_perfetto(path)`` /
    ``.timeline.save_png(path)`` write the trace and the picture.
    """
    tgt = get_target(target)
    try:
        program, sch = _compile(kernel, args, kwargs, tgt, True)
        return summarize(sch if sch is not None else schedule(program, tgt))
    except NkiError as exc:
        raise exc.with_traceback(None) from None


def benchmark(kernel, *args, target=None, **kwargs) -> Report:
    """Like AWS ``nki.benchmark`` but estimated: the cost-model report of ``kernel`` on ``target``
    (nothing runs on a device; the latency is an estimate, not a measurement)."""
    return profile(kernel, *args, target=target, **kwargs)
