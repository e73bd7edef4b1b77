"""The cost model's report: what a kernel author reads to see how fast a kernel would run and why.

``estimate(program, target)`` schedules a Program (``costmodel``) and summarises it: estimated latency,
per-engine active time, MFU and HFU against the target's Tensor Engine peak, HBM traffic, DMA count and
size, the critical path and the source lines that cost most. Every time is an estimate of the cost model.

The report opens with one row per kernel source line (``LineCost``): its time on the critical path, its
engines' busy time, and how long its instructions waited and for what (the DMA transfers that held the
bandwidth, or the instruction whose result or shared port it needed, named by tensor and source line), so
the author optimises the line that costs the latency, not the one that merely runs longest.

- MFU: useful matmul flops (2*K*M*N of each nc_matmul) over latency x the peak for its input dtype.
- HFU: all Tensor Engine flops (matmuls plus transposes through the identity, 2*P*P*F) over the same.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from nkihub.simulator.costmodel import COMPUTE_QUEUES, Schedule, schedule
from nkihub.simulator.isa import MATMUL
from nkihub.simulator.isa.base import opdef
from nkihub.simulator.rules import partitions
from nkihub.simulator.targets import get_target
from nkihub.simulator.timeline import Timeline, describe
from nkihub.simulator.uncertainty import latency_band

ENGINES = (*COMPUTE_QUEUES, "dma")
TOP_N = 10
PATH_N = 12


@dataclass(frozen=True)
class CostLine:
    """Time spent by the instructions one kernel source line emitted (or one critical-path segment)."""

    source: str          # file:line
    text: str            # the kernel source line
    opcode: str
    engine: str
    count: int
    time_s: float        # summed instruction time (estimate); DMA time includes its fixed latency


@dataclass(frozen=True)
class LineCost:
    """One kernel source line's share of a schedule (estimates): ``path_s`` its instructions' time on the
    critical path, ``busy_s`` their engine time (a DMA's: its own data movement), ``wait_s`` how long they
    waited (a queue standing free for a dependency or shared port, a DMA's data waiting for bandwidth
    other transfers held) and ``waits_for`` what held them, most first (text)."""

    source: str          # file:line
    text: str
    opcode: str
    engine: str
    count: int
    path_s: float
    busy_s: float
    wait_s: float
    waits_for: str


@dataclass(frozen=True)
class Report:
    """The cost-model estimate of one compiled kernel on one target (all times are estimates)."""

    kernel: str
    target: str
    latency_s: float
    latency_low_s: float           # the range the hardware likely falls in (simulator.uncertainty)
    latency_high_s: float
    engine_busy_s: dict
    engine_active: dict            # engine -> fraction of latency busy (dma: any transfer in flight)
    bottleneck: str                # engine with the most time on the critical path
    critical_path_s: dict          # engine -> seconds on the critical path
    critical_path: tuple           # CostLine segments, first to last (consecutive alike merged)
    critical_path_count: int       # instructions on the critical path
    critical_path_left_out: tuple  # (segments, instructions, seconds) not listed in critical_path
    lines: tuple                   # LineCost per source line, most critical-path time first
    mfu: float
    hfu: float
    flops: int
    hardware_flops: int
    roofline_s: float              # max(flops at peak, HBM bytes at the core's HBM bandwidth)
    hbm_bytes: int
    hbm_bytes_per_s: float
    hbm_bandwidth_use: float       # fraction of the core's share of HBM bandwidth
    dma_count: int
    dma_bytes: int
    dma_avg_bytes: float
    dma_engine_use: float          # fraction of the DMA engines' time moving data
    instruction_count: int
    semaphore_count: int
    top: tuple                     # CostLine per source line, most time first
    timeline: Timeline = field(compare=False, repr=False)

    def to_json(self) -> dict:
        """Every field but the timeline, as JSON-able values (times in seconds, labelled estimates)."""
        d = {k: v for k, v in asdict(self).items() if k != "timeline"}
        d["critical_path"] = [asdict(c) for c in self.critical_path]
        d["top"] = [asdict(c) for c in self.top]
        d["lines"] = [asdict(c) for c in self.lines]
        d["note"] = "all times are cost-model estimates, not measurements"
        return d

    def to_perfetto(self) -> dict:
        """The timeline as Chrome/Perfetto trace JSON."""
        return self.timeline.to_perfetto()

    def save_json(self, path) -> None:
        from pathlib import Path
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    def __str__(self) -> str:
        return self.table()

    def table(self) -> str:
        """A readable summary."""
        us = lambda s: f"{s * 1e6:,.2f} us"
        lines = [f"{self.kernel} on {self.target}: estimated latency {us(self.latency_s)} (estimate)"]
        lines += self._line_table(us) + [""]
        lines += [
                 f"  likely range      {us(self.latency_low_s)} - {us(self.latency_high_s)} (estimate, from the "
                 "cost model's error on published measurements)",
                 f"  roofline          {us(self.roofline_s)} (estimate: flops at peak or HBM bytes at bandwidth)",
                 f"  MFU / HFU         {self.mfu:6.1%} / {self.hfu:6.1%}   ({self.flops:,} matmul flops)",
                 f"  HBM               {self.hbm_bytes:,} B, {self.hbm_bytes_per_s / 1e9:,.1f} GB/s "
                 f"({self.hbm_bandwidth_use:.1%} of the core's share, estimate)",
                 f"  DMA               {self.dma_count:,} transfers, average {self.dma_avg_bytes:,.0f} B, "
                 f"engines moving data {self.dma_engine_use:.1%} of the time",
                 f"  instructions      {self.instruction_count:,}, semaphore waits {self.semaphore_count:,}",
                 f"  bottleneck        {self.bottleneck} (most time on the critical path)",
                 "",
                 f"  {'engine':<8} {'busy (estimate)':>18} {'active':>8} {'critical path':>16}"]
        for e in ENGINES:
            lines.append(f"  {e:<8} {us(self.engine_busy_s.get(e, 0.0)):>18} {self.engine_active.get(e, 0.0):>8.1%} "
                         f"{us(self.critical_path_s.get(e, 0.0)):>16}")
        lines += ["", "  top source lines by instruction time (estimates; DMA time includes fixed latency):"]
        for c in self.top:
            lines.append(f"  {us(c.time_s):>14} {c.count:>7}x {c.opcode:<14} {c.engine:<7} {c.source}")
            if c.text:
                lines.append(f"  {'':>14}          {c.text.strip()[:90]}")
        shown = sum(c.time_s for c in self.critical_path)
        left_seg, left_n, left_s = self.critical_path_left_out
        lines += ["", f"  critical path (estimate, first to last): {self.critical_path_count:,} instructions, "
                  f"{us(shown + left_s)} of the {us(self.latency_s)} latency (the rest: gaps between them)"]
        for c in self.critical_path:
            lines.append(f"  {us(c.time_s):>14} {c.count:>7}x {c.opcode:<14} {c.engine:<7} {c.source}")
        if left_seg:
            lines.append(f"  {us(left_s):>14} {left_n:>7}x left out: {left_seg:,} shorter segments between those "
                         "listed (the per-line table above counts them)")
        return "\n".join(lines)

    def _line_table(self, us) -> list[str]:
        """The per-source-line rows that open the table."""
        if not self.lines:
            return []
        top = self.lines[0]
        out = [f"  bottleneck line   {top.source} ({us(top.path_s)} of the critical path, estimate)",
               f"                    {top.text.strip()[:100]}"]
        if top.wait_s > 0 and top.waits_for:
            out.append(f"                    waits {us(top.wait_s)} (estimate) for {top.waits_for}")
        out += ["", "  by source line (estimates; most critical-path time first):",
                f"  {'critical path':>14} {'busy':>12} {'waiting':>12} {'count':>7}  line"]
        for c in self.lines[:TOP_N]:
            out.append(f"  {us(c.path_s):>14} {us(c.busy_s):>12} {us(c.wait_s):>12} {c.count:>6}x  {c.source}  "
                       f"{c.opcode} ({c.engine})")
            if c.text:
                out.append(f"  {'':>49}{c.text.strip()[:90]}")
            if c.wait_s > 0 and c.waits_for:
                out.append(f"  {'':>49}waits for {c.waits_for}")
        if len(self.lines) > TOP_N:
            out.append(f"  ... {len(self.lines) - TOP_N} more lines, "
                       f"{us(sum(c.path_s for c in self.lines[TOP_N:]))} of the critical path")
        return out


def _family(queue: str) -> str:
    return queue if queue in COMPUTE_QUEUES else "dma"


def _union_s(spans) -> float:
    total, cur0, cur1 = 0.0, None, None
    for a, b in sorted(spans):
        if cur1 is None or a > cur1:
            if cur1 is not None:
                total += cur1 - cur0
            cur0, cur1 = a, b
        else:
            cur1 = max(cur1, b)
    return total + ((cur1 - cur0) if cur1 is not None else 0.0)


def _flops(program, target):
    """(model flops, hardware flops, peak-normalised seconds of each) over the Tensor Engine work."""
    bf16 = target.tensor_peak_flops["bfloat16"]
    model = hw = 0
    model_s = hw_s = 0.0
    for ins in program.instructions:
        if ins.engine != "tensor" or MATMUL not in opdef(ins.opcode).categories:
            continue
        if "stationary" in ins.src:
            st, mv = ins.src["stationary"], ins.src["moving"]
            k = partitions(st)
            f = 2 * k * (st.size // max(1, k)) * (mv.size // max(1, partitions(mv)))
            peak = target.tensor_peak_flops.get(program.tensors[st.tensor].dtype, bf16)
            model += f
            model_s += f / peak
        else:
            data = next(iter(ins.src.values()))
            p = partitions(data)
            f = 2 * p * p * (data.size // max(1, p))
            peak = target.tensor_peak_flops.get(program.tensors[data.tensor].dtype, bf16)
        hw += f
        hw_s += f / peak
    return model, hw, model_s, hw_s


def _loc(ins) -> tuple[str, str]:
    return (f"{ins.loc.file}:{ins.loc.line}", ins.loc.text) if ins.loc else ("?", "")


def _merge(items, key) -> list[CostLine]:
    out: dict = {}
    for ins, queue, t in items:
        src, text = _loc(ins)
        k = key(src, ins.opcode, _family(queue))
        c = out.get(k)
        out[k] = CostLine(src, text, ins.opcode, _family(queue), (c.count if c else 0) + 1,
                          (c.time_s if c else 0.0) + t)
    return list(out.values())


def _waits_for(blockers: dict, total: float) -> str:
    """'DMA bandwidth held by load of y (line 16) 3.90 us, load of x (line 15) 2.10 us; nc_matmul (line 9)
    1.20 us' from {(kind, label): seconds}: the biggest holders (at most 4) of at least 5% of the wait."""
    kinds: dict = {}
    for (kind, label), t in sorted(blockers.items(), key=lambda kv: -kv[1])[:4]:
        if t >= 0.05 * total:
            kinds.setdefault(kind, []).append(f"{label} {t * 1e6:,.2f} us")
    head = {"bandwidth": "DMA bandwidth held by ", "port": "the shared port held by ", "dep": ""}
    return "; ".join(head[k] + ", ".join(v) for k, v in kinds.items())


def _line_costs(sch: Schedule, path: list[int]) -> list[LineCost]:
    """One LineCost per source line, most critical-path time first (then busy time)."""
    prog = sch.program
    on_path = set(path)
    rows: dict = {}
    for i, ins in enumerate(prog.instructions):
        src, text = _loc(ins)
        fam = _family(sch.queue[i])
        r = rows.setdefault(src, {"text": text, "ops": {}, "count": 0, "path": 0.0, "busy": 0.0, "wait": 0.0,
                                  "by": {}})
        r["ops"][(ins.opcode, fam)] = r["ops"].get((ins.opcode, fam), 0) + 1
        r["count"] += 1
        if i in on_path:
            r["path"] += sch.end[i] - sch.start[i]
        r["busy"] += sch.cost[i] if fam == "dma" else sch.end[i] - sch.start[i]
        dep = sch.dep_wait_s[i] if sch.dep_wait_s else 0.0
        if dep > 0:
            r["wait"] += dep
            key = ("port" if sch.reason[i] == "port" else "dep", describe(prog, sch.pred[i]))
            r["by"][key] = r["by"].get(key, 0.0) + dep
        bw = sch.bandwidth_wait_s[i] if sch.bandwidth_wait_s else 0.0
        holders = sch.bandwidth_holders[i] if sch.bandwidth_holders else ()
        if bw > 0 and holders:
            r["wait"] += bw
            over = sum(o for _, o in holders)
            for j, o in holders:   # the wait shared out by how long each holder moved data in it
                key = ("bandwidth", describe(prog, j))
                r["by"][key] = r["by"].get(key, 0.0) + bw * o / over
    out = []
    for src, r in rows.items():
        (op, fam), _ = max(r["ops"].items(), key=lambda kv: kv[1])
        out.append(LineCost(src, r["text"], op, fam, r["count"], r["path"], r["busy"], r["wait"],
                            _waits_for(r["by"], r["wait"])))
    return sorted(out, key=lambda c: (-c.path_s, -c.busy_s))


def summarize(sch: Schedule) -> Report:
    """The report of a schedule."""
    prog, target = sch.program, sch.target
    latency = sch.latency_s
    n = len(prog.instructions)
    busy = {e: 0.0 for e in ENGINES}
    dma_spans = []
    for i in range(n):
        fam = _family(sch.queue[i])
        if fam == "dma":
            dma_spans.append((sch.start[i], sch.end[i]))
        else:
            busy[fam] += sch.end[i] - sch.start[i]
    busy["dma"] = _union_s(dma_spans)
    safe = latency if latency > 0 else 1.0
    active = {e: min(1.0, busy[e] / safe) for e in ENGINES}
    path = sch.critical_path()
    path_s = {e: 0.0 for e in ENGINES}
    segments: list[CostLine] = []
    for i in path:
        fam = _family(sch.queue[i])
        t = sch.end[i] - sch.start[i]
        path_s[fam] += t
        src, text = _loc(prog.instructions[i])
        last = segments[-1] if segments else None
        if last and (last.source, last.opcode, last.engine) == (src, prog.instructions[i].opcode, fam):
            segments[-1] = CostLine(src, text, last.opcode, fam, last.count + 1, last.time_s + t)
        else:
            segments.append(CostLine(src, text, prog.instructions[i].opcode, fam, 1, t))
    left_out = (0, 0, 0.0)
    if len(segments) > PATH_N:  # keep the costliest segments, in path order; count what is left out
        keep = set(sorted(range(len(segments)), key=lambda k: -segments[k].time_s)[:PATH_N])
        dropped = [s for k, s in enumerate(segments) if k not in keep]
        left_out = (len(dropped), sum(s.count for s in dropped), sum(s.time_s for s in dropped))
        segments = [s for k, s in enumerate(segments) if k in keep]
    bottleneck = max(ENGINES, key=lambda e: (path_s[e], busy[e])) if n else "none"
    model, hw, model_s, hw_s = _flops(prog, target)
    hbm_s = sch.hbm_bytes / target.hbm_bytes_per_s
    top = sorted(_merge(((prog.instructions[i], sch.queue[i], sch.end[i] - sch.start[i]) for i in range(n)),
                        lambda src, op, fam: (src, op, fam)), key=lambda c: -c.time_s)[:TOP_N]
    low, high = latency_band(latency, target.name)
    return Report(
        kernel=prog.name, target=target.name, latency_s=latency, latency_low_s=low, latency_high_s=high,
        engine_busy_s=busy, engine_active=active,
        bottleneck=bottleneck, critical_path_s=path_s, critical_path=tuple(segments),
        critical_path_count=len(path), critical_path_left_out=left_out, lines=tuple(_line_costs(sch, path)),
        mfu=model_s / safe if latency > 0 else 0.0, hfu=hw_s / safe if latency > 0 else 0.0,
        flops=model, hardware_flops=hw, roofline_s=max(model_s, hbm_s), hbm_bytes=sch.hbm_bytes,
        hbm_bytes_per_s=sch.hbm_bytes / safe, hbm_bandwidth_use=hbm_s / safe if latency > 0 else 0.0,
        dma_count=sch.dma_count, dma_bytes=sch.dma_bytes,
        dma_avg_bytes=sch.dma_bytes / sch.dma_count if sch.dma_count else 0.0,
        dma_engine_use=sch.dma_engine_s / (target.dma_engines * safe) if latency > 0 else 0.0,
        instruction_count=n, semaphore_count=sum(len(w) for w in sch.waits), top=tuple(top),
        timeline=Timeline.from_schedule(sch))


def estimate(program, target=None) -> Report:
    """Schedule an allocated Program on ``target`` (default: the program's) and report the estimate."""
    return summarize(schedule(program, get_target(target or program.meta.get("target"))))
