"""``neuronxcc.nki.compiler``: allocation-control decorators of the old dialect. nkihub always allocates
SBUF/PSUM itself (linear scan), so these decorators leave the kernel unchanged; the manual allocators
raise NotImplementedError."""
from __future__ import annotations

import contextlib
import types


def _identity_decorator(func=None, **kwargs):
    return (lambda f: f) if func is None else func


skip_middle_end_transformations = _identity_decorator
force_auto_alloc = _identity_decorator


def enable_stack_allocator(func=None, log_level=None):
    """Accepted; nkihub's allocator is used."""
    return _identity_decorator(func)


def allocation_scope():
    """A no-op context (nkihub allocates by live range)."""
    return contextlib.nullcontext()


def multi_buffer(factor=None):
    """A no-op context (buffering follows from live ranges)."""
    return contextlib.nullcontext()


def no_reorder():
    """A no-op context: the simulator keeps program order."""
    return contextlib.nullcontext()


def _manual(*args, **kwargs):
    from nki.unsupported import not_simulated
    raise not_simulated("manual SBUF/PSUM allocation (neuronxcc.nki.compiler.sbuf/psum.alloc, mod_alloc)",
                        "nkihub allocates on-chip tensors itself")


sbuf = types.SimpleNamespace(alloc=_manual, mod_alloc=_manual, auto_alloc=lambda: None)
psum = types.SimpleNamespace(alloc=_manual, mod_alloc=_manual, auto_alloc=lambda: None)


from nki import unsupported as _unsupported  # noqa: E402

__getattr__ = _unsupported.module_getattr("neuronxcc.nki.compiler")  # AWS NKI names not simulated: a clear error
