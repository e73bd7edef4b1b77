"""Moving arrays between the caller's world (numpy arrays or CPU torch tensors) and the simulator's numpy
buffers, bf16 and fp8 included (through ml_dtypes, bit for bit)."""
from __future__ import annotations

import numpy as np

from nkihub.nki.dtypes import dtype_of

_TORCH_VIEWS = {"bfloat16": ("int16", "int16"), "float8_e4m3fn": ("uint8", "uint8"),
                "float8_e5m2": ("uint8", "uint8")}


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def is_array(x) -> bool:
    """True for numpy arrays and torch tensors (kernel tensor arguments)."""
    return isinstance(x, np.ndarray) or is_torch(x)


def to_numpy(x) -> np.ndarray:
    """A numpy view/copy of ``x`` with the NeuronCore dtype matching its dtype."""
    if isinstance(x, np.ndarray):
        return x
    if is_torch(x):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        name = str(t.dtype).replace("torch.", "")
        if name in _TORCH_VIEWS:
            import torch
            raw = t.contiguous().view(getattr(torch, _TORCH_VIEWS[name][0])).numpy()
            return raw.view(dtype_of(t.dtype))
        return t.numpy()
    return np.asarray(x)


def to_torch(a: np.ndarray):
    """A CPU torch tensor holding numpy array ``a`` (bf16/fp8 reinterpreted bit for bit)."""
    import torch
    from nkihub.simulator.dtypes import dtype_name
    name = dtype_name(a.dtype)
    if name in _TORCH_VIEWS:
        raw = torch.from_numpy(np.ascontiguousarray(a).view(_TORCH_VIEWS[name][1]))
        return raw.view(getattr(torch, name))
    if name == "bool_":
        return torch.from_numpy(np.ascontiguousarray(a))
    return torch.from_numpy(np.ascontiguousarray(a))
