"""The match rule of the library's own validator, restated: an output matches its reference when every
element satisfies ``|out - ref| <= atol + rtol * max|ref|`` (the tolerance scales with the reference's
largest finite magnitude, not element by element) and both are finite in the same places."""
from __future__ import annotations

import numpy as np


def as_f64(a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind in "biu":
        return a.astype(np.float64)
    return a.astype(np.float32).astype(np.float64)


def compare(out, ref, rtol: float, atol: float) -> tuple[bool, str]:
    """(matches, one-line summary) for one output against its reference."""
    a, b = as_f64(out), as_f64(ref)
    if a.shape != b.shape:
        if a.size == b.size:
            a = a.reshape(b.shape)
        else:
            return False, f"shape {a.shape} but the reference has {b.shape}"
    finite_b = np.abs(b[np.isfinite(b)])
    brange = float(finite_b.max()) if finite_b.size else 0.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - b)
    same_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    diff = np.where(same_inf, 0.0, diff)
    finite_ok = bool((np.isfinite(a) == np.isfinite(b)).all())
    close = diff <= atol + rtol * brange
    ok = bool(close.all()) and finite_ok
    worst = float(np.nanmax(diff)) if diff.size else 0.0
    bad = int((~close).sum())
    if not finite_ok:
        return False, f"{int((np.isfinite(a) != np.isfinite(b)).sum())} elements finite in one but not the other " \
                      f"(NaN in the output usually means a read of memory nothing wrote)"
    if ok:
        return True, f"max |diff| {worst:.3g} (allowed {atol + rtol * brange:.3g})"
    return False, f"{bad} of {close.size} elements differ; max |diff| {worst:.3g} > {atol + rtol * brange:.3g}"
