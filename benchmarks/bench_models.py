"""Model-level estimates: a full forward of each vision-transformer family's published model (batch 8) on
trn1 and trn2, with the fused kernels (neuron/vit-block per encoder layer) against the same model built
from our unfused kernels (LayerNorm, Q/K/V/O and MLP linears, QK^T, softmax, PV, GELU and residual adds as
separate launches through HBM), both on the cost model in one run.

    .venv/bin/python benchmarks/bench_models.py                  # every family (several minutes: tracing)
    .venv/bin/python benchmarks/bench_models.py --family ViT     # one family

Both forwards share the patch embedding (one linear launch) and the final LayerNorm; the encoder layers
of a model are identical, so one layer is estimated and counted num_hidden_layers times. Pooling heads
are left out. MFU counts the model's matmul flops against the Tensor Engine's bf16 peak. Every figure is
an estimate from the cost model, not a measurement; plots go to out/bench/.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import nki
from nkihub.kernels.library.attention_baseline import pv_kernel, qk_kernel, softmax_kernel
from nkihub.kernels.library.layernorm.nki_kernels import layer_norm_kernel
from nkihub.kernels.library.vit_attn.nki_kernels import vit_attention_kernel
from nkihub.kernels.library.vit_block.nki_kernels import vit_block_kernel
from nkihub.kernels.library.vit_block.unfused import linear_kernel, vit_block_unfused
from nkihub.kernels.library.model_layers import GELUS
from nkihub.kernels.vit_models import MODELS
from nkihub.kernels.vit_parts import seq_len
from nkihub.simulator.targets import get_target

TARGETS = ("trn1", "trn2")
BATCH = 8
BF16 = torch.bfloat16
ATTENTION_KERNELS = {"qk_kernel", "softmax_kernel", "pv_kernel"}


def _z(*shape):
    return torch.zeros(shape, dtype=BF16)


@dataclass
class Shape:
    """The widths of one family's published model."""

    s: int
    d: int
    heads: int
    hidden: int
    layers: int
    patch: int
    eps: float
    act: str

    @classmethod
    def of(cls, family):
        cfg = MODELS[family].make_config()
        hidden = getattr(cfg, "intermediate_size", None) or int(cfg.hidden_size * cfg.mlp_ratio)
        return cls(seq_len(cfg), cfg.hidden_size, cfg.num_attention_heads, hidden, cfg.num_hidden_layers,
                   cfg.patch_size, cfg.layer_norm_eps, GELUS[cfg.hidden_act])

    def params(self):
        d, f = self.d, self.hidden
        return (_z(d), _z(d), _z(d, d), _z(d), _z(d, d), _z(d), _z(d, d), _z(d), _z(d, d), _z(d), _z(d), _z(d),
                _z(f, d), _z(f), _z(d, f), _z(d))

    def flops(self):
        """Matmul flops of the forward: patch embedding, per layer Q/K/V/O and the MLP, QK^T and PV."""
        b, s, d = BATCH, self.s, self.d
        layer = 2 * b * s * (4 * d * d + 2 * d * self.hidden) + 4 * b * s * s * d
        return self.layers * layer + 2 * b * (s - 1) * 3 * self.patch ** 2 * d


class Costed:
    """Profiles each launch on every target and keeps the per-target latency, per kernel name."""

    def __init__(self):
        self.by_kernel = {t: {} for t in TARGETS}
        self.reports = {}

    def __call__(self, kernel, *args):
        for t in TARGETS:
            rep = nki.profile(kernel, *args, target=t)
            self.by_kernel[t][kernel.__name__] = self.by_kernel[t].get(kernel.__name__, 0.0) + rep.latency_s
            self.reports.setdefault(t, []).append((kernel.__name__, rep))
        with nki.estimating(TARGETS[:1]):   # zero outputs of the right shapes, without running the math
            return kernel(*args)

    def total(self, target):
        return sum(self.by_kernel[target].values())


def _baseline_attention(call, q, k, v, scale):
    return call(pv_kernel, call(softmax_kernel, call(qk_kernel, q, k, scale)), v)


def estimate_family(family):
    """{target: dict(fused, unfused, attn_fused, attn_unfused, mfu_fused, mfu_unfused)} in seconds, and the
    fused layer's reports."""
    sh = Shape.of(family)
    x = _z(BATCH, sh.s, sh.d)
    patches = _z(BATCH * (sh.s - 1), 3 * sh.patch ** 2)
    shared, fused, unfused, attn = Costed(), Costed(), Costed(), Costed()
    shared(linear_kernel, patches, _z(sh.d, 3 * sh.patch ** 2), _z(sh.d))      # patch embedding
    shared(layer_norm_kernel, x.reshape(-1, sh.d), _z(sh.d), _z(sh.d), sh.eps)  # final LayerNorm
    fused(vit_block_kernel, x, *sh.params(), sh.heads, sh.eps, None, None, sh.act)
    vit_block_unfused(x, sh.params(), sh.heads, sh.eps, call=unfused, activation=sh.act,
                      attend=_baseline_attention)
    dh = sh.d // sh.heads
    q = _z(BATCH, sh.heads, sh.s, dh)
    attn(vit_attention_kernel, q, q, q, dh ** -0.5)
    out = {}
    for t in TARGETS:
        peak = get_target(t).tensor_peak_flops["bfloat16"]
        f = shared.total(t) + sh.layers * fused.total(t)
        u = shared.total(t) + sh.layers * unfused.total(t)
        u_attn = sh.layers * sum(v for k, v in unfused.by_kernel[t].items() if k in ATTENTION_KERNELS)
        out[t] = dict(fused=f, unfused=u, speedup=u / f, mfu_fused=sh.flops() / (f * peak),
                      mfu_unfused=sh.flops() / (u * peak), attn_unfused=u_attn / u,
                      attn_fused=sh.layers * attn.total(t) / f)
    return sh, out, fused.reports, unfused.reports


