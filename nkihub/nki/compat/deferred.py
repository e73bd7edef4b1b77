"""A ``mask=`` covers the whole statement it guards, as the neuronxcc compiler applies it.

In ``nl.store(out[i_p, i_f], value=nl.exp(t), mask=(i_p < n))`` the mask restricts ``nl.exp`` too: rows the
mask leaves out are never computed (and ``t`` may leave them unwritten). Tracing runs ``nl.exp(t)`` before
``nl.store`` sees the mask, so each unmasked tile-producing call is remembered here with a way to run it
again under a mask; a masked consumer that receives such a tile, still unread by anything else, removes the
unmasked instructions and re-runs the call under its own mask (recursively, for nested expressions).
"""
from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from typing import Callable

from nkihub.nki import tracing
from nkihub.nki.tensor import NkiTensor

# A masked consumer almost always follows its operands within a statement; older entries are dropped.
_RECENT = 64
_producers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Producer:
    __slots__ = ("redo", "instructions")

    def __init__(self, redo, instructions):
        self.redo = redo
        self.instructions = instructions


def mark(out=None) -> tuple[int, int] | None:
    """Where the program stands before a call: (instructions, tensors); None outside tracing. ``out``: the
    call's destination tile, counted as created by the call when it is the newest tensor."""
    b = tracing.current()
    if b is None:
        return None
    n = len(b.program.tensors)
    if out is not None and n and isinstance(out, NkiTensor) and next(reversed(b.program.tensors)) == out.name:
        n -= 1
    return len(b.program.instructions), n


def remember(result, since: tuple[int, int] | None, redo: Callable) -> None:
    """Record that ``result`` (a tile created ``since`` ``mark()``) was computed unmasked by the instructions
    emitted since; ``redo(mask)`` computes it again under ``mask`` and returns the tile to use instead."""
    b = tracing.current()
    if b is None or since is None or not isinstance(result, NkiTensor):
        return
    if result.offset != 0 or result.size != result.spec.size:
        return
    prog = b.program
    new = prog.instructions[since[0]:]
    created = set(itertools.islice(reversed(prog.tensors), len(prog.tensors) - since[1]))
    # Only calls whose every write lands in tiles they created: re-running them has no other effect.
    if not new or result.name not in created or \
            any(ap.tensor not in created for ins in new for ap in ins.dst.values()):
        return
    table = _producers.setdefault(b, OrderedDict())
    table[result.name] = _Producer(redo, new)
    while len(table) > _RECENT:
        table.popitem(last=False)


def under(x, mask):
    """``x`` for a consumer masked by ``mask``: a remembered unmasked result is recomputed under the mask
    when nothing has read it yet; anything else is returned unchanged."""
    b = tracing.current()
    if mask is None or b is None or not isinstance(x, NkiTensor):
        return x
    table = _producers.get(b)
    entry = table.get(x.name) if table else None
    if entry is None or x.offset != 0 or x.size != x.spec.size:
        return x
    ins = b.program.instructions
    ids = {id(i) for i in entry.instructions}
    # The producer's instructions are near the end: find them scanning backwards.
    found = []
    for k in range(len(ins) - 1, -1, -1):
        if id(ins[k]) in ids:
            found.append(k)
            if len(found) == len(ids):
                break
    if len(found) != len(ids) or any(ap.tensor == x.name for i in ins[found[0] + 1:] for ap in i.src.values()):
        return x
    del table[x.name]
    for k in found:   # descending: earlier indices stay valid
        del ins[k]
    return entry.redo(mask)
