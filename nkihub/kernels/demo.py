"""The main job (``bash scripts/demo.sh``): the whole nkihub loop on this machine.

1. start the embedded Hub (a local Hugging Face-compatible server on loopback);
2. estimate every library kernel on trn1 and trn2 with the cost model (numbers for the kernel cards);
3. publish every library kernel to the Hub in the Hugging Face kernel-repo layout;
4. fetch each with ``kernels.get`` and verify it on the simulator against an independent torch
   reference, timing the simulator against torch in the same run;
5. kernelize a small randomly initialised transformers ViT with kernels fetched from the Hub and compare;
6. kernelize one model of every vision-transformer family (ViT, DeiT, DINOv2 with and without registers,
   SigLIP and CLIP vision: published widths and head dims, one layer) from the Hub and compare;
7. write PNG plots and the Perfetto trace and timeline of vit-attn; print one results table (a row per
   kernel and dtype, and per family);
8. look at the Hub's pages in a headless browser: screenshots of its index and of neuron/vit-attn's page
   in the output directory (where Chromium and Selenium are installed; ``bash scripts/setup.sh`` installs
   them), and print the address of the index page (``--serve`` keeps the Hub up to browse it).

Every kernel is published signed with a key made for the run, which the Hub's pages and the loads trust.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# The size each kernel is estimated at for its card (the full grid is benchmarks/bench_all.py's).
CARD_SIZES = {"neuron/vit-attn": "vit-b16", "neuron/flash-attn": "small", "neuron/matmul": "small",
              "neuron/layernorm": "large", "neuron/rmsnorm": "large", "neuron/softmax": "large",
              "neuron/gelu-mlp": "vit-b16", "neuron/vit-block": "small"}


class Progress:
    """One line per step on stderr, with the time the step took."""

    def __init__(self, steps: int):
        self.steps, self.i, self.t = steps, 0, time.perf_counter()

    def step(self, what: str) -> None:
        self.i += 1
        self.t = time.perf_counter()
        print(f"[{self.i}/{self.steps}] {what} ...", file=sys.stderr, flush=True)

    def note(self, what: str) -> None:
        print(f"      {what}", file=sys.stderr, flush=True)

    def done(self) -> None:
        print(f"      done in {time.perf_counter() - self.t:.1f} s", file=sys.stderr, flush=True)


def _package_dir(module_path: str) -> Path:
    import importlib
    return Path(importlib.import_module(module_path).__file__).parent


def _stage(package: Path, rows: list[dict], into: Path) -> Path:
    """A copy of ``package`` whose kernel.json carries the benchmark rows for its card."""
    dst = into / package.name
    shutil.copytree(package, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    spec = json.loads((dst / "kernel.json").read_text())
    spec["benchmarks"] = rows
    (dst / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n")
    return dst


def _table(rows: list[tuple], head: tuple) -> str:
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in [head] + rows)


def _kernelize_vit(endpoint: str, progress: Progress) -> tuple[bool, float, str]:
    """Kernelize a tiny random ViT with layers fetched from the Hub; compare with the original."""
    import torch
    from transformers import ViTConfig, ViTModel

    from nkihub import kernels
    from nkihub.kernels.layers import LayerRepository, Mode, use_kernel_mapping
    from nkihub.kernels.torch_ops import count_calls

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256,
                       image_size=32, patch_size=8, num_channels=3, attn_implementation="eager")
    model = ViTModel(config).eval()
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(pixels).last_hidden_state
    mapping = {"ViTAttention": {"cpu": {Mode.INFERENCE: LayerRepository("neuron/vit-attn", version=1,
                                                                          layer_name="ViTAttention")}},
               "ViTMLP": {"cpu": {Mode.FALLBACK: LayerRepository("neuron/gelu-mlp", version=1,
                                                                        layer_name="ViTMLP")}}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernels.kernelize(model, mode=Mode.INFERENCE, device="cpu")
    report = model.kernelize_report
    with torch.no_grad(), count_calls() as calls:
        got = model(pixels).last_hidden_state
    err = float((got - expected).abs().max() / expected.abs().max())
    progress.note(f"kernelize: {len(report.replaced)} layers replaced, {sum(calls.values())} kernel calls")
    return err < 3e-2 and sum(calls.values()) > 0, err, report.table()


def _kernelize_families(progress: Progress) -> list[tuple]:
    """Each vision-transformer family's published config (one layer, a two-patch-wide image), randomly
    initialised, kernelized with layers fetched from the Hub and compared with its eager forward:
    [(family, ok, max rel err, kernel calls)]."""
    import torch

    from nkihub import kernels
    from nkihub.kernels.layers import LayerRepository, Mode, use_kernel_mapping
    from nkihub.kernels.torch_ops import count_calls
    from nkihub.kernels.vit_models import MODELS, build
    from nkihub.kernels.vit_parts import FAMILIES

    def hub(repo, layer, mode=Mode.FALLBACK):
        return {"cpu": {mode: LayerRepository(repo, version=1, layer_name=layer)}}

    mapping = {"LayerNorm": hub("neuron/layernorm", "LayerNorm")}
    for fam in FAMILIES.values():
        mapping.update({fam.layer: hub("neuron/vit-block", "ViTLayer", Mode.INFERENCE),
                        fam.attention: hub("neuron/vit-attn", "ViTAttention", Mode.INFERENCE),
                        fam.mlp: hub("neuron/gelu-mlp", "ViTMLP")})
    rows = []
    for family, spec in MODELS.items():
        model = build(family, layers=1, image_size=2 * spec.config["patch_size"])
        pixels = torch.randn(2, 3, model.config.image_size, model.config.image_size)
        with torch.no_grad():
            expected = model(pixel_values=pixels).last_hidden_state
        with use_kernel_mapping(mapping, inherit_mapping=False):
            kernels.kernelize(model, mode=Mode.INFERENCE, device="cpu")
        with torch.no_grad(), count_calls() as calls:
            got = model(pixel_values=pixels).last_hidden_state
        err = float((got - expected).abs().max() / expected.abs().max())
        n = sum(calls.values())
        rows.append((family, err < 1e-3 and n > 0, err, n, len(model.kernelize_report.replaced)))
        progress.note(f"{family} ({spec.checkpoint} widths, 1 layer): {n} kernel calls, max rel err {err:.1e}")
    return rows


def main(argv=None) -> int:
    """Run the demo; returns the process exit code (non-zero if any kernel is wrong)."""
    parser = argparse.ArgumentParser(prog="kernels.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/demo", help="where plots, traces, screenshots and results go")
    parser.add_argument("--serve", action="store_true",
                        help="keep the Hub running at the end (until Ctrl-C) to browse its pages")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress = Progress(8)

    progress.step("starting the embedded Hub")
    from nkihub.hub_client import signing
    from nkihub.hub_client.server import serve_in_background
    hub_root = Path(tempfile.mkdtemp(prefix="nkihub-hub-"))
    cache = Path(tempfile.mkdtemp(prefix="nkihub-cache-"))
    key = hub_root.parent / f"{hub_root.name}-publisher.key"  # outside the Hub's storage, removed at the end
    public = signing.generate_key(key)
    server = serve_in_background(hub_root, trusted_keys={"neuron": (public,)})
    os.environ["HF_ENDPOINT"] = server.url
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ["KERNELS_CACHE"] = str(cache)
    # loads check the signatures too: the publisher key of this run is trusted for the neuron org
    os.environ["KERNELS_TRUSTED_KEYS"] = ",".join(filter(None, [os.environ.get("KERNELS_TRUSTED_KEYS"), f"neuron={public}"]))
    progress.note(f"Hub at {server.url} (storage {hub_root}); kernels signed by key {signing.key_id(public)}")
    progress.done()
    try:
        code = _run(out, server.url, progress, key)
        _look_at_the_hub(server.url, out, progress)
        print(f"\nThe Hub's index page: {server.url}/ (neuron/vit-attn: {server.url}/kernels/neuron/vit-attn)")
        if args.serve:
            print("Serving until Ctrl-C ...", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
        else:
            print("It stops with the demo: run with --serve to keep it up and browse it.")
        return code
    finally:
        server.stop()
        shutil.rmtree(hub_root, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        for f in (key, Path(f"{key}.pub")):
            f.unlink(missing_ok=True)


SCREENSHOTS = {"hub_index": "/", "hub_vit-attn": "/kernels/neuron/vit-attn"}


def _look_at_the_hub(url: str, out: Path, progress: Progress) -> list[Path]:
    """Screenshots of the Hub's index and of neuron/vit-attn's page, where a headless browser is installed."""
    from nkihub.hub_client.browser import BrowserUnavailable, screenshot_pages

    progress.step("looking at the Hub's pages in a headless browser")
    try:
        shots = screenshot_pages(url, SCREENSHOTS, out)
    except BrowserUnavailable as e:
        progress.note(f"no screenshots: {e}")
        return []
    for path in shots:
        progress.note(f"screenshot {path}")
    progress.done()
    return shots


def _run(out: Path, endpoint: str, progress: Progress, key: Path) -> int:
    import importlib

    import torch

    from nkihub import kernels
    from nkihub.kernels.library import LIBRARY
    from nkihub.kernels.library.cases import CASES
    from nkihub.kernels.library.measure import check, estimate
    from nkihub.kernels.library.plots import estimates_png, sim_ratio_png

    progress.step("estimating every kernel on trn1 and trn2 (cost model)")
    estimates = {}
    for repo, module_path in LIBRARY.items():
        case = CASES[repo]
        estimates[repo] = estimate(importlib.import_module(module_path), case, CARD_SIZES[repo])
        progress.note(f"{repo}: trn2 {estimates[repo].latency_s['trn2'] * 1e6:.1f} us (estimate)")
    progress.done()

    progress.step(f"publishing {len(LIBRARY)} kernels to {endpoint}")
    staging = Path(tempfile.mkdtemp(prefix="nkihub-stage-"))
    try:
        for repo, module_path in LIBRARY.items():
            staged = _stage(_package_dir(module_path), [estimates[repo].card_row()], staging)
            result = kernels.publish_kernel(staged, repo, endpoint=endpoint, sign=key)
            progress.note(str(result))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    progress.done()

    progress.step("fetching with kernels.get and verifying on the simulator")
    checks = []
    for repo in LIBRARY:
        module = kernels.get(repo, version=1)
        for dtype in (torch.bfloat16, torch.float32):
            checks.append(check(module, CASES[repo], "small", dtype))
        progress.note(f"{repo}: commit {module.__kernel_info__.commit[:12]}, "
                      f"variant {module.__kernel_info__.variant}")
    progress.done()

    progress.step("kernelizing a randomly initialised transformers ViT with kernels from the Hub")
    vit_ok, vit_err, vit_report = _kernelize_vit(endpoint, progress)
    progress.done()

    progress.step("kernelizing every vision-transformer family (ViT, DeiT, DINOv2, SigLIP, CLIP) from the Hub")
    families = _kernelize_families(progress)
    progress.done()

    progress.step(f"writing plots, the vit-attn trace and results to {out}")
    _write_outputs(out, checks, estimates, vit_report)
    estimates_png(list(estimates.values()), out / "estimated_latency.png")
    sim_ratio_png(checks, out / "simulator_vs_torch.png")
    progress.done()

    rows = []
    for repo in LIBRARY:
        e = estimates[repo]
        for c in (c for c in checks if c.repo == repo):
            speed = e.speedup("trn2")
            rows.append((repo, c.dtype, "ok" if c.ok else "WRONG", f"{c.max_rel_error:.1e}",
                         f"{c.sim_over_torch:.1f}x", f"{e.latency_s['trn1'] * 1e6:.1f}",
                         f"{e.latency_s['trn2'] * 1e6:.1f}", f"{speed:.2f}x" if speed else "-", e.size))
    for family, ok, err, calls, replaced in families:
        rows.append((f"{family} model", "float32", "ok" if ok else "WRONG", f"{err:.1e}", "-", "-", "-", "-",
                     f"kernelized end to end: {replaced} layers, {calls} kernel calls"))
    print(_table(rows, ("kernel", "dtype", "result", "max rel err", "sim/torch time",
                        "trn1 us (est.)", "trn2 us (est.)", "fused/unfused (est.)", "estimated at")))
    print(f"\nViT kernelized with Hub kernels: {'ok' if vit_ok else 'WRONG'} (max rel err {vit_err:.1e})")
    print(vit_report)
    print(f"\nPlots, trace and results in {out}/ (every latency is a cost-model estimate).")
    return 0 if all(c.ok for c in checks) and vit_ok and all(f[1] for f in families) else 1


def _write_outputs(out: Path, checks, estimates, vit_report: str) -> None:
    import importlib

    from nkihub import nki
    from nkihub.kernels.library.cases import CASES

    vit = importlib.import_module("nkihub.kernels.library.vit_attn")
    with nki.estimating(("trn2",)) as est:
        getattr(vit, CASES["neuron/vit-attn"].function)(**CASES["neuron/vit-attn"].inputs("vit-b16"))
    report = est.launches[0].reports["trn2"]
    (out / "vit_attn_trn2.perfetto.json").write_text(json.dumps(report.to_perfetto()))
    report.timeline.save_png(out / "vit_attn_trn2_timeline.png")
    (out / "vit_attn_trn2_report.txt").write_text(report.table() + "\n")
    (out / "results.json").write_text(json.dumps({
        "checks": [c.__dict__ for c in checks],
        "estimates": {k: v.to_json() for k, v in estimates.items()},
        "kernelize": vit_report}, indent=2, default=str))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
