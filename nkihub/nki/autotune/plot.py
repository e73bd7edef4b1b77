"""The picture of a sweep: estimated latency by parameter value (one panel per parameter)."""
from __future__ import annotations

import textwrap
from pathlib import Path

from nkihub.nki.autotune.candidate import OK

_MARKERS = "os^Dv"


def plot_report(report, path) -> Path:
    """Write ``report`` (a TuneReport) as a PNG to ``path`` (``figure``)."""
    fig = figure(report)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def figure(report):
    """``report`` (a TuneReport) as a matplotlib Figure: x is the parameter's value (its position in the
    order values appear), y the estimated microseconds of each passing candidate, one colour per target;
    the best candidate of each target is circled."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure   # no pyplot: no global state, nothing to close

    params = report.params or ["(no parameters)"]
    fig = Figure(figsize=(3.6 * len(params) + 0.6, 3.4))
    axes = fig.subplots(1, len(params), squeeze=False)
    for ax, p in zip(axes[0], params):
        values = list(dict.fromkeys(r.config.kwargs.get(p) for r in report.results))
        try:
            values.sort()
        except TypeError:
            pass  # mixed kinds (None and ints): keep the order they were tried in
        for ti, t in enumerate(report.targets):
            shift = (ti - (len(report.targets) - 1) / 2) * 0.08
            ok = [r for r in report.results if r.target == t and r.status == OK]
            xs = [values.index(r.config.kwargs.get(p)) + shift for r in ok]
            ax.scatter(xs, [r.latency_s * 1e6 for r in ok], s=16, alpha=0.7, marker=_MARKERS[ti % len(_MARKERS)],
                       label=t)
            best = report.best.get(t)
            if best is not None:
                ax.scatter([values.index(best.config.kwargs.get(p)) + shift], [best.latency_s * 1e6], s=140,
                           facecolors="none", edgecolors="black", linewidths=1.2)
        ax.set_xticks(range(len(values)), [repr(v) for v in values], fontsize=8)
        ax.set_xlim(-0.5, len(values) - 0.5)
        ax.set_xlabel(p)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("estimated latency (us)")
    # Outside the last panel (no marker under it); the title wrapped to the figure's width, and the saved
    # image grown to hold both (bbox_inches="tight"), so neither is cut off.
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    width_chars = int(fig.get_figwidth() * 72 / (10 * 0.6))   # ~0.6 em per character at 10 pt
    fig.suptitle(textwrap.fill(f"{report.kernel}: estimated latency by parameter (cost model; circled: best)",
                               width_chars), fontsize=10)
    fig.tight_layout()
    return fig
