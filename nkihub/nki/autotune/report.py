"""The report of a sweep: every candidate with its estimate, status and reason, the best config per
target, and the kernel's default config for comparison. All times are cost-model estimates."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from nkihub.nki.autotune.candidate import OK, Result
from nkihub.nki.autotune.space import Config


@dataclass(frozen=True)
class TuneReport:
    """``results`` in the order the candidates were asked; ``best[target]`` the fastest ``ok`` result
    (ties go to the earlier candidate); ``default`` the kernel's own config (None when a parameter of
    the space has no default); ``search`` exhaustive or tpe; ``where`` inline, local or ray."""

    kernel: str
    key: tuple
    targets: tuple
    results: tuple
    default: Config | None
    search: str
    where: str
    workers: int = 1
    seconds: float = 0.0
    best: dict = field(default_factory=dict)

    @classmethod
    def build(cls, kernel, key, targets, results, default, search, where, workers=1, seconds=0.0) -> "TuneReport":
        best = {}
        for r in results:
            if r.status == OK and (r.target not in best or r.latency_s < best[r.target].latency_s):
                best[r.target] = r
        return cls(kernel, tuple(key), tuple(targets), tuple(results), default, search, where, workers,
                   seconds, best)

    def result(self, config: Config, target: str) -> Result | None:
        return next((r for r in self.results if r.config == config and r.target == target), None)

    def default_result(self, target: str) -> Result | None:
        return self.result(self.default, target) if self.default is not None else None

    def speedup(self, target: str) -> float | None:
        """Estimated default latency / best latency on ``target`` (None without both)."""
        d, b = self.default_result(target), self.best.get(target)
        if d is None or b is None or d.status != OK:
            return None
        return d.latency_s / b.latency_s

    @property
    def params(self) -> list[str]:
        names: dict[str, None] = {}
        for r in self.results:
            names.update(dict.fromkeys(r.config.kwargs))
        return list(names)

    def table(self) -> str:
        """One row per candidate: target, parameters, estimated microseconds, status (best marked) and
        reason; then the best and the default per target."""
        params = self.params
        head = ["target", *params, "estimate us", "status", "reason"]
        rows = []
        for r in sorted(self.results, key=lambda r: (self.targets.index(r.target), r.status != OK,
                                                     r.latency_s or 0.0)):
            mark = r.status
            if self.best.get(r.target) is r:
                mark = "BEST"
            if r.config == self.default:
                mark += " (default)"
            rows.append([r.target, *(repr(r.config.kwargs.get(p, "")) for p in params),
                         f"{r.latency_s * 1e6:.2f}" if r.latency_s is not None else "-", mark, r.reason])
        widths = [max(len(row[i]) for row in [head] + rows) for i in range(len(head) - 1)]
        lines = ["  ".join([c.ljust(w) for c, w in zip(row[:-1], widths)] + [row[-1]]).rstrip()
                 for row in [head] + rows]
        lines.append("")
        for t in self.targets:
            b = self.best.get(t)
            if b is None:
                lines.append(f"{t}: no candidate passed")
                continue
            line = f"{t}: best {b.config} at {b.latency_s * 1e6:.2f} us (estimate)"
            s = self.speedup(t)
            if s is not None:
                line += f"; default {self.default} at {self.default_result(t).latency_s * 1e6:.2f} us, {s:.2f}x"
            lines.append(line)
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "kernel": self.kernel, "key": list(self.key), "targets": list(self.targets), "search": self.search,
            "where": self.where, "workers": self.workers, "seconds": self.seconds,
            "default": self.default.kwargs if self.default is not None else None,
            "best": {t: r.to_json() for t, r in self.best.items()},
            "results": [r.to_json() for r in self.results],
            "note": "latencies are cost-model estimates, not measurements",
        }

    def save_json(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1, default=repr) + "\n")
        return path

    def save_png(self, path) -> Path:
        """A plot of the estimate by parameter: one panel per parameter, every passing candidate a point
        per target, the best circled."""
        from nkihub.nki.autotune.plot import plot_report
        return plot_report(self, path)
