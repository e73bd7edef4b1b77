"""``nki.compiler.kernel_builder``: build a kernel's compiled artifact without running it."""
from __future__ import annotations

from nkihub.nki.compile import compile as _compile


def compile_kernel(kernel, *args, target=None, **kwargs):
    """Trace, check, allocate and schedule ``kernel`` (an ``@nki.jit`` kernel or a kernel function) for the
    shapes and dtypes of ``args`` on ``target``: the compiled Program, as :func:`nki.compile` returns it (the
    AWS guide mentions this entry point without a signature)."""
    return _compile(kernel, *args, target=target, **kwargs)
