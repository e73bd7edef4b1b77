"""``torch.autocast(device_type="neuron")``: PyTorch ships autocast kernels for its own devices only, so the
emulated device registers its own for the AutocastPrivateUse1 key: every op passes through unchanged
(a fallthrough), the matmul-like ops below run in the autocast dtype (bf16 by default, as on Trainium) and
the precision-sensitive ones in float32, as CUDA's and CPU's autocast lists do.
"""
from __future__ import annotations

import torch

KEY = "AutocastPrivateUse1"
# ops autocast runs in the lower precision (the matmul family, as in PyTorch's CUDA/CPU lists)
LOWER = ("mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "linear", "conv1d", "conv2d", "conv3d",
         "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu", "chain_matmul", "addmv", "addr",
         "_scaled_dot_product_flash_attention_for_cpu", "scaled_dot_product_attention")
# ops autocast runs in float32
FP32 = ("softmax", "log_softmax", "layer_norm", "group_norm", "native_layer_norm", "cumsum", "cumprod", "exp",
        "log", "pow", "rsqrt", "sum", "prod", "norm", "cross_entropy_loss", "nll_loss", "mse_loss", "cosine_similarity",
        "binary_cross_entropy_with_logits", "smooth_l1_loss", "kl_div")

_library = None
_fallback_library = None


def _cast(value, dtype):
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.device.type == "neuron" else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _kernel(op, lower: bool):
    exclude = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

    def kernel(*args, **kwargs):
        dtype = torch.get_autocast_dtype("neuron") if lower else torch.float32
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            return op(*_cast(args, dtype), **_cast(kwargs, dtype))

    return kernel


def install() -> None:
    """Register the autocast fallthrough and kernels (once per process)."""
    global _library, _fallback_library
    if _library is not None:
        return
    torch.set_autocast_dtype("neuron", torch.bfloat16)   # Trainium's native low precision (torch's default is fp16)
    _fallback_library = torch.library.Library("_", "IMPL")
    _fallback_library.fallback(torch.library.fallthrough_kernel, KEY)
    _library = torch.library.Library("aten", "IMPL")
    for names, lower in ((LOWER, True), (FP32, False)):
        for name in names:
            packet = getattr(torch.ops.aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                op = getattr(packet, overload)
                if "out" in overload or torch.Tag.inplace in op.tags:
                    continue
                _library.impl(op._schema.name.split("::")[1] + ("" if overload == "default" else f".{overload}"),
                              _kernel(op, lower), KEY)
