"""``neuronxcc.nki.compiler``: allocation control of the old dialect. nkihub allocates SBUF/PSUM itself
(by live range), so the decorators leave the kernel unchanged, and the direct-allocation buffers
(``sbuf.alloc`` / ``mod_alloc`` / ``auto_alloc`` and their ``psum`` forms) are accepted as
``buffer=`` values that place the tensor in SBUF or PSUM: the addresses they ask for are recorded in
the marker but not honoured, and each logical block gets its own storage (a correct kernel computes the
same values; memory use and false dependencies of the requested placement are not modelled)."""
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


class DirectBuffer:
    """A ``buffer=`` value of direct allocation: the memory (``name``: sbuf or psum) and the requested
    placement (``placement``: the allocation function or the mod_alloc arguments)."""

    __slots__ = ("name", "placement")

    def __init__(self, name: str, placement):
        self.name, self.placement = name, placement

    def __repr__(self) -> str:
        return f"ncc.{self.name}.alloc({self.placement!r})"


def _space(name: str) -> types.SimpleNamespace:
    def alloc(func):
        """Place each logical block where ``func(block_index, partitions, bytes)`` says (recorded; nkihub
        places the tensor itself)."""
        return DirectBuffer(name, func)

    def mod_alloc(*, base_addr=0, base_bank=None, base_partition=0, num_par_tiles=(), num_bank_tiles=(),
                  num_free_tiles=()):
        """Modulo placement of the logical blocks (recorded; nkihub places the tensor itself)."""
        return DirectBuffer(name, {"base_addr": base_addr, "base_bank": base_bank, "base_partition": base_partition,
                                   "num_par_tiles": tuple(num_par_tiles), "num_bank_tiles": tuple(num_bank_tiles),
                                   "num_free_tiles": tuple(num_free_tiles)})

    def auto_alloc():
        """Automatic placement (the default)."""
        return DirectBuffer(name, None)

    return types.SimpleNamespace(alloc=alloc, mod_alloc=mod_alloc, auto_alloc=auto_alloc)


sbuf = _space("sbuf")
psum = _space("psum")


from nki import unsupported as _unsupported  # noqa: E402

__getattr__ = _unsupported.module_getattr("neuronxcc.nki.compiler")  # AWS NKI names not simulated: a clear error
