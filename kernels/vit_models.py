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

    def make_config(self, layers: int | None = None, image_size: int | None = None):
        """The transformers config; ``layers`` and ``image_size`` shrink the model (widths and head dims
        stay the published ones)."""
        import transformers

        values = dict(self.config)
        if layers is not None:
            values["num_hidden_layers"] = layers
        if image_size is not None:
            values["image_size"] = image_size
        config = getattr(transformers, self.config_class)(**values)
        config._attn_implementation = "eager"
        return config


MODELS = {m.family: m for m in (
    ModelSpec("ViT", "google/vit-base-patch16-224", "ViTModel", "ViTConfig",
              dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                   image_size=224, patch_size=16, layer_norm_eps=1e-12, hidden_act="gelu")),
    ModelSpec("DeiT", "facebook/deit-small-distilled-patch16-224", "DeiTModel", "DeiTConfig",
              dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536,
                   image_size=224, patch_size=16, layer_norm_eps=1e-12, hidden_act="gelu")),
    ModelSpec("DINOv2", "facebook/dinov2-small", "Dinov2Model", "Dinov2Config",
              dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, mlp_ratio=4, image_size=518,
                   patch_size=14, layer_norm_eps=1e-6, layerscale_value=1.0, hidden_act="gelu")),
    ModelSpec("DINOv2 with registers", "facebook/dinov2-with-registers-small", "Dinov2WithRegistersModel",
              "Dinov2WithRegistersConfig",
              dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, mlp_ratio=4, image_size=518,
                   patch_size=14, layer_norm_eps=1e-6, layerscale_value=1.0, hidden_act="gelu",
                   num_register_tokens=4)),
    ModelSpec("SigLIP vision", "google/siglip-so400m-patch14-384", "SiglipVisionModel", "SiglipVisionConfig",
              dict(hidden_size=1152, num_hidden_layers=27, num_attention_heads=16, intermediate_size=4304,
                   image_size=384, patch_size=14, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh")),
    ModelSpec("CLIP vision", "openai/clip-vit-large-patch14", "CLIPVisionModel", "CLIPVisionConfig",
              dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                   image_size=224, patch_size=14, layer_norm_eps=1e-5, hidden_act="quick_gelu")),
)}


def build(family: str, layers: int | None = None, image_size: int | None = None, seed: int = 0):
    """A randomly initialised model of ``family`` (a key of MODELS) in eval mode, every parameter
    perturbed (so zero-initialised biases and unit layer scales are exercised too)."""
    import torch
    import transformers

    spec = MODELS[family]
    torch.manual_seed(seed)
    model = getattr(transformers, spec.model_class)(spec.make_config(layers, image_size)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model
