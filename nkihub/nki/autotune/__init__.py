"""Autotuning without hardware: sweep a kernel's keyword constants, every candidate checked against the
target's rules, simulated against a reference on small inputs and timed on the cost model.

- ``@nki.autotune(configs=[...] | space={...}, key=[...], target=..., check=ref)``: the decorator
  (:mod:`nki.autotune.autotuner`).
- ``nki.autotune.tune(kernel, *args, space=..., target="trn1,trn2")``: one sweep, a TuneReport.
- ``nkihub tune FILE.py:KERNEL --space ... --target trn1,trn2``: the same from the shell.
"""
from __future__ import annotations

import sys
import types

from nkihub.nki.autotune.autotuner import Autotuner, autotune, key_values
from nkihub.nki.autotune.candidate import Result
from nkihub.nki.autotune.report import TuneReport
from nkihub.nki.autotune.space import Config
from nkihub.nki.autotune.sweep import tune

__all__ = ["Autotuner", "Config", "Result", "TuneReport", "autotune", "key_values", "tune"]


class _CallableModule(types.ModuleType):
    """``nki.autotune`` is both this package and the decorator: ``@nki.autotune(...)`` as Triton's
    ``@triton.autotune(...)``, ``nki.autotune.tune(...)`` for one sweep."""

    def __call__(self, *args, **kwargs):
        return autotune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
