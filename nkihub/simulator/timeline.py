"""A schedule as a picture: Chrome/Perfetto trace JSON (opens in ui.perfetto.dev) and a PNG Gantt chart
with one lane per engine queue. Every time shown is a cost-model estimate.

Each DMA says what it moves in the author's terms: its slices carry ``transfer`` ('load of x (line 12)'),
``tensor`` and ``line`` args in the trace, and its bar in the PNG reads 'x:12' where it is wide enough
(``describe`` names any instruction so; the report uses it for what a wait waited for).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nkihub.simulator.uncertainty import latency_band

LANE_ORDER = ("tensor", "vector", "scalar", "gpsimd")


def transfer(prog, ins) -> tuple[str, str] | None:
    """(direction, tensor) of a DMA in the author's terms: ('load of', 'x') from HBM tensor x, ('store to',
    'out') into HBM tensor out, ('copy of', 'tile') on chip; None for an instruction that is no DMA."""
    from nkihub.simulator.isa import DMA, opdef
    from nkihub.simulator.program import AccessPattern
    if DMA not in opdef(ins.opcode).categories:
        return None
    aps = lambda d: [ap for ap in d.values() if isinstance(ap, AccessPattern)]
    hbm = lambda d: [ap for ap in aps(d) if not prog.tensors[ap.tensor].on_chip]
    name = lambda lst: prog.root(lst[0].tensor).name if lst else "?"
    if hbm(ins.src) and not hbm(ins.dst):
        return "load of", name(hbm(ins.src))
    if hbm(ins.dst) and not hbm(ins.src):
        return "store to", name(hbm(ins.dst))
    return "copy of", name(aps(ins.src))


def describe(prog, i: int) -> str:
    """Instruction ``i`` of ``prog`` in the author's terms: 'load of x (line 12)', 'store to out (line 20)',
    'copy of t (line 14)' for DMAs, 'nc_matmul (line 9)' for the rest."""
    ins = prog.instructions[i]
    where = f" (line {ins.loc.line})" if ins.loc else ""
    moved = transfer(prog, ins)
    return f"{moved[0]} {moved[1]}{where}" if moved else f"{ins.opcode}{where}"


@dataclass(frozen=True)
class Timeline:
    """Per-queue slices of a schedule: ``events`` are (lane, name, start_s, end_s, instruction index,
    source location text, what: 'load of x (line 12)' for a DMA, else ''); DMAs appear as a setup/wait
    slice (descriptor, fixed latency, waiting for DMA bandwidth) then a transfer slice."""

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
            what = describe(prog, i) if transfer(prog, ins) else ""
            if sch.xfer_start[i] > sch.start[i]:
                events.append((q, f"{ins.opcode} (setup/wait)", sch.start[i], sch.xfer_start[i], i, loc, what))
                events.append((q, ins.opcode, sch.xfer_start[i], sch.end[i], i, loc, what))
            else:
                events.append((q, ins.opcode, sch.start[i], sch.end[i], i, loc, what))
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
        for lane, name, t0, t1, idx, loc, what in self.events:
            args = {"instruction": idx, "source": loc}
            if what:
                direction, tensor, line = _parts(what)
                args.update(transfer=what, tensor=tensor, line=line)
                name = f"{name} {direction} {tensor}"
            out.append({"ph": "X", "name": name, "pid": 1, "tid": tid[lane], "ts": t0 * 1e6,
                        "dur": max(0.0, t1 - t0) * 1e6, "args": args})
        return {"traceEvents": out, "displayTimeUnit": "ns",
                "otherData": {"kernel": self.kernel, "target": self.target, "note": "times are estimates"}}

    def save_perfetto(self, path: "str | Path") -> Path:
        """Write the trace JSON to ``path``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_perfetto()))
        return path

    def save_png(self, path: "str | Path", *, width_in: float = 12.0) -> Path:
        """Render the Gantt chart (``figure``) to a PNG file with matplotlib's Agg backend."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.figure(width_in=width_in).savefig(path, dpi=110, bbox_inches="tight")   # keeps the legend whole
        return path

    def figure(self, *, width_in: float = 12.0):
        """The Gantt chart as a matplotlib Figure: one lane per queue, DMA bars labelled 'tensor:line', the
        legend right of the axes."""
        import matplotlib
        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure   # no pyplot: no global state, no GUI backend

        lanes = list(self.lanes) or ["(empty)"]
        fig = Figure(figsize=(width_in, 1.0 + 0.32 * len(lanes)))
        ax = fig.add_subplot(1, 1, 1)
        colours = {"tensor": "tab:red", "vector": "tab:blue", "scalar": "tab:green", "gpsimd": "tab:purple"}
        bars: dict = {}
        dmas: dict = {}      # instruction -> (lane, start, end, what): one label per DMA over its whole bar
        for lane, name, t0, t1, idx, _, what in self.events:
            key = (lane, name.endswith("(setup/wait)"))
            bars.setdefault(key, []).append((t0 * 1e6, max(t1 - t0, 0.0) * 1e6))
            if what:
                old = dmas.get(idx, (lane, t0, t1, what))
                dmas[idx] = (lane, min(old[1], t0), max(old[2], t1), what)
        for (lane, setup), spans in bars.items():
            y = lanes.index(lane)
            colour = "lightgrey" if setup else colours.get(lane, "tab:orange")
            ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=colour, linewidth=0)
        span_us = max(self.latency_s * 1e6, 1e-3)
        us_per_char = span_us / (width_in * 0.78 * 72 / 3.6)   # ~3.6 pt per character at 6 pt
        for lane, t0, t1, what in dmas.values():
            _, tensor, line = _parts(what)
            label = f"{tensor}:{line}" if line else tensor
            if (t1 - t0) * 1e6 >= (len(label) + 0.5) * us_per_char:
                ax.text((t0 + t1) / 2 * 1e6, lanes.index(lane), label, ha="center", va="center", fontsize=6,
                        clip_on=True)
        if any(setup for _, setup in bars):
            from matplotlib.patches import Patch
            # Outside the axes, to the right: a legend never covers a bar.
            ax.legend(handles=[Patch(facecolor="lightgrey", label="DMA setup / waiting\nfor bandwidth"),
                               Patch(facecolor="tab:orange", label="DMA moving data")],
                      loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False,
                      title="label: tensor:line", title_fontsize=7)
        ax.set_yticks(range(len(lanes)))
        ax.set_yticklabels(lanes, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, max(self.latency_s * 1e6, 1e-3))
        ax.set_xlabel("time (us, estimate)")
        ax.set_title(self.title(), fontsize=9, wrap=True)
        fig.tight_layout()
        return fig


def _parts(what: str) -> tuple[str, str, int | None]:
    """('load of', 'x', 12) from 'load of x (line 12)' (``describe``'s text of a DMA)."""
    head, _, rest = what.partition(" (line ")
    direction, _, tensor = head.rpartition(" ")
    return direction, tensor, int(rest.rstrip(")")) if rest else None
