"""Stand-ins for reference-only dependencies of aws-neuron/nki-library that are not on PyPI.

The library's torch references (and its test helpers) import ``neuron_dtypes``, a package that ships
with the Neuron SDK and is not published on PyPI. The harness installs this clearly-labelled stand-in
under that name before importing anything from the snapshot; it offers only what the references use:
``static_cast(array, dtype)`` (a numpy cast with round-to-nearest-even, as the SDK's casts do),
``is_float_type(dtype)``, and the NeuronCore dtypes by name (from ``nki.language``).

Nothing here is used by kernels: kernels only see nkihub's ``nki`` package.
"""
from __future__ import annotations

import sys
import types

import numpy as np

import nki.language as nl
from nkihub.nki.dtypes import dtype_of

STANDIN_NOTE = "nkihub stand-in for neuron_dtypes (not the Neuron SDK package)"


def _pack_x4(a: np.ndarray, name: str) -> np.ndarray:
    """Values rounded to the element format of the packed MX dtype ``name``, four consecutive ones along
    the last axis in one element (element 0 in the lowest bits), as the SDK's x4 arrays hold them."""
    from nkihub.simulator.dtypes import PACKED, packed_host_dtype
    storage, element, bits = PACKED[name]
    if a.shape[-1] % 4:
        raise ValueError(f"static_cast to {name}: the last dim ({a.shape[-1]}) must be a multiple of 4")
    codes = a.astype(np.float32).astype(element).view(np.uint8).astype(np.uint64) & ((1 << bits) - 1)
    codes = codes.reshape(a.shape[:-1] + (a.shape[-1] // 4, 4))
    packed = sum(codes[..., i] << np.uint64(bits * i) for i in range(4)).astype(storage)
    return packed.view(packed_host_dtype(name))


def static_cast(array, dtype):
    """``array`` converted to ``dtype`` (a numpy, ml_dtypes or nki dtype), rounding to nearest even;
    float to integer conversions round and saturate; a packed MX dtype (``float8_e4m3fn_x4``, ...) packs
    four values along the last axis into one element."""
    from nkihub.simulator.dtypes import PACKED
    a = np.asarray(array)
    if str(dtype) in PACKED:
        return _pack_x4(a, str(dtype))
    target = dtype_of(dtype)
    if target.kind in "iu" and a.dtype.kind == "f":
        info = np.iinfo(target)
        return np.clip(np.rint(a.astype(np.float64)), info.min, info.max).astype(target)
    if a.dtype != np.float32 and a.dtype.kind == "f" and target.kind == "f" and target.itemsize < 4:
        a = a.astype(np.float32)   # one rounding step, from fp32, as the hardware converts
    return a.astype(target)


def is_float_type(dtype) -> bool:
    """True for floating-point dtypes, the narrow ml_dtypes formats included."""
    try:
        d = dtype_of(dtype)
    except (TypeError, ValueError):
        return False
    return d.kind == "f" or (d.kind == "V" and "float" in str(d))


def install() -> types.ModuleType:
    """Register the stand-in as ``neuron_dtypes`` (idempotent); returns the module."""
    existing = sys.modules.get("neuron_dtypes")
    if existing is not None:
        return existing
    mod = types.ModuleType("neuron_dtypes", STANDIN_NOTE)
    mod.static_cast = static_cast
    mod.is_float_type = is_float_type
    mod.__nkihub_standin__ = True
    for name in ("bfloat16", "float16", "float32", "int8", "int16", "int32", "uint8", "uint16", "uint32",
                 "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float8_e8m0fnu",
                 "float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"):
        if hasattr(nl, name):
            setattr(mod, name, getattr(nl, name))
    sys.modules["neuron_dtypes"] = mod
    return mod


def install_test_enums() -> None:
    """The MoE CTE torch reference imports its variant enum (``BWMMFunc``) from the library's own test
    package, which needs the whole AWS test framework. Register a labelled stand-in module at that import
    path holding an enum with the member names the reference compares against."""
    import enum
    name = "test.integration.nkilib.core.moe.moe_cte.test_moe_cte_common"
    if name in sys.modules:
        return
    parts = name.split(".")
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg not in sys.modules:
            m = types.ModuleType(pkg, STANDIN_NOTE)
            m.__path__ = []
            sys.modules[pkg] = m
    mod = types.ModuleType(name, "nkihub stand-in: the MoE CTE variant enum its torch reference compares against")
    mod.BWMMFunc = enum.Enum("BWMMFunc", ["SHARD_ON_INTERMEDIATE", "SHARD_ON_INTERMEDIATE_HW", "SHARD_ON_BLOCK",
                                          "SHARD_ON_INTERMEDIATE_DROPPING"])
    sys.modules[name] = mod


def expose_test_utils(snapshot: str) -> None:
    """Some torch references import helpers from the library's own test utilities
    (``test.integration.nkilib.utils``, e.g. the QKV reference's norm table). That package (license
    header only) is registered here with its ``__path__`` in the snapshot, so its modules load from there
    unmodified, without putting the snapshot's root, whose ``test`` shadows the standard library's, on
    ``sys.path``."""
    import importlib
    from pathlib import Path
    name = "test.integration.nkilib.utils"
    folder = Path(snapshot).resolve() / "test" / "integration" / "nkilib" / "utils"
    parent = importlib.import_module("test.integration.nkilib")   # the stand-in chain of install_test_enums
    mod = types.ModuleType(name, "the library's test utilities package, modules loaded from the snapshot")
    mod.__path__ = [str(folder)]
    for stale in [m for m in sys.modules if m.startswith(name + ".")]:   # loaded from another snapshot
        if not str(getattr(sys.modules[stale], "__file__", "") or "").startswith(str(folder)):
            del sys.modules[stale]
    sys.modules[name] = mod
    parent.utils = mod

