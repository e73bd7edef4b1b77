"""``import neuronxcc.nki``: nkihub's compatibility layer, for machines without the real neuronx-cc.

Why a single module in a namespace package: nkihub ships ``neuronxcc/`` WITHOUT an ``__init__.py``.
Python's import system prefers a regular package (one with ``__init__.py``) found anywhere on
``sys.path`` over namespace portions, so when the real neuronx-cc is installed its ``neuronxcc``
package always wins, whatever the path order; if both land in the same ``site-packages``, the real
``neuronxcc/nki/`` package directory wins over this ``nki.py`` module, and no file of either
distribution overwrites the other's. Only when no real neuronx-cc exists does ``neuronxcc`` become a
namespace package and this module answer ``neuronxcc.nki``; it then aliases ``nki.compat`` and its
submodules so ``import neuronxcc.nki.language as nl`` works.
"""
import sys

import nki.compat as _compat
from nki.compat import *  # noqa: F401,F403
from nki.compat import compiler, isa, language, typing  # noqa: F401

__path__ = []  # a package for the import system: submodules are the aliases below
for _sub in ("language", "isa", "typing", "compiler"):
    sys.modules[f"{__name__}.{_sub}"] = getattr(_compat, _sub)
__doc__ = _compat.__doc__
__getattr__ = _compat.__getattr__  # AWS NKI names not simulated: a clear error naming neuronxcc.nki
