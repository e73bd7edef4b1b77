"""Small helpers shared by the kernel-library packages (``kernels.library.<name>``).

Validation raises ``ValueError`` naming the offending argument *before* any kernel is traced or
simulated; ``rows`` / ``unrows`` fold leading batch dims into one row axis (rows go on SBUF partitions);
``run`` calls a ``@nki.jit`` kernel on CPU torch tensors and returns torch tensors.
"""
from __future__ import annotations

import math
from collections import deque

import torch

SUPPORTED_DTYPES = (torch.bfloat16, torch.float32)


def check_tensor(name: str, t, *, ndim: int | None = None, min_ndim: int = 1,
                 dtypes=SUPPORTED_DTYPES) -> None:
    """Raise ValueError unless ``t`` is a non-empty torch tensor of a supported dtype and rank."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"'{name}' must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise ValueError(f"'{name}' has dtype {str(t.dtype).replace('torch.', '')}; supported: {allowed}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"'{name}' must have {ndim} dims, got shape {tuple(t.shape)}")
    if t.dim() < min_ndim:
        raise ValueError(f"'{name}' must have at least {min_ndim} dims, got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"'{name}' is empty (shape {tuple(t.shape)})")


def check_shape(name: str, t: torch.Tensor, shape: tuple) -> None:
    """Raise ValueError unless ``t.shape == shape``."""
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"'{name}' must have shape {tuple(shape)}, got {tuple(t.shape)}")


def check_same_dtype(reference: str, ref: torch.Tensor, **others) -> None:
    """Raise ValueError naming the first tensor in ``others`` whose dtype differs from ``ref``'s."""
    for name, t in others.items():
        if t.dtype != ref.dtype:
            raise ValueError(f"'{name}' has dtype {str(t.dtype).replace('torch.', '')} but '{reference}' is "
                             f"{str(ref.dtype).replace('torch.', '')}; pass tensors of one dtype")


def check_eps(name: str, eps) -> float:
    """A positive finite float, else ValueError."""
    try:
        value = float(eps)
    except (TypeError, ValueError):
        raise ValueError(f"'{name}' must be a number, got {eps!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"'{name}' must be positive and finite, got {eps!r}")
    return value


def check_choice(name: str, value, choices) -> str:
    """``value`` if it is one of ``choices``, else ValueError naming the argument and the choices."""
    if value not in choices:
        raise ValueError(f"'{name}' must be one of {', '.join(map(str, choices))}, got {value!r}")
    return value


def softmax_scale(scale, head_dim: int) -> float:
    """The attention softmax scale: ``1/sqrt(head_dim)`` when ``scale`` is None, else a positive finite
    number (ValueError naming 'scale' otherwise)."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    return check_eps("scale", scale)


def heads(t: torch.Tensor) -> torch.Tensor:
    """Attention operand (..., H, S, D) as (B, H, S, D), the leading dims folded into B."""
    return t.detach().reshape(-1, *t.shape[-3:])


def rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` [..., F] as a contiguous CPU [rows, F] tensor (leading dims folded into rows)."""
    return x.detach().reshape(-1, x.shape[-1]).contiguous().cpu()


def unrows(y: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Undo :func:`rows`: ``y`` [rows, F'] back to ``like``'s leading dims, on ``like``'s device."""
    return y.reshape(*like.shape[:-1], y.shape[-1]).to(like.device)


def run(kernel, *args, **kwargs):
    """Run a ``@nki.jit`` kernel on the simulator with CPU torch tensors (made contiguous); returns torch
    tensors (one, or a tuple). The compiled Program is cached per signature, so repeated calls replay."""
    from nkihub.kernels.torch_ops import launch  # routes to the simulator or, inside a Neuron op, the device

    args = tuple(a.detach().contiguous() if isinstance(a, torch.Tensor) else a for a in args)
    return launch(kernel, *args, **kwargs)


def issued_ahead(iterable, n: int = 1):
    """The items of ``iterable``, each yielded only after the next ``n`` are pulled. When pulling an item
    traces its load DMAs (a generator of loaded tiles), the loads of tiles i+1..i+n come before the
    instructions the caller traces for tile i, its compute and store. Under the NKI compiler DMAs are
    triggered in program order, so a loop written load -> compute -> store would start tile i+1's load only
    after tile i's store (whose data waits for tile i's compute); issuing the later loads first lets them
    overlap this tile's compute. The caller's buffers must hold ``n + 1`` tiles' loads at once."""
    pending = deque()
    for item in iterable:
        pending.append(item)
        if len(pending) > n:
            yield pending.popleft()
    yield from pending


def loads_ahead(items, load, compute, ahead: int = 1):
    """``load(item)`` for each item ``ahead`` steps before ``compute(item)`` (which ends with its stores):
    loads 0..ahead-1; then load i+ahead, compute i (see :func:`issued_ahead`)."""
    def loaded():
        for item in items:
            load(item)
            yield item

    for item in issued_ahead(loaded(), ahead):
        compute(item)
