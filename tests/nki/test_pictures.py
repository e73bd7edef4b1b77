"""Pictures read at a glance: the timeline's legend never covers a bar, its DMA bars (PNG and Perfetto
args) say which tensor and source line each transfer is, and the tune plot's title fits its figure."""
from __future__ import annotations

import json

import numpy as np
import pytest

import nki
from new_user_kernel import axpy, axpy_args as _args, line_of as _line


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("NKI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)


@pytest.fixture(scope="module")
def report():
    return nki.profile(axpy, *_args(), target="trn1")


def _inside(inner, outer) -> bool:
    return inner.x0 >= outer.x0 - 0.5 and inner.x1 <= outer.x1 + 0.5 and inner.y0 >= outer.y0 - 0.5 \
        and inner.y1 <= outer.y1 + 0.5


def test_the_legend_sits_outside_the_axes(report):
    fig = report.timeline.figure()
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1      # right of the plotting area: over no bar
    assert _inside(legend, fig.bbox) or legend.x1 > fig.bbox.x1   # save_png grows the image to hold it


def test_dma_bars_are_labelled_tensor_and_line_in_the_png(report, tmp_path):
    fig = report.timeline.figure()
    labels = {t.get_text() for t in fig.axes[0].texts}
    want = {f"x:{_line('src=x[')}", f"y:{_line('src=y[')}", f"alpha:{_line('src=alpha[')}",
            f"out:{_line('dst=out[')}"}
    assert want <= labels
    fig.canvas.draw()
    ax_box = fig.axes[0].get_window_extent()
    assert all(_inside(t.get_window_extent(), ax_box) for t in fig.axes[0].texts)
    png = report.timeline.save_png(tmp_path / "t.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_dma_slices_carry_tensor_and_line_in_the_perfetto_args(report):
    trace = json.loads(json.dumps(report.to_perfetto()))
    dma = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "transfer" in e["args"]]
    assert len(dma) >= report.dma_count   # a setup/wait slice and a transfer slice each
    seen = {(e["args"]["tensor"], e["args"]["line"]) for e in dma}
    assert seen == {("x", _line("src=x[")), ("y", _line("src=y[")), ("alpha", _line("src=alpha[")),
                    ("out", _line("dst=out["))}
    load = next(e for e in dma if e["args"]["tensor"] == "alpha")
    assert load["args"]["transfer"] == f"load of alpha (line {_line('src=alpha[')})"
    assert "load of alpha" in load["name"]
    compute = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == "scalar_tensor_tensor"]
    assert compute and all("transfer" not in e["args"] for e in compute)


@pytest.mark.parametrize("space", [{"tile": [64, 128]}, {"tile": [64, 128], "skip": [False]}])
def test_the_tune_plots_title_fits_its_figure(space):
    import importlib.util
    from pathlib import Path
    from nkihub.nki.autotune.plot import figure
    spec = importlib.util.spec_from_file_location("_pictures_tune", Path(__file__).parent / "autotune_kernel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rep = nki.autotune.tune(mod.tiled_scale, np.ones((256, 256), np.float32), space=space, target="trn1",
                            check=mod.ref, workers=1)
    fig = figure(rep)
    fig.canvas.draw()
    title = fig._suptitle
    assert "estimated latency by parameter" in title.get_text().replace("\n", " ")
    assert _inside(title.get_window_extent(), fig.bbox)
    legend = fig.axes[-1].get_legend().get_window_extent()
    assert legend.x0 >= fig.axes[-1].get_window_extent().x1
