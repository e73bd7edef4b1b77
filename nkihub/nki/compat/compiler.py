"""``neuronxcc.nki.compiler``: allocation control of the old dialect. The decorators leave the kernel
unchanged (nkihub allocates by live range); the direct-allocation buffers (``sbuf.alloc`` / ``mod_alloc``
and their ``psum`` forms) place each logical block of a tensor where the kernel says, with the checks of
``nki.placement``; ``auto_alloc()`` is ``nl.sbuf`` / ``nl.psum``."""
from __future__ import annotations

import contextlib
import math
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
    """A ``buffer=`` value of direct allocation (nki.placement): the memory (``name``: sbuf or psum) and
    ``locate(block_index, pdim_size, fdim_size)``, which returns where a logical block goes: (start
    partition, byte address) in SBUF, (bank, start partition, byte address in the bank) in PSUM."""

    __slots__ = ("name", "locate", "what")

    def __init__(self, name: str, locate, what: str):
        self.name, self.locate, self.what = name, locate, what

    def __repr__(self) -> str:
        return f"ncc.{self.name}.{self.what}"


def _modulo(base: int, tiles, scale: int):
    """The index -> offset rule of modulo allocation, as the NKI docs define it: the block index taken
    modulo ``tiles`` (per block dim; none given: one tile), linearised row-major, times ``scale``, plus
    ``base``. Extra index dims or extra ``tiles`` entries are ignored, as the docs' definition does."""
    tiles = tuple(int(t) for t in tiles)

    def at(idx) -> int:
        shape = tiles or (1,) * len(idx)
        mod = [int(i) % s for i, s in zip(idx, shape)]
        return base + scale * sum(i * math.prod(shape[d + 1:]) for d, i in enumerate(mod))
    return at


def _space(name: str) -> types.SimpleNamespace:
    from nkihub.nki import language as _nl
    auto = getattr(_nl, name)

    def alloc(func):
        """Place each logical block where ``func(block_index, pdim_size, fdim_size)`` says (see
        ``DirectBuffer``); blocks given the same place share its bytes."""
        return DirectBuffer(name, func, f"alloc({getattr(func, '__name__', func)!r})")

    def auto_alloc():
        """Automatic placement: the same as ``buffer=nl.{name}``."""
        return auto

    return types.SimpleNamespace(alloc=alloc, auto_alloc=auto_alloc, mod_alloc=None)


sbuf = _space("sbuf")
psum = _space("psum")


def _sbuf_mod_alloc(*, base_addr, base_partition=0, num_par_tiles=(), num_free_tiles=()):
    """Modulo placement in SBUF: block ``idx`` at byte ``base_addr + lin(idx % num_free_tiles) * fdim_size``
    of partitions from ``base_partition + lin(idx % num_par_tiles) * pdim_size`` (``lin``: row-major over
    the tile counts). ``num_free_tiles=(2,)`` over 4 blocks is double buffering."""
    return DirectBuffer("sbuf", lambda idx, p, f: (_modulo(base_partition, num_par_tiles, p)(idx),
                                                   _modulo(base_addr, num_free_tiles, f)(idx)),
                        f"mod_alloc(base_addr={base_addr}, num_free_tiles={tuple(num_free_tiles)})")


def _psum_mod_alloc(*, base_bank, base_addr=0, base_partition=0, num_bank_tiles=(), num_par_tiles=(),
                    num_free_tiles=()):
    """Modulo placement in PSUM: block ``idx`` in bank ``base_bank + lin(idx % num_bank_tiles)``, at
    ``base_addr + lin(idx % num_free_tiles) * fdim_size`` bytes into it, partitions from
    ``base_partition + lin(idx % num_par_tiles) * pdim_size``."""
    return DirectBuffer("psum", lambda idx, p, f: (_modulo(base_bank, num_bank_tiles, 1)(idx),
                                                   _modulo(base_partition, num_par_tiles, p)(idx),
                                                   _modulo(base_addr, num_free_tiles, f)(idx)),
                        f"mod_alloc(base_bank={base_bank}, num_bank_tiles={tuple(num_bank_tiles)})")


sbuf.mod_alloc, psum.mod_alloc = _sbuf_mod_alloc, _psum_mod_alloc
sbuf.mod_alloc.__name__ = psum.mod_alloc.__name__ = "mod_alloc"


from nkihub.nki import unsupported as _unsupported  # noqa: E402

__getattr__ = _unsupported.module_getattr("neuronxcc.nki.compiler")  # AWS NKI names not simulated: a clear error