def where_time_goes(family, sh, fused_reports, unfused_reports, target="trn2"):
    """Lines naming what bounds the fused layer and what the unfused layer spends its time on."""
    (_, rep), = fused_reports[target]
    busy = ", ".join(f"{e} {f:.0%}" for e, f in sorted(rep.engine_active.items(), key=lambda x: -x[1]) if f >= 0.01)
    lines = [f"  {family} fused layer on {target}: {rep.latency_s * 1e6:.1f} us, bottleneck {rep.bottleneck} "
             f"[{busy}]; layer MFU {rep.mfu:.1%}"]
    tensor = rep.engine_active.get("tensor", 0.0)
    unfused = sum(r.latency_s for _, r in unfused_reports[target])
    if tensor:
        bound = unfused / (rep.latency_s * tensor)
        lines.append(f"  the Tensor Engine is busy {tensor:.0%} of the fused layer: even with it busy 100% of the "
                     f"time the layer speedup over unfused would be at most {bound:.2f}x")
    top = sorted(unfused_reports[target], key=lambda kr: -kr[1].latency_s)[:4]
    lines.append("  unfused layer's largest launches: " + ", ".join(
        f"{k} {r.latency_s * 1e6:.0f} us ({r.bottleneck})" for k, r in top))
    return lines


def plot(results, path):
    from nkihub.kernels.library.plots import _plt

    plt = _plt()
    fams = list(results)
    fig, axes = plt.subplots(1, len(TARGETS), figsize=(6 * len(TARGETS), 4.5))
    for ax, t in zip(axes, TARGETS):
        xs = range(len(fams))
        ax.bar([x - 0.2 for x in xs], [results[f][t]["unfused"] * 1e3 for f in fams], 0.4, label="unfused kernels")
        ax.bar([x + 0.2 for x in xs], [results[f][t]["fused"] * 1e3 for f in fams], 0.4, label="fused (vit-block)")
        for x, f in zip(xs, fams):
            ax.text(x + 0.2, results[f][t]["fused"] * 1e3, f"{results[f][t]['speedup']:.2f}x", ha="center",
                    va="bottom", fontsize=8)
        ax.set_xticks(list(xs), [f.replace(" ", "\n") for f in fams], fontsize=7)
        ax.set_ylabel("estimated forward latency, batch 8 (ms)")
        ax.set_title(f"{t} (cost-model estimates)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=sorted(MODELS), help="only these families")
    parser.add_argument("--out", default="out/bench", help="where the plot goes")
    args = parser.parse_args(argv)
    started = time.time()
    results, notes = {}, []
    for family in args.family or list(MODELS):
        try:
            sh, results[family], fused_reports, unfused_reports = estimate_family(family)
        except Exception as exc:   # a model the kernels cannot take is a row saying why, not a crash
            print(f"{family}: not estimated: {type(exc).__name__}: {str(exc).splitlines()[-1]}")
            continue
        r = results[family]["trn2"]
        if family == "ViT" or r["speedup"] < 2.4:
            notes += where_time_goes(family, sh, fused_reports, unfused_reports)
        print(f"{family} ({MODELS[family].checkpoint}): S={sh.s} D={sh.d} heads={sh.heads} (head dim "
              f"{sh.d // sh.heads}) MLP {sh.hidden} {sh.act}, {sh.layers} layers, batch {BATCH}", flush=True)
    head = ("model", "target", "unfused ms", "fused ms", "speedup", "MFU unfused", "MFU fused", "attn share unfused",
            "attn share fused*")
    rows = [(f, t, f"{v['unfused'] * 1e3:.2f}", f"{v['fused'] * 1e3:.2f}", f"{v['speedup']:.2f}x",
             f"{v['mfu_unfused']:.1%}", f"{v['mfu_fused']:.1%}", f"{v['attn_unfused']:.0%}", f"{v['attn_fused']:.0%}")
            for f, per in results.items() for t, v in per.items()]
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    print("\nFull forward, batch 8, cost-model estimates (not measurements)")
    for r in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    print("* fused attention share: the vit-attn kernel alone at the model's shapes over the fused forward "
          "(inside vit-block attention is not a separate launch)")
    if notes:
        print("\nWhere the time goes (trn2):")
        print("\n".join(notes))
    if results:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        plot(results, out / "models_fused_vs_unfused.png")
        print(f"\nplot: {out / 'models_fused_vs_unfused.png'}")
    print(f"(tracing and scheduling took {time.time() - started:.0f} s of wall time)")
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
