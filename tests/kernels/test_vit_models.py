"""Every vision-transformer family kernelized end to end: a randomly initialised model of each family's
published config (one layer and a small image; widths and head dims as published) against eager in
inference (fused layers, on trn1 and trn2, and ViT at ViT-L/16 and ViT-H/14 widths too); training (flash
attention's backward) and AttentionInterface with two heads of the published head dim (widths scaled with
the heads) to keep the simulator's time down."""
import pytest
import torch

from nkihub.kernels import Mode, kernelize
from nkihub.kernels.torch_ops import count_calls
from nkihub.kernels.vit import BLOCK_CHECK_IMAGES
from nkihub.kernels.vit_models import MODELS, SIZES, build
from nkihub.kernels.vit_parts import FAMILIES, seq_len

FAMILY_NAMES = sorted(MODELS)
TARGETS = ("trn1", "trn2")


def _model(family, seed=0, heads=None):
    patch = (MODELS.get(family) or SIZES[family]).config["patch_size"]
    return build(family, layers=1, image_size=2 * patch, seed=seed, heads=heads)


def _pixels(model, batch=2, seed=1):
    size = model.config.image_size
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def test_every_family_has_a_reference_model():
    assert sorted(FAMILIES) == FAMILY_NAMES
    assert MODELS["SigLIP vision"].config["hidden_size"] // MODELS["SigLIP vision"].config["num_attention_heads"] == 72


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("family", FAMILY_NAMES + sorted(SIZES))
def test_inference_fused_layers_match_eager(family, target, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    model = _model(family)
    x = _pixels(model, batch=BLOCK_CHECK_IMAGES)   # the batch kernelize compiled the fused layer for
    with torch.no_grad():
        ref = model(pixel_values=x).last_hidden_state
    kernelize(model, mode=Mode.INFERENCE, device="cpu", use_fallback=False)
    report = model.kernelize_report
    replaced = {d.module_class for d in report.replaced}
    assert FAMILIES[(MODELS.get(family) or SIZES[family]).family].layer in replaced
    with torch.no_grad(), count_calls() as calls:
        out = model(pixel_values=x).last_hidden_state
    assert out.shape[1] == seq_len(model.config)
    assert any("vit_block" in name for name in calls)
    assert _rel(out, ref) < 1e-4


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_training_runs_flash_attention_backward(family):
    model = _model(family, seed=2, heads=2).train()
    x = _pixels(model, seed=3)
    ref = model(pixel_values=x).last_hidden_state
    w = torch.randn(ref.shape, generator=torch.Generator().manual_seed(4))
    params = [p for p in model.parameters() if p.requires_grad]
    ref_grads = torch.autograd.grad((ref * w).sum(), params, allow_unused=True)
    kernelize(model, mode=Mode.TRAINING, device="cpu")
    attn = [d for d in model.kernelize_report.replaced if d.module_class == FAMILIES[family].attention]
    assert attn and "neuron/flash-attn" in attn[0].kernel
    with count_calls() as calls:
        out = model(pixel_values=x).last_hidden_state
        grads = torch.autograd.grad((out * w).sum(), params, allow_unused=True)
    assert any("backward" in name for name in calls)
    assert _rel(out, ref) < 1e-4
    for got, want in zip(grads, ref_grads):
        if want is not None:
            torch.testing.assert_close(got, want, atol=1e-4 * max(want.abs().max().item(), 1.0), rtol=1e-3)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_attention_interface_route(family):
    import transformers

    from nkihub.kernels.library import vit_attn

    transformers.AttentionInterface.register("neuron-vit-attn", vit_attn.transformers_attention)
    model = _model(family, seed=5, heads=2)
    x = _pixels(model, seed=6)
    with torch.no_grad():
        ref = model(pixel_values=x).last_hidden_state
    model.config._attn_implementation = "neuron-vit-attn"
    for m in model.modules():
        if hasattr(m, "config") and hasattr(m.config, "_attn_implementation"):
            m.config._attn_implementation = "neuron-vit-attn"
    with torch.no_grad(), count_calls() as calls:
        out = model(pixel_values=x).last_hidden_state
    assert any("vit_attention" in name for name in calls)
    assert _rel(out, ref) < 1e-4


def test_text_towers_and_swiglu_keep_their_forward():
    import transformers

    clip = transformers.CLIPModel(transformers.CLIPConfig(
        text_config=dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64),
        vision_config=dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                           image_size=28, patch_size=14))).eval()
    kernelize(clip, mode=Mode.INFERENCE, device="cpu")
    status = {d.module: (d.status, d.reason) for d in clip.kernelize_report.decisions}
    assert status["vision_model.encoder.layers.0"][0] == "replaced"
    assert status["text_model.encoder.layers.0"][0] == "fallback"
    assert "text towers" in status["text_model.encoder.layers.0"][1]
    dino = build("DINOv2", layers=1, image_size=28)
    dino.config.use_swiglu_ffn = True
    swiglu = transformers.Dinov2Model(dino.config).eval()
    kernelize(swiglu, mode=Mode.INFERENCE, device="cpu")
    status = {d.module: (d.status, d.reason) for d in swiglu.kernelize_report.decisions}
    assert status["encoder.layer.0"][0] == "fallback" and "SwiGLU" in status["encoder.layer.0"][1]
