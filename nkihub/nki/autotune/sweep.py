"""``nki.autotune.tune``: sweep the configs of a kernel for one set of arguments on one or more targets.

Every candidate is traced at the full shapes and checked against the target's rules (a violation
removes it, with the rule as its reason), simulated on small inputs against the reference (a wrong
result removes it), and estimated on the target's cost model. Results are cached on disk one candidate
at a time, so a sweep that stopped resumes where it was; the search asks and is told in a fixed order,
so the same sweep gives the same report in this process, on local workers or on a Ray cluster.
"""
from __future__ import annotations

import inspect
import time

import numpy as np

from nkihub.nki.arrays import is_array, to_numpy
from nkihub.nki.autotune import cache, parallel
from nkihub.nki.autotune.candidate import OK, CheckCase, KernelRef, Result, Task, specs
from nkihub.nki.autotune.report import TuneReport
from nkihub.nki.autotune.space import Config, as_config, as_configs, check_space, search_for
from nkihub.simulator.targets import get_target

CHECK_ELEMENTS = 1 << 24   # the call's own inputs are the check inputs when they hold at most this many elements
MIN_CHECK_DIM = 128        # smaller check inputs keep every dim at least this long (a partition's worth)
TPE_BATCH = 8              # configs asked per round of a TPE search (fixed: results do not depend on workers)


def default_config(kernel, names) -> Config | None:
    """The kernel's own values of the parameters ``names`` (its signature defaults), or None when one
    has no default."""
    params = inspect.signature(kernel.fn).parameters
    values = {}
    for name in names:
        p = params.get(name)
        if p is None or p.default is inspect.Parameter.empty:
            return None
        values[name] = p.default
    try:
        return Config(values)
    except ValueError:
        return None


def targets_of(target) -> tuple:
    """Target names from None (the default target), a name, a comma list or a sequence."""
    if target is None:
        return (get_target(None).name,)
    items = target.split(",") if isinstance(target, str) else list(target)
    names = tuple(dict.fromkeys(get_target(t.strip() if isinstance(t, str) else t).name for t in items))
    if not names:
        raise ValueError("autotune target=: give at least one target")
    return names


def _elements(args) -> int:
    return sum(to_numpy(a).size for a in args if is_array(a))


