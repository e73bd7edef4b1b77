"""Virtual registers of ``nki.isa``: ``VirtualRegister``, ``register_alloc``, ``register_move``,
``register_load`` and ``register_store``, as AWS NKI documents them.

A register holds a 32-bit integer on an engine sequencer. Kernels load one from memory and use it as a
dynamic loop bound (``nl.dynamic_range(reg)``, ``nl.fori_loop``), a while-loop condition (``while reg:``,
``nl.while_loop``) or a run-time offset (``t.ap(..., scalar_offset=reg)``). Here a register is a
one-element int32 tensor of the Program, written and read by register instructions; using its value in
Python control flow reads it at run time (see ``nki.runtime``).
"""
from __future__ import annotations

import operator

from nkihub.nki import tracing
from nkihub.nki.language.objects import NKIObject
from nkihub.nki.tensor import NkiTensor


class VirtualRegister(NKIObject):
    """A virtual register: allocate with ``nisa.register_alloc()``, set with ``register_move`` /
    ``register_load``, save with ``register_store``. ``bool(reg)`` and ``int(reg)`` read its run-time value
    (for ``while reg:`` and dynamic loop bounds)."""

    def __init__(self, state=None, frozen=False):
        b = tracing.require("nisa.VirtualRegister")
        self.storage = NkiTensor(b.new_tensor((1, 1), "int32", "sbuf", name="reg"))
        self.frozen = bool(frozen)
        if state is not None:
            _set(self, state)

    def value(self) -> int:
        """The register's value when the kernel runs at this point."""
        b = tracing.require("VirtualRegister value")
        return int(b.runtime_read(self.storage, "a register's value in Python control flow").reshape(-1)[0])

    def __bool__(self) -> bool:
        return self.value() != 0

    def __index__(self) -> int:
        return self.value()

    __int__ = __index__

    def __repr__(self) -> str:
        return f"VirtualRegister({self.storage.name})"


def _reg(x, role: str) -> VirtualRegister:
    if not isinstance(x, VirtualRegister):
        raise TypeError(f"'{role}' must be a nisa.VirtualRegister (from nisa.register_alloc()), got {type(x).__name__}")
    return x


def _set(reg: VirtualRegister, value) -> None:
    if isinstance(value, VirtualRegister):
        register_move(reg, value)
    elif isinstance(value, NkiTensor):
        register_load(reg, value)
    else:
        register_move(reg, operator.index(value))


def register_alloc(x=None) -> VirtualRegister:
    """A new virtual register, set to ``x`` when given: an integer, another register, or a one-element
    tensor (loaded from memory)."""
    reg = VirtualRegister()
    if x is not None:
        _set(reg, x)
    return reg


def register_move(dst, src) -> VirtualRegister:
    """dst = src: a compile-time integer or another register. Touches no SBUF, PSUM or HBM."""
    from nkihub.nki.isa import emit
    _reg(dst, "dst")
    if isinstance(src, VirtualRegister):
        emit("register_move", "gpsimd", {"reg": dst.storage}, {"src": src.storage})
    else:
        emit("register_move", "gpsimd", {"reg": dst.storage}, {}, {"imm": operator.index(src)})
    return dst


def register_load(dst, src) -> VirtualRegister:
    """dst = the single element of tensor ``src`` ([1] or [1, 1], HBM or SBUF), as a 32-bit integer
    (floats truncate toward zero)."""
    from nkihub.nki.isa import _tile, emit
    _reg(dst, "dst"), _tile(src, "src")
    emit("register_load", "gpsimd", {"reg": dst.storage}, {"src": src})
    return dst


def register_store(dst, src) -> NkiTensor:
    """The single element of tensor ``dst`` (HBM or SBUF) = register ``src``, converted to dst's dtype."""
    from nkihub.nki.isa import _tile, emit
    _tile(dst, "dst"), _reg(src, "src")
    emit("register_store", "gpsimd", {"dst": dst}, {"reg": src.storage})
    return dst


def copy_of(reg: VirtualRegister) -> VirtualRegister:
    """A new register holding ``reg``'s value (registers pass to loop bodies by value)."""
    out = VirtualRegister()
    register_move(out, reg)
    return out
