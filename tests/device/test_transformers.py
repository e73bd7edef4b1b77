"""The Hugging Face stack on the emulated device: transformers models (random init from configs) moved
with ``model.to("neuron")`` or loaded with ``device_map="neuron"`` match the CPU model; Hugging Face
``kernels`` chooses the ``torch-neuron`` builds of kernels published to a local Hub, and both their
``kernelize(device="neuron")`` and nkihub's swap layers for those builds, whose kernels run on the simulator
and return neuron tensors."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

CONFIGS = """
import transformers
def tiny_vit():
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128,
                                 image_size=16, patch_size=8, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0)
    return transformers.ViTModel(cfg).eval()
def tiny_llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval()
PIXELS = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
IDS = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
"""


def test_models_on_neuron_match_cpu(emulated, tmp_path):
    pytest.importorskip("accelerate")   # transformers needs it for device_map
    out = emulated(CONFIGS + f"""
import json
r = {{}}
with torch.no_grad():
    vit = tiny_vit()
    want = vit(PIXELS).last_hidden_state
    got = vit.to("neuron")(PIXELS.to("neuron")).last_hidden_state
    r["vit"] = [str(got.device), (got.cpu() - want).abs().max().item()]
    llama = tiny_llama()
    want = llama(IDS).logits
    cpu_tokens = llama.generate(IDS, attention_mask=torch.ones_like(IDS), max_new_tokens=4, do_sample=False)
    llama.save_pretrained({str(tmp_path / "llama")!r})
    got = llama.to("neuron")(IDS.to("neuron")).logits
    tokens = llama.generate(IDS.to("neuron"), attention_mask=torch.ones_like(IDS).to("neuron"), max_new_tokens=4,
                            do_sample=False)
    r["llama"] = [str(got.device), (got.cpu() - want).abs().max().item(), torch.equal(tokens.cpu(), cpu_tokens)]
    loaded = transformers.LlamaForCausalLM.from_pretrained({str(tmp_path / "llama")!r}, device_map="neuron").eval()
    got = loaded(IDS.to("neuron")).logits
    r["device_map"] = [str(loaded.device), (got.cpu() - want).abs().max().item()]
print(json.dumps(r))
""")
    r = json.loads(out.splitlines()[-1])
    assert r["vit"][0] == "neuron:0" and r["vit"][1] < 1e-5
    assert r["llama"][0] == "neuron:0" and r["llama"][1] < 1e-5 and r["llama"][2]
    assert r["device_map"][0] == "neuron:0" and r["device_map"][1] < 1e-5


def test_hugging_face_kernels_on_neuron(emulated, publish_library, tmp_path):
    publish_library("neuron/vit-attn", "neuron/rmsnorm")
    out = emulated(CONFIGS + """
import json
from pathlib import Path
import kernels as hf
from nkihub import kernels as nkihub_kernels
from nkihub.kernels.layers import LayerRepository as OurRepo, Mode as OurMode, kernelize as our_kernelize
from nkihub.kernels.layers import use_kernel_mapping as our_mapping
r = {}
theirs = hf.get_kernel("neuron/vit-attn", version=1)
q, k, v = torch.randn(3, 1, 2, 9, 16, generator=torch.Generator().manual_seed(0))
got = theirs.vit_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"))
r["get_kernel"] = [Path(theirs.__file__).parent.parent.name, str(got.device),
                   (got.cpu() - torch.nn.functional.scaled_dot_product_attention(q, k, v)).abs().max().item()]
log = nkihub.device.kernel_log()
with torch.no_grad():
    llama = tiny_llama()
    want = llama(IDS).logits
    llama.to("neuron")
    mapping = {"RMSNorm": {"neuron": {hf.Mode.INFERENCE: hf.LayerRepository("neuron/rmsnorm", layer_name="RMSNorm",
                                                                            version=1)}}}
    with hf.use_kernel_mapping(mapping, inherit_mapping=False):
        hf.kernelize(llama, mode=hf.Mode.INFERENCE, device="neuron")
    before = len(log)
    got = llama(IDS.to("neuron")).logits
    r["their_kernelize"] = [str(got.device), (got.cpu() - want).abs().max().item(),
                            sorted({c.kernel for c in log.calls[before:]})]
    vit = tiny_vit()
    want = vit(PIXELS).last_hidden_state
    vit.to("neuron")
    repo = OurRepo("neuron/vit-attn", layer_name="ViTAttention", version=1)
    with our_mapping({"ViTAttention": {"neuron": {OurMode.INFERENCE: repo}}}, inherit_mapping=False):
        our_kernelize(vit, mode=OurMode.INFERENCE, device="neuron")
    before = len(log)
    got = vit(PIXELS.to("neuron")).last_hidden_state
    r["our_kernelize"] = [str(got.device), (got.cpu() - want).abs().max().item(), len(vit.kernelize_report.replaced),
                          nkihub_kernels.get("neuron/vit-attn", version=1).__kernel_info__.variant,
                          sorted({c.kernel for c in log.calls[before:]})]
print(json.dumps(r))
""", env={"HF_HOME": str(tmp_path / "hf-home")})
    r = json.loads(out.splitlines()[-1])
    assert r["get_kernel"][:2] == ["torch-neuron", "neuron:0"] and r["get_kernel"][2] < 1e-5
    assert r["their_kernelize"][0] == "neuron:0" and r["their_kernelize"][1] < 1e-4
    assert r["their_kernelize"][2] == ["rms_norm_kernel"]
    assert r["our_kernelize"][0] == "neuron:0" and r["our_kernelize"][1] < 1e-4 and r["our_kernelize"][2] == 1
    assert r["our_kernelize"][3] == "torch-neuron" and r["our_kernelize"][4] == ["vit_attention_kernel"]
