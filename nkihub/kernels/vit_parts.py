"""The Hugging Face vision-transformer families the kernel-backed layers take.

transformers writes one ViT-style encoder layer per family with different attribute names (``o_proj`` or
``out_proj``, ``layernorm_before`` or ``norm1`` or ``layer_norm1``, DINOv2's layer scales);
``kernels.library.model_layers.attention_parts`` / ``layer_parts`` read any of them, so one class per
role serves every family. This module says which transformers classes each family has (what
``kernelize``'s default mapping maps), whether a module belongs to an image encoder, and how many tokens
one image makes:

    FAMILIES["SigLIP vision"].attention   # "SiglipAttention"
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One transformers family: the class names of its encoder layer, attention, MLP and LayerNorm."""

    name: str
    layer: str
    attention: str
    mlp: str
    norm: str = "LayerNorm"

    @property
    def classes(self) -> tuple[str, ...]:
        return (self.layer, self.attention, self.mlp, self.norm)


FAMILIES = {f.name: f for f in (
    Family("ViT", "ViTLayer", "ViTAttention", "ViTMLP"),
    Family("DeiT", "DeiTLayer", "DeiTAttention", "DeiTMLP"),
    Family("DINOv2", "Dinov2Layer", "Dinov2Attention", "Dinov2MLP"),
    Family("DINOv2 with registers", "Dinov2WithRegistersLayer", "Dinov2WithRegistersAttention",
           "Dinov2WithRegistersMLP"),
    Family("SigLIP vision", "SiglipEncoderLayer", "SiglipAttention", "SiglipMLP"),
    Family("CLIP vision", "CLIPEncoderLayer", "CLIPAttention", "CLIPMLP"),
)}

def is_vision(module) -> bool:
    """Whether the module belongs to an image encoder (its config has image and patch sizes); the text
    towers of CLIP and SigLIP reuse these classes with causal or padding masks."""
    config = getattr(module, "config", None)
    return getattr(config, "image_size", None) is not None and getattr(config, "patch_size", None) is not None


def seq_len(config) -> int:
    """Tokens of one image through the encoder: the patches plus CLS (none in SigLIP), DeiT's distillation
    token and DINOv2's registers; 1 when the config has no image size."""
    image, patch = getattr(config, "image_size", None), getattr(config, "patch_size", None)
    if image is None or patch is None:
        return 1
    ih, iw = (image, image) if isinstance(image, int) else tuple(image)
    ph, pw = (patch, patch) if isinstance(patch, int) else tuple(patch)
    kind = getattr(config, "model_type", "")
    extra = 0 if kind.startswith("siglip") else 1
    extra += 1 if kind == "deit" else 0
    extra += int(getattr(config, "num_register_tokens", 0) or 0)
    return (ih // ph) * (iw // pw) + extra
