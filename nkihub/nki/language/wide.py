"""``nl`` expressions over tiles with more free dims than an instruction's access pattern holds.

An engine instruction addresses at most ``target.max_ap_free_dims`` (4) free dims. The high-level ``nl``
functions accept tiles with more, as the compiler does: dims that are contiguous in every operand are
merged, and when that is not enough the expression becomes several instructions, one per index of the
outermost free dims. ``nisa`` calls stay one instruction each (and are refused beyond the limit).
"""
from __future__ import annotations

import itertools

from nkihub.nki import tracing
from nkihub.nki.tensor import NkiTensor


def _merged(dims_list: list[list]) -> list[list]:
    """Free dims of equally shaped views with size-1 dims dropped and neighbours that are contiguous in
    every view merged (sizes agree across views; strides may not)."""
    keep = [i for i, (_, n) in enumerate(dims_list[0]) if n != 1]
    dims_list = [[d[i] for i in keep] for d in dims_list]
    i = 0
    while i + 1 < len(dims_list[0]):
        if all(d[i][0] == d[i + 1][0] * d[i + 1][1] for d in dims_list):
            dims_list = [d[:i] + [(d[i + 1][0], d[i][1] * d[i + 1][1])] + d[i + 2:] for d in dims_list]
        else:
            i += 1
    return dims_list


def _slices(views: list[NkiTensor], limit: int):
    """Lists of sub-views (one per view) covering ``views`` with at most ``limit`` free dims each."""
    free = _merged([list(v.dims[1:]) for v in views])
    outer = max(0, len(free[0]) - limit)
    for idx in itertools.product(*(range(n) for _, n in free[0][:outer])):
        yield [NkiTensor(v.spec, v.offset + sum(i * st for i, (st, _) in zip(idx, f[:outer])),
                         (v.dims[0],) + (tuple(f[outer:]) or ((1, 1),)))
               for v, f in zip(views, free)]


def per_instruction(fn, out: NkiTensor, *args, **kwargs):
    """Call the destination-first ``nisa`` function ``fn(out, *args, **kwargs)``, split into one call per
    slice when ``out`` has more free dims than an instruction holds. Tile arguments shaped like ``out``
    are sliced with it; anything else ([P, 1] columns, numbers) is passed unchanged. Returns ``out``."""
    b = tracing.current()
    limit = b.target.max_ap_free_dims if b is not None else None
    if limit is None or len(out.dims) - 1 <= limit:
        fn(out, *args, **kwargs)
        return out
    names = [k for k, v in kwargs.items() if isinstance(v, NkiTensor) and v.shape == out.shape]
    pos = [i for i, a in enumerate(args) if isinstance(a, NkiTensor) and a.shape == out.shape]
    views = [out] + [args[i] for i in pos] + [kwargs[k] for k in names]
    for parts in _slices(views, limit):
        a, kw = list(args), dict(kwargs)
        for i, p in zip(pos, parts[1:]):
            a[i] = p
        for k, p in zip(names, parts[1 + len(pos):]):
            kw[k] = p
        fn(parts[0], *a, **kw)
    return out