def _cut(d: int, factor: int) -> int:
    """``d`` divided by the largest power of two up to ``factor`` that divides it and leaves at least
    MIN_CHECK_DIM."""
    while factor > 1 and (d % factor or d // factor < MIN_CHECK_DIM):
        factor //= 2
    return d // factor


def _sliced(args, factor: int) -> tuple:
    """The leading slices of ``args``' tensors with every dim cut by ``factor`` (see _cut: equal sizes are
    cut alike, so dims that must match still match); constants kept."""
    out = []
    for a in args:
        if is_array(a):
            arr = to_numpy(a)
            a = np.ascontiguousarray(arr[tuple(slice(0, _cut(d, factor)) for d in arr.shape)])
        out.append(a)
    return tuple(out)


def check_inputs(kernel, args, kwargs, probe, target) -> tuple[tuple, dict]:
    """The inputs ``(args, kwargs)`` candidates are simulated on when the caller gave none: the call's own
    when their tensors hold at most CHECK_ELEMENTS elements; else the largest leading slices of them (every
    long dim halved, quartered ...: see _sliced) within that many that the kernel accepts with the
    ``probe`` config (traced for ``target``). ValueError with the reason when there are none."""
    names = list(kwargs)
    total = _elements((*args, *kwargs.values()))
    if total <= CHECK_ELEMENTS:
        return tuple(args), dict(kwargs)
    tried, factor, last = [], 2, None
    while True:
        cut = _sliced((*args, *kwargs.values()), factor)
        small, small_kw = cut[:len(args)], dict(zip(names, cut[len(args):]))
        shapes = [tuple(a.shape) for a in cut if is_array(a)]
        if shapes == last:     # no dim can be cut further
            break
        last = shapes
        if _elements(cut) <= CHECK_ELEMENTS:
            try:
                kernel.trace(*small, target=target, **small_kw, **(probe.kwargs if probe is not None else {}))
                return small, small_kw
            except (ValueError, TypeError, NotImplementedError) as exc:   # nki's KernelRuleError is a ValueError
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
                tried.append(f"{' '.join('x'.join(map(str, s)) for s in shapes)}: {first}")
        factor *= 2
    why = ("; ".join(tried[:2]) + (" ..." if len(tried) > 2 else "")) if tried else \
        f"no dim is longer than {MIN_CHECK_DIM} and divisible by 2"
    raise ValueError(f"autotune simulates each candidate on check inputs: these arguments hold {total} elements "
                     f"(more than the {CHECK_ELEMENTS} it simulates per candidate) and no leading slice of them "
                     f"within that was accepted by {kernel.__name__} ({why}); give inputs shaped for the kernel "
                     "(check_args=(...); nkihub tune: --check-shape)")


def check_case(kernel, check, args, kwargs, *, check_args=None, check_kwargs=None, default=None,
               target=None, rtol=None, probe=None) -> CheckCase | None:
    """The check every candidate must pass: the check inputs (``check_args``, else :func:`check_inputs`
    of the call's own, the kernel traced with ``probe`` to accept smaller ones) and the expected outputs
    of ``check`` (a reference function taking the kernel's arguments, numpy in, numpy or torch out) or,
    without one, of the kernel with its default config. None when there is neither a reference nor a
    default config."""
    kw = dict(check_kwargs if check_kwargs is not None else kwargs)
    if check is None and default is None:
        return None
    if check_args is not None:
        small = tuple(check_args)
    else:
        small, kw = check_inputs(kernel, args, kw, probe, target)
    small = tuple(np.ascontiguousarray(to_numpy(a)) if is_array(a) else a for a in small)
    kw = {k: np.ascontiguousarray(to_numpy(v)) if is_array(v) else v for k, v in kw.items()}
    if check is not None:
        expected, against = check(*small, **kw), "the reference"
    else:
        from nkihub.nki.estimate import paused
        with paused():
            expected = kernel.run(*small, target=target, **kw, **default.kwargs)
        against = "the default config"
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    expected = tuple(np.array(to_numpy(e)) for e in expected)
    return CheckCase(small, kw, expected, rtol, against)


def tune(kernel, *args, configs=None, space=None, target=None, check=None, check_args=None, check_kwargs=None,
         rtol=None, key=(), search="auto", budget=64, seed=0, workers=None, ray=None, prune=None,
         default=None, use_cache=True, progress=None, **kwargs) -> TuneReport:
    """Sweep ``kernel`` (``@nki.jit``) over ``configs=[{...}, ...]`` or ``space={"name": [values]}`` for
    the arguments ``args``/``kwargs`` (numpy arrays or torch tensors of the real shapes; their values are
    not read) on ``target`` (a name, a list, or "trn1,trn2"; default the current target).

    ``check``: reference function of the kernel's arguments; candidates are simulated on ``check_args``
    (default: ``args`` when they hold at most CHECK_ELEMENTS elements, else the largest leading slices of
    them within that which the kernel accepts, see :func:`check_inputs`) and their max error relative to the reference's max magnitude must be
    at most ``rtol`` (default by output dtype: bf16 2e-2, fp32 1e-4); without ``check`` they must match
    the kernel's default config.
    ``search``: "auto" (exhaustive up to 256 configs, else Optuna TPE for ``budget`` configs, seeded
    by ``seed``), "exhaustive" or "tpe". ``prune(configs, named_args) -> configs`` drops configs before
    the sweep (Triton's ``early_config_prune``). ``default``: the config the caller uses today (default:
    the kernel's signature defaults), always evaluated and marked in the report. ``workers``: local processes (default one per core);
    ``ray``: a Ray cluster address (default ``RAY_ADDRESS``). ``progress(done, total, result)`` is called
    after every candidate. Returns a :class:`TuneReport`.
    """
    from nkihub.nki.jit import JitKernel, jit
    k = kernel if isinstance(kernel, JitKernel) else jit(kernel)
    if (configs is None) == (space is None):
        raise ValueError("autotune: give exactly one of configs=[...] or space={...}")
    config_list = as_configs(configs) if configs is not None else None
    space = check_space(space) if space is not None else None
    names = list(space) if space is not None else list(dict.fromkeys(n for c in config_list for n in c.kwargs))
    clash = sorted(set(names) & set(kwargs))
    if clash:
        raise ValueError(f"autotune: {', '.join(clash)} is tuned, so it cannot also be passed to the kernel")
    targets = targets_of(target)
    default = as_config(default) if default is not None else default_config(k, names)
    if prune is not None:
        from nkihub.nki.autotune.space import product
        named = dict(k._bind(args, kwargs).arguments)
        config_list = as_configs(prune(config_list if config_list is not None else product(space), named))
        space = None
    probe = default or (config_list[0] if config_list else Config({n: v[0] for n, v in space.items()}))
    case = check_case(k, check, args, kwargs, check_args=check_args, check_kwargs=check_kwargs, default=default,
                      target=targets[0], rtol=rtol, probe=probe)
    searches = {t: search_for(space, config_list, search=search, budget=budget, seed=seed, first=default)
                for t in targets}
    ref = KernelRef.of(k)
    digest = cache.kernel_digest(k) if use_cache else None
    arg_specs = specs(args)
    kw_specs = {n: v for n, v in zip(kwargs, specs(kwargs.values()))}
    total = sum(s.size for s in searches.values())
    results: list[Result] = []
    ex, start = None, time.perf_counter()
    try:
        while True:
            batch = [(t, c) for t in targets for c in searches[t].ask(TPE_BATCH if searches[t].name == "tpe" else 1 << 30)]
            if not batch:
                break
            tasks = [Task(ref, c, t, arg_specs, kw_specs, case) for t, c in batch]
            out: list[Result | None] = [cache.load_result(digest, task) if digest else None for task in tasks]
            for r in out:
                if r is not None:
                    results.append(r)
                    progress and progress(len(results), total, r)
            misses = [i for i, r in enumerate(out) if r is None]
            if misses:
                ex = ex or parallel.executor(workers, ray, ref.portable, k, len(misses))
                for j, r in ex.map([tasks[i] for i in misses]):
                    out[misses[j]] = r
                    if digest:
                        cache.store_result(digest, tasks[misses[j]], r)
                    results.append(r)
                    progress and progress(len(results), total, r)
            for (t, c), r in zip(batch, out):
                searches[t].tell(c, r.latency_s if r.status == OK else None)
            # the report lists candidates in the order they were asked, whatever order they finished in
            results[len(results) - len(batch):] = out
    finally:
        if ex is not None:
            ex.close()
    where = ex.name if ex is not None else "cache"
    n_workers = getattr(ex, "workers", 1) if ex is not None else 0
    return TuneReport.build(k.__name__, key, targets, results, default, next(iter(searches.values())).name,
                            where, n_workers, time.perf_counter() - start)
