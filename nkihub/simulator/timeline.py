"""A schedule as a picture: Chrome/Perfetto trace JSON (opens in ui.perfetto.dev) and a PNG Gantt chart
with one lane per engine queue. Every time shown is a cost-model estimate.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nkihub.simulator.uncertainty import latency_band

LANE_ORDER = ("tensor", "vector", "scalar", "gpsimd")


@dataclass(frozen=True)
class Timeline:
    """Per-queue slices of a schedule: ``events`` are (lane, name, start_s, end_s, instruction index,
    source location text); DMAs appear as a setup/wait slice (descriptor, fixed latency, waiting for DMA
    bandwidth) then a transfer slice."""

    kernel: str
    target: str
    lanes: tuple
    events: tuple

    @classmethod
    def from_schedule(cls, sch) -> "Timeline":
        """Build from a ``costmodel.Schedule``."""
        prog = sch.program
        events = []
        for i, ins in enumerate(prog.instructions):
            loc = f"{ins.loc.file}:{ins.loc.line}" if ins.loc else ""
            q = sch.queue[i]
            if sch.xfer_start[i] > sch.start[i]:
                events.append((q, f"{ins.opcode} (setup/wait)", sch.start[i], sch.xfer_start[i], i, loc))
                events.append((q, ins.opcode, sch.xfer_start[i], sch.end[i], i, loc))
            else:
                events.append((q, ins.opcode, sch.start[i], sch.end[i], i, loc))
        used = {e[0] for e in events}
        lanes = [q for q in LANE_ORDER if q in used]
        lanes += sorted((q for q in used if q not in LANE_ORDER), key=lambda q: (len(q), q))
        return cls(prog.name, sch.target.name, tuple(lanes), tuple(events))

    @property
    def latency_s(self) -> float:
        return max((e[3] for e in self.events), default=0.0)

    def title(self) -> str:
        """'kernel on target: estimated X us (likely A-B us)', the range from ``simulator.uncertainty``."""
        lo, hi = latency_band(self.latency_s, self.target)
        return (f"{self.kernel} on {self.target}: estimated {self.latency_s * 1e6:.2f} us "
                f"(likely {lo * 1e6:.2f}-{hi * 1e6:.2f} us)")

    def to_perfetto(self) -> dict:
        """Chrome trace-event JSON: one thread per lane, times in microseconds (estimates)."""
        tid = {lane: k + 1 for k, lane in enumerate(self.lanes)}
        out = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0,
                "args": {"name": f"{self.title()} (cost-model estimate)"}}]
        for lane, k in tid.items():
            out.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": k, "args": {"name": lane}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": k, "args": {"sort_index": k}})
        for lane, name, t0, t1, idx, loc in self.events:
            out.append({"ph": "X", "name": name, "pid": 1, "tid": tid[lane], "ts": t0 * 1e6,
                        "dur": max(0.0, t1 - t0) * 1e6, "args": {"instruction": idx, "source": loc}})
        return {"traceEvents": out, "displayTimeUnit": "ns",
                "otherData": {"kernel": self.kernel, "target": self.target, "note": "times are estimates"}}

    def save_perfetto(self, path: "str | Path") -> Path:
        """Write the trace JSON to ``path``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_perfetto()))
        return path

    def save_png(self, path: "str | Path", *, width_in: float = 12.0) -> Path:
        """Render a Gantt chart (one lane per queue) to a PNG file with matplotlib's Agg backend."""
        import matplotlib
        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure   # no pyplot: no global state, no GUI backend

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        lanes = list(self.lanes) or ["(empty)"]
        fig = Figure(figsize=(width_in, 1.0 + 0.32 * len(lanes)))
        ax = fig.add_subplot(1, 1, 1)
        colours = {"tensor": "tab:red", "vector": "tab:blue", "scalar": "tab:green", "gpsimd": "tab:purple"}
        bars: dict = {}
        for lane, name, t0, t1, _, _ in self.events:
            key = (lane, name.endswith("(setup/wait)"))
            bars.setdefault(key, []).append((t0 * 1e6, max(t1 - t0, 0.0) * 1e6))
        for (lane, setup), spans in bars.items():
            y = lanes.index(lane)
            colour = "lightgrey" if setup else colours.get(lane, "tab:orange")
            ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=colour, linewidth=0)
        if any(setup for _, setup in bars):
            from matplotlib.patches import Patch
            ax.legend(handles=[Patch(facecolor="lightgrey", label="DMA fixed latency / waiting for bandwidth"),
                               Patch(facecolor="tab:orange", label="DMA moving data")],
                      loc="lower right", fontsize=7, framealpha=0.9)
        ax.set_yticks(range(len(lanes)))
        ax.set_yticklabels(lanes, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, max(self.latency_s * 1e6, 1e-3))
        ax.set_xlabel("time (us, estimate)")
        ax.set_title(self.title(), fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        return path
