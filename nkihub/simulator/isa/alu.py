"""ALU operators and activation functions of the engines, as numpy functions on float32 arrays.

Names are the NKI names (``add``, ``maximum``, ``exp``, ``gelu_apprx_tanh`` ...). The engines compute in
fp32; integer and bitwise operators work on int32.
"""
from __future__ import annotations

import numpy as np

_F = np.float32


def _erf(x: np.ndarray) -> np.ndarray:
    # Numerical Recipes' erfc Chebyshev fit (fractional error < 1.2e-7): numpy has no erf and the
    # machine layer must not pull in scipy or torch for one function.
    z = np.abs(x).astype(np.float64)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = (-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277)))))))))
    r = 1.0 - t * np.exp(poly)
    return np.where(x >= 0, r, -r).astype(_F)


_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))
_INV_SQRT2 = np.float32(1.0 / np.sqrt(2.0))
_INV_SQRT_2PI = np.float32(1.0 / np.sqrt(2.0 * np.pi))


def _sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x))).astype(_F)


def _gelu(x):
    return (0.5 * x * (1.0 + _erf(x * _INV_SQRT2))).astype(_F)


def _gelu_dx(x):
    return (0.5 * (1.0 + _erf(x * _INV_SQRT2)) + x * _INV_SQRT_2PI * np.exp(-0.5 * x * x)).astype(_F)


def _gelu_tanh(x):
    return (0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))).astype(_F)


def _gelu_sigmoid(x):
    return (x * _sigmoid(1.702 * x)).astype(_F)


def _gelu_sigmoid_dx(x):
    s = _sigmoid(1.702 * x)
    return (s + 1.702 * x * s * (1.0 - s)).astype(_F)


def _softplus(x):
    return (np.logaddexp(0.0, x)).astype(_F)


def _silu_dx(x):
    s = _sigmoid(x)
    return (s * (1.0 + x * (1.0 - s))).astype(_F)


def _mish(x):
    return (x * np.tanh(_softplus(x))).astype(_F)


def _safe(fn):
    def run(x):
        with np.errstate(all="ignore"):
            return np.asarray(fn(x), dtype=_F)
    return run


# The raw functions (floating-point errors not silenced: callers run them under np.errstate).
ACTIVATION_FNS: dict[str, callable] = {
    "copy": lambda x: x, "identity": lambda x: x, "bypass": lambda x: x,
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu, "gelu_dx": _gelu_dx, "gelu_apprx_tanh": _gelu_tanh, "gelu_apprx_sigmoid": _gelu_sigmoid,
    "gelu_apprx_sigmoid_dx": _gelu_sigmoid_dx, "silu": lambda x: x * _sigmoid(x), "silu_dx": _silu_dx,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "sqrt": np.sqrt, "reciprocal": lambda x: 1.0 / x,
    "square": np.square, "abs": np.abs, "negative": np.negative, "sign": np.sign, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "arctan": np.arctan, "erf": _erf,
    "erf_dx": lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x), "softplus": _softplus, "mish": _mish,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
}
ACTIVATIONS: dict[str, callable] = {name: _safe(fn) for name, fn in ACTIVATION_FNS.items()}
# Activations that are numpy ufuncs (float32 in and out), which may write into an ``out=`` array.
UFUNC_ACTIVATIONS = frozenset(name for name, fn in ACTIVATION_FNS.items() if isinstance(fn, np.ufunc))


def _cmp(fn):
    return lambda a, b: fn(a, b).astype(_F)


def _int(fn):
    return lambda a, b: fn(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)).astype(_F)


ALU_OPS: dict[str, callable] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power, "mod": np.mod, "fmod": np.fmod,
    "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    "abs_min": lambda a, b: np.minimum(np.abs(a), np.abs(b)),
    "bypass": lambda a, b: a + np.zeros_like(b),
    "equal": _cmp(np.equal), "not_equal": _cmp(np.not_equal), "less": _cmp(np.less),
    "less_equal": _cmp(np.less_equal), "greater": _cmp(np.greater), "greater_equal": _cmp(np.greater_equal),
    "logical_and": _cmp(lambda a, b: np.logical_and(a != 0, b != 0)),
    "logical_or": _cmp(lambda a, b: np.logical_or(a != 0, b != 0)),
    "logical_xor": _cmp(lambda a, b: np.logical_xor(a != 0, b != 0)),
    "bitwise_and": _int(np.bitwise_and), "bitwise_or": _int(np.bitwise_or),
    "bitwise_xor": _int(np.bitwise_xor), "left_shift": _int(np.left_shift),
    "right_shift": _int(np.right_shift),
    # One-input operators of the table (the second operand is ignored): |a| and bitwise NOT.
    "abs": lambda a, b: np.abs(a) + np.zeros_like(b), "invert": _int(lambda a, b: np.invert(a) + 0 * b),
}

# Reductions along free axes: name -> (numpy reduce, identity element).
REDUCE_OPS: dict[str, tuple[callable, float]] = {
    "add": (np.sum, 0.0), "maximum": (np.max, -np.inf), "minimum": (np.min, np.inf),
    "multiply": (np.prod, 1.0), "abs_max": (lambda a, axis, keepdims: np.max(np.abs(a), axis=axis,
                                                                             keepdims=keepdims), 0.0),
    "logical_and": (lambda a, axis, keepdims: np.all(a != 0, axis=axis, keepdims=keepdims).astype(_F), 1.0),
    "logical_or": (lambda a, axis, keepdims: np.any(a != 0, axis=axis, keepdims=keepdims).astype(_F), 0.0),
}
_REDUCE_ALIASES = {"max": "maximum", "min": "minimum", "sum": "add", "prod": "multiply", "all": "logical_and"}

# Bitvec operators (the ALU table's other kind is arithmetic): integer bit patterns, no casting.
BITVEC = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "invert"})

# Operators whose repeated application may be reordered (used by the affine_range dependency rule).
ASSOCIATIVE = frozenset({"add", "maximum", "minimum", "multiply", "bitwise_and", "bitwise_or", "bitwise_xor"})


# ALU operators that are numpy ufuncs: float32 in, float32 out, so they may write into an ``out=`` array.
UFUNC_OPS = frozenset({"add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "mod", "fmod"})


def alu_fn(name: str):
    """The raw numpy function of an ALU operator (floating-point errors not silenced)."""
    try:
        return ALU_OPS[name]
    except KeyError:
        raise ValueError(f"unknown ALU operator {name!r}; known: {', '.join(sorted(ALU_OPS))}") from None


def alu(name: str):
    """The numpy function of an ALU operator (binary, float32 in and out)."""
    fn = alu_fn(name)

    def run(a, b):
        with np.errstate(all="ignore"):
            return np.asarray(fn(a, b), dtype=_F)
    return run


def activation(name: str):
    """The numpy function of an activation (unary, float32 in and out)."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; known: {', '.join(sorted(ACTIVATIONS))}") from None


def reduce_name(name: str) -> str:
    """Canonical reduce operator name (``max`` -> ``maximum``)."""
    name = _REDUCE_ALIASES.get(name, name)
    if name not in REDUCE_OPS:
        raise ValueError(f"unknown reduce operator {name!r}; known: {', '.join(sorted(REDUCE_OPS))}")
    return name


def reduce(name: str, a: np.ndarray, axis, keepdims: bool = True) -> np.ndarray:
    """Reduce float32 ``a`` over ``axis`` with the named operator."""
    fn, _ = REDUCE_OPS[reduce_name(name)]
    with np.errstate(all="ignore"):
        return np.asarray(fn(a, axis=axis, keepdims=keepdims), dtype=_F)
