"""One published model per vision-transformer family, as a transformers config built from its model card's
numbers (no weights are downloaded: models are randomly initialised), for tests, the demo and
``benchmarks/bench_models.py``.

    model = build("SigLIP vision", layers=1, image_size=28)   # so400m's widths and head dim, shrunk
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelSpec:
    """A family's reference model: the transformers model and config class names and the config values
    of the published checkpoint ``checkpoint``."""

    family: str
    checkpoint: str
    model_class: str
    config_class: str
    config: dict = field(default_factory=dict)

    def make_config(self, layers: int | None = None, image_size: int | None = None, heads: int | None = None):
        """The transformers config; ``layers`` and ``image_size`` shrink the model, and ``heads`` the
        widths with it (hidden and MLP sizes scaled by heads / published heads); the head dim stays the
        published one."""
        import transformers

        values = dict(self.config)
        if layers is not None:
            values["num_hidden_layers"] = layers
        if image_size is not None:
            values["image_size"] = image_size
        if heads is not None:
            old = values["num_attention_heads"]
            values["hidden_size"] = values["hidden_size"] // old * heads
            values["num_attention_heads"] = heads
            if "intermediate_size" in values:
                values["intermediate_size"] = values["intermediate_size"] * heads // old
        config = getattr(transformers, self.config_class)(**values)
        config._attn_implementation = "eager"
        return config


def _widths(hidden, layers, heads, mlp, image, patch, eps, act, **extra) -> dict:
    """Config values from a model card: hidden size, layers, heads, MLP size (None: the config's
    mlp_ratio says), image and patch size, the LayerNorm eps and the activation."""
    sizes = {} if mlp is None else dict(intermediate_size=mlp)
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, image_size=image,
                patch_size=patch, layer_norm_eps=eps, hidden_act=act, **sizes, **extra)


_DINOV2_SMALL = _widths(384, 12, 6, None, 518, 14, 1e-6, "gelu", mlp_ratio=4, layerscale_value=1.0)

MODELS = {m.family: m for m in (
    ModelSpec("ViT", "google/vit-base-patch16-224", "ViTModel", "ViTConfig",
              _widths(768, 12, 12, 3072, 224, 16, 1e-12, "gelu")),
    ModelSpec("DeiT", "facebook/deit-small-distilled-patch16-224", "DeiTModel", "DeiTConfig",
              _widths(384, 12, 6, 1536, 224, 16, 1e-12, "gelu")),
    ModelSpec("DINOv2", "facebook/dinov2-small", "Dinov2Model", "Dinov2Config", _DINOV2_SMALL),
    ModelSpec("DINOv2 with registers", "facebook/dinov2-with-registers-small", "Dinov2WithRegistersModel",
              "Dinov2WithRegistersConfig", dict(_DINOV2_SMALL, num_register_tokens=4)),
    ModelSpec("SigLIP vision", "google/siglip-so400m-patch14-384", "SiglipVisionModel", "SiglipVisionConfig",
              _widths(1152, 27, 16, 4304, 384, 14, 1e-6, "gelu_pytorch_tanh")),
    ModelSpec("CLIP vision", "openai/clip-vit-large-patch14", "CLIPVisionModel", "CLIPVisionConfig",
              _widths(1024, 24, 16, 4096, 224, 14, 1e-5, "quick_gelu")),
)}


# The larger published widths of the plain ViT family (the fused layer's weights outgrow SBUF there):
# ViT-L/16 (head dim 64) and ViT-H/14 (head dim 80, W^T of fc1 and fc2 200 KiB a partition each in fp32).
SIZES = {m.checkpoint.split("/")[-1]: m for m in (
    ModelSpec("ViT", "google/vit-large-patch16-224", "ViTModel", "ViTConfig",
              _widths(1024, 24, 16, 4096, 224, 16, 1e-12, "gelu")),
    ModelSpec("ViT", "google/vit-huge-patch14-224-in21k", "ViTModel", "ViTConfig",
              _widths(1280, 32, 16, 5120, 224, 14, 1e-12, "gelu")),
)}


def build(family: str, layers: int | None = None, image_size: int | None = None, seed: int = 0,
          heads: int | None = None):
    """A randomly initialised model of ``family`` (a key of MODELS, or of SIZES: a checkpoint name such
    as ``"vit-huge-patch14-224-in21k"``) in eval mode, every parameter perturbed (so zero-initialised
    biases and unit layer scales are exercised too); ``layers``, ``image_size`` and ``heads`` shrink it
    (see ModelSpec.make_config)."""
    import torch
    import transformers

    spec = MODELS[family] if family in MODELS else SIZES[family]
    torch.manual_seed(seed)
    model = getattr(transformers, spec.model_class)(spec.make_config(layers, image_size, heads)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model
