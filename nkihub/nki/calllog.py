"""A per-process log of kernel calls with the cost model's estimate of each, so a model run can report how
long its kernels would take on a NeuronCore.

On while the emulated ``neuron`` device is (``nkihub.device.emulate``), off otherwise unless
``calllog.enable()`` turns it on. Each ``@nki.jit`` call that runs on the simulator appends one
:class:`KernelCall`: the kernel, its input shapes and dtypes, the device its caller's tensors were on, the
target, the estimated latency (an estimate, computed once per compiled kernel and reused) and the host
time the simulation took (a measurement of this machine, not of a NeuronCore).

    log = calllog.log()
    print(log.table())                 # per kernel: calls, estimated us per call and in total
    log.estimated_s()                  # summed estimated on-device kernel time
"""
from __future__ import annotations

import json
import sys
import threading
from collections import defaultdict
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class KernelCall:
    kernel: str
    shapes: tuple
    dtypes: tuple
    device: str            # where the caller's tensors were ("cpu", "neuron:0", "numpy")
    target: str
    estimated_s: float     # cost-model latency of one call on ``target`` (an estimate)
    simulated_s: float     # host seconds the simulator took (this machine, not a NeuronCore)


class CallLog:
    """The calls recorded in this process (thread-safe; bounded, oldest dropped past ``limit``)."""

    def __init__(self, limit: int = 100_000):
        self._lock = threading.Lock()
        self.limit = limit
        self.enabled = False
        self._calls: list[KernelCall] = []
        self.dropped = 0

    def record(self, call: KernelCall) -> None:
        with self._lock:
            self._calls.append(call)
            if len(self._calls) > self.limit:
                del self._calls[0]
                self.dropped += 1

    @property
    def calls(self) -> tuple[KernelCall, ...]:
        with self._lock:
            return tuple(self._calls)

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()
            self.dropped = 0

    def __len__(self) -> int:
        return len(self._calls)

    def estimated_s(self, device: str | None = None) -> float:
        """Summed estimated latency of the recorded calls (of those on ``device`` when given)."""
        return sum(c.estimated_s for c in self.calls if device is None or c.device == device)

    def summary(self) -> dict:
        """kernel -> {"calls", "estimated_s", "simulated_s"} summed over the recorded calls."""
        out: dict = defaultdict(lambda: {"calls": 0, "estimated_s": 0.0, "simulated_s": 0.0})
        for c in self.calls:
            row = out[c.kernel]
            row["calls"] += 1
            row["estimated_s"] += c.estimated_s
            row["simulated_s"] += c.simulated_s
        return dict(out)

    def table(self) -> str:
        head = ["kernel", "calls", "est. us/call", "est. us total", "simulated ms"]
        rows = [[k, str(r["calls"]), f"{r['estimated_s'] / r['calls'] * 1e6:.1f}", f"{r['estimated_s'] * 1e6:.1f}",
                 f"{r['simulated_s'] * 1e3:.1f}"] for k, r in sorted(self.summary().items())]
        rows.append(["total (estimate)", str(len(self.calls)), "", f"{self.estimated_s() * 1e6:.1f}", ""])
        widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [head] + rows)

    def to_json(self) -> str:
        return json.dumps({"calls": [asdict(c) for c in self.calls], "dropped": self.dropped}, indent=1)


_LOG = CallLog()


def log() -> CallLog:
    """This process's kernel call log."""
    return _LOG


def enable(on: bool = True) -> None:
    """Start (or stop) recording kernel calls."""
    _LOG.enabled = on


def enabled() -> bool:
    """True when calls are being recorded: ``enable()`` was called, or the emulated device is on."""
    return _LOG.enabled or _emulating()


def _emulating() -> bool:
    torch = sys.modules.get("torch")
    is_emulated = getattr(getattr(torch, "neuron", None), "is_emulated", None)
    return bool(callable(is_emulated) and is_emulated())
