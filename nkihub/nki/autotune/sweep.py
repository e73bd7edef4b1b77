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

CHECK_ELEMENTS = 1 << 20   # the call's own inputs are simulated as the check when they are this small
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


def check_case(kernel, check, args, kwargs, *, check_args=None, check_kwargs=None, default=None,
               target=None, rtol=None) -> CheckCase | None:
    """The check every candidate must pass: the small inputs (``check_args``, else the call's own when
    they hold at most CHECK_ELEMENTS elements) and the expected outputs of ``check`` (a reference
    function taking the kernel's arguments, numpy in, numpy or torch out) or, without one, of the kernel
    with its default config. None when there is neither a reference nor a default config."""
    small = tuple(check_args) if check_args is not None else tuple(args)
    kw = dict(check_kwargs if check_kwargs is not None else kwargs)
    if check_args is None and sum(to_numpy(a).size for a in small if is_array(a)) > CHECK_ELEMENTS:
        raise ValueError(f"autotune simulates each candidate on small inputs: these arguments hold more than "
                         f"{CHECK_ELEMENTS} elements, so give small inputs shaped for the kernel (check_args=(...); "
                         "nkihub tune: --check-shape) or tune on smaller shapes")
    small = tuple(np.ascontiguousarray(to_numpy(a)) if is_array(a) else a for a in small)
    if check is not None:
        expected, against = check(*small, **kw), "the reference"
    elif default is not None:
        from nkihub.nki.estimate import paused
        with paused():
            expected = kernel.run(*small, target=target, **kw, **default.kwargs)
        against = "the default config"
    else:
        return None
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
    (default: ``args`` when small) and their max error relative to the reference's max magnitude must be
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
    case = check_case(k, check, args, kwargs, check_args=check_args, check_kwargs=check_kwargs, default=default,
                      target=targets[0], rtol=rtol)
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
