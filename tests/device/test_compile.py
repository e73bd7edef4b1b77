"""``torch.compile(backend="neuron")`` on the emulated device: a kernelized tiny ViT captures with
``fullgraph=True`` (nkihub's kernel ops are nodes of the graph), runs on the neuron device and matches the
CPU model; forward and backward graphs of a small MLP train like eager."""
from __future__ import annotations

import json
import textwrap


def tiny_vit(layers: int) -> str:
    """Script lines making a tiny random ViT (``model``, on the neuron device), its input ``x`` on the CPU and
    the CPU model's output ``want``."""
    return textwrap.dedent(f"""
        import json
        import transformers
        torch.manual_seed(0)
        cfg = transformers.ViTConfig(hidden_size=64, num_hidden_layers={layers}, num_attention_heads=2,
                                     intermediate_size=128, image_size=16, patch_size=8,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = transformers.ViTModel(cfg).eval()
        x = torch.randn(2, 3, 16, 16)
        with torch.no_grad():
            want = model(x).last_hidden_state
        model.to("neuron")
    """)


def test_kernelized_vit_fullgraph_on_neuron(emulated):
    out = emulated(tiny_vit(1) + textwrap.dedent("""
        from nkihub.device import compile as neuron_compile
        from nkihub.kernels.layers import LibraryLayerRepository, Mode, kernelize, use_kernel_mapping
        from nkihub.kernels.torch_ops import count_calls

        lib = lambda repo, layer: LibraryLayerRepository(repo, layer_name=layer)
        mapping = {"ViTAttention": {"neuron": lib("neuron/flash-attn", "ViTAttention")},
                   "LayerNorm": {"neuron": lib("neuron/layernorm", "LayerNorm")}}
        with use_kernel_mapping(mapping, inherit_mapping=False):
            kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device="neuron")
        compiled = torch.compile(model, fullgraph=True, backend="neuron")
        with count_calls() as calls, torch.no_grad():
            got = compiled(x.to("neuron")).last_hidden_state
        targets = {str(n.target).split(".")[0] for g in neuron_compile.graphs() for n in g.graph.nodes
                   if n.op == "call_function"}
        print(json.dumps({"device": str(got.device), "err": (got.cpu() - want).abs().max().item(),
                          "replaced": len(model.kernelize_report.replaced), "calls": sum(calls.values()),
                          "kernel_ops": sorted(t for t in targets if t.startswith("_")),
                          "logged": len(nkihub.device.kernel_log())}))
    """))
    r = json.loads(out)
    assert r["device"] == "neuron:0" and r["err"] < 1e-4
    assert r["replaced"] == 4 and r["calls"] == 4 and r["logged"] == 4
    assert [t.split("_1_0_0")[0] for t in r["kernel_ops"]] == ["_flash_attn", "_layernorm"]


def test_compiled_training_step_matches_eager(emulated):
    out = emulated("""
        torch.manual_seed(0)
        def make():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).neuron()
        x = torch.randn(4, 8, device="neuron")
        eager, compiled = make(), make()
        step = torch.compile(compiled, backend="neuron", fullgraph=True)
        eager(x).square().sum().backward()
        step(x).square().sum().backward()
        print(max((a.grad - b.grad).abs().max().item() for a, b in zip(eager.parameters(), compiled.parameters())),
              compiled[0].weight.grad.device)
    """)
    err, dev = out.split()
    assert float(err) < 1e-6 and dev == "neuron:0"


def test_done_when_hub_kernels_compiled_on_neuron(emulated, publish_library, tmp_path):
    """Issue 28's bar: a tiny ViT kernelized with kernels fetched from the (local) Hub, on device="neuron",
    through torch.compile(backend="neuron", fullgraph=True), matching the CPU model."""
    publish_library("neuron/flash-attn", "neuron/layernorm")
    out = emulated(tiny_vit(2) + textwrap.dedent("""
        from nkihub.kernels.layers import LayerRepository, Mode, kernelize, use_kernel_mapping

        mode = Mode.INFERENCE | Mode.TORCH_COMPILE
        hub = lambda repo, layer: {mode: LayerRepository(repo, layer_name=layer, version=1)}
        mapping = {"ViTAttention": {"neuron": hub("neuron/flash-attn", "ViTAttention")},
                   "LayerNorm": {"neuron": hub("neuron/layernorm", "LayerNorm")}}
        with use_kernel_mapping(mapping, inherit_mapping=False):
            kernelize(model, mode=mode, device="neuron")
        log = nkihub.device.kernel_log()
        with torch.no_grad():
            got = torch.compile(model, backend="neuron", fullgraph=True)(x.to("neuron")).last_hidden_state
        print(json.dumps({"device": str(got.device), "err": (got.cpu() - want).abs().max().item(),
                          "replaced": [d.kernel for d in model.kernelize_report.replaced],
                          "kernels": sorted({c.kernel for c in log.calls}), "estimate_s": log.estimated_s()}))
    """), env={"HF_HOME": str(tmp_path / "hf-home")})
    r = json.loads(out.splitlines()[-1])
    assert r["device"] == "neuron:0" and r["err"] < 1e-4
    assert len(r["replaced"]) == 7 and all("neuron/" in k for k in r["replaced"])
    assert r["kernels"] == ["flash_fwd_kernel", "layer_norm_kernel"] and r["estimate_s"] > 0
