"""PNG plots of measurements (matplotlib, Agg backend): estimated latency per kernel and target, and
simulator time over torch time per kernel."""
from __future__ import annotations

from pathlib import Path


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def estimates_png(estimates, path: "str | Path") -> Path:
    """Grouped bars: estimated latency (us, log scale) of each kernel per target."""
    plt = _plt()
    labels = [e.repo.split("/")[-1] + "\n" + e.size.replace(", ", "\n") for e in estimates]
    targets = list(estimates[0].latency_s) if estimates else []
    fig, ax = plt.subplots(figsize=(max(6, 1.5 * len(labels)), 5))
    width = 0.8 / max(1, len(targets))
    for i, t in enumerate(targets):
        ax.bar([x + i * width for x in range(len(labels))], [e.latency_s[t] * 1e6 for e in estimates], width,
               label=t)
    ax.set_xticks([x + width * (len(targets) - 1) / 2 for x in range(len(labels))], labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("estimated latency (us, cost model)")
    ax.set_title("Estimated kernel latency per target (estimates, not measurements)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def sim_ratio_png(checks, path: "str | Path") -> Path:
    """Bars: simulator time over torch CPU time for each checked kernel (measured side by side)."""
    plt = _plt()
    labels = [f"{c.repo.split('/')[-1]}\n{c.dtype}" for c in checks]
    fig, ax = plt.subplots(figsize=(max(6, 1.0 * len(labels)), 4))
    ax.bar(range(len(labels)), [c.sim_over_torch for c in checks], color="tab:orange")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("simulator time / torch time")
    ax.set_title("Simulator against torch on this CPU (same run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
