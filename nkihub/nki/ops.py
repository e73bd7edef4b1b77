"""Operator identity: ``nisa`` calls take operators as ``nl`` functions (``op=nl.add``, ``op=nl.exp``),
``np`` functions or names; this resolves any of them to the instruction table's operator names."""
from __future__ import annotations

import numpy as np

_NUMPY = {np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
          np.maximum: "maximum", np.minimum: "minimum", np.power: "power", np.exp: "exp", np.log: "log",
          np.tanh: "tanh", np.sqrt: "sqrt", np.square: "square", np.abs: "abs", np.negative: "negative",
          np.sin: "sin", np.cos: "cos", np.equal: "equal", np.not_equal: "not_equal", np.less: "less",
          np.less_equal: "less_equal", np.greater: "greater", np.greater_equal: "greater_equal",
          np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or", np.bitwise_xor: "bitwise_xor",
          np.max: "maximum", np.min: "minimum", np.amax: "maximum", np.amin: "minimum", np.sum: "add",
          np.prod: "multiply", np.copy: "copy"}
# nl reduction helpers name the ALU operator they reduce with.
_REDUCE_ALIASES = {"max": "maximum", "min": "minimum", "sum": "add", "prod": "multiply", "all": "logical_and"}


class OpConstant:
    """An operator that ``nki.language`` names as a constant rather than a function (``nl.prelu``,
    ``nl.bypass``): usable wherever a ``nisa`` call takes an operator."""

    __slots__ = ("_nki_op",)

    def __init__(self, name: str):
        self._nki_op = name

    def __repr__(self) -> str:
        return f"nl.{self._nki_op}"


def nki_op(name: str):
    """Decorator: mark an ``nl`` function as the operator ``name`` for ``nisa`` calls."""
    def mark(fn):
        fn._nki_op = name
        return fn
    return mark


def op_name(op) -> str:
    """The operator name of ``op`` (an ``nl`` function, a numpy ufunc, or a string)."""
    if op is None:
        _refuse("an operator is required here (None was given)")
    if isinstance(op, str):
        return _REDUCE_ALIASES.get(op, op)
    name = getattr(op, "_nki_op", None)
    if name is not None:
        return name
    try:
        if op in _NUMPY:
            return _NUMPY[op]
    except TypeError:
        pass
    _refuse(f"{op!r} is not an operator the engines know")


def _refuse(message: str):
    """Raise ``operator-kind`` at the kernel line being traced (``nki.isa._refuse``)."""
    from nkihub.nki.isa import _refuse as refuse
    raise refuse("operator-kind", f"{message}; pass an nl function such as nl.add or nl.exp (source: nki.api.shared)")
