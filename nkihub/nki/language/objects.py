"""Kernel-side object types of ``nki.language``: ``NKIObject`` (base of a kernel's own configuration
objects), ``MemoryRegion`` (the buffers as an enum) and the ``DType`` alias."""
from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Union

import numpy as np


def _field_names(cls) -> list[str]:
    """The attributes positional arguments fill, in order: a dataclass's init fields, else the annotated
    attributes of the class and its NKIObject bases (base classes first)."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls) if f.init]
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        if klass is not NKIObject and issubclass(klass, NKIObject):
            names += [n for n in vars(klass).get("__annotations__", {}) if n not in names]
    return names


def _nki_object_init(self, *args, **kwargs):
    cls = type(self)
    names = _field_names(cls)
    if len(args) > len(names):
        raise TypeError(f"{cls.__name__}() takes {len(names)} positional arguments ({', '.join(names)}) but "
                        f"{len(args)} were given")
    given = dict(zip(names, args))
    for name in kwargs:
        if name in given:
            raise TypeError(f"{cls.__name__}() got multiple values for argument '{name}'")
    given.update(kwargs)
    # object.__setattr__: frozen dataclasses forbid attribute writes after construction, not during it.
    for name, value in given.items():
        object.__setattr__(self, name, value)
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.name in given or not f.init:
                continue
            if f.default is not dataclasses.MISSING:
                object.__setattr__(self, f.name, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                object.__setattr__(self, f.name, f.default_factory())
            # A field without a default that was not passed stays unset (AttributeError when read), as
            # production kernels build configs leaving unused fields out.
    post = getattr(self, "__post_init__", None)
    if post is not None:
        post()


_nki_object_init.__nki_generic__ = True


class NKIObject:
    """Base class of the plain-Python objects a kernel builds and passes around at trace time (configs,
    tile plans, groups of tensors).

    A subclass is built from keyword arguments naming its attributes (``Dims(T=128, H=4096)``), or
    positionally in the order of its annotated fields; attributes it declares keep their class-level
    default when not passed. This holds for ``@dataclass`` subclasses too, including attributes declared
    without an annotation (which a plain dataclass would not accept): such a class gets this constructor
    instead of the dataclass-generated one, which still sets dataclass defaults and default factories and
    calls ``__post_init__``; a field without a default may be left out (it stays unset). A subclass that defines its own ``__init__`` keeps it. Objects print their
    attributes, so two equal configurations print (and key a compiled kernel) the same way.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for klass in cls.__mro__:
            own = vars(klass).get("__init__")
            if own is not None:
                # The nearest __init__ is NKIObject's or the generic one: give cls its own copy, so a later
                # @dataclass decorator (which only adds methods a class lacks) leaves it in place.
                if klass is NKIObject or getattr(own, "__nki_generic__", False):
                    cls.__init__ = _nki_object_init
                    if "__repr__" not in vars(cls):
                        cls.__repr__ = NKIObject.__repr__
                break

    def __init__(self, **kwargs):
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class MemoryRegion(str, Enum):
    """The memory regions a tensor can live in; members work wherever a buffer is taken
    (``nl.ndarray(shape, dtype, buffer=nl.MemoryRegion.sbuf)``) and compare equal to ``nl.sbuf`` etc."""

    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"


# What a kernel may pass as a dtype: an nl dtype (a numpy dtype), its name, or an MX packed-dtype name.
DType = Union[np.dtype, type, str]
