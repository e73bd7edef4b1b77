"""``@nki.autotune(...)``: a kernel that picks its fastest config per (key values, target), in the manner
of ``triton.autotune``, timed on the cost model instead of a device.

    @nki.autotune(space={"k_group": [1, 2, 4], "m_tiles": [1, 2, 4]}, key=["a", "b"],
                  target=("trn1", "trn2"), check=lambda a, b: a @ b)
    @nki.jit
    def matmul(a, b, k_group=4, m_tiles=4): ...

    c = matmul(a, b)      # first call with these shapes: sweeps, caches the best, runs it
    c = matmul(a, b)      # later calls (this or another process): the cached best config
    matmul.best_config    # the Config the last call ran with (as triton.autotune's attribute)
    matmul.config_for(a, b, target="trn1")   # the config for given arguments (tunes if need be)

The best config is cached on disk (see :mod:`nki.autotune.cache`); ``NKI_PRINT_AUTOTUNING=1`` prints
the report of every sweep.
"""
from __future__ import annotations

import copy
import functools
import inspect
import sys
import threading

from nkihub.nki import config as nki_config
from nkihub.nki.arrays import is_array, to_numpy
from nkihub.nki.autotune import cache
from nkihub.nki.autotune.space import Config, as_configs, check_space
from nkihub.nki.autotune.sweep import targets_of, tune
from nkihub.simulator.dtypes import dtype_name
from nkihub.simulator.targets import get_target


def key_values(kernel, key, args, kwargs) -> list:
    """The values a config is cached under: each ``key`` argument (a tensor by its shape and dtype, a
    constant by its repr) and, as Triton does, the dtype of every tensor argument. ``key=None`` keys by
    every argument."""
    bound = kernel._bind(args, kwargs)
    named = dict(bound.arguments)
    names = list(named) if key is None else list(key)
    missing = [n for n in names if n not in named]
    if missing:
        raise ValueError(f"autotune key {missing[0]!r} is not a parameter of {kernel.__name__}"
                         f"{inspect.signature(kernel.fn)}")

    def val(v):
        if is_array(v):
            arr = to_numpy(v)
            return [list(arr.shape), dtype_name(arr.dtype)]
        return repr(v)
    out = [[n, val(named[n])] for n in names]
    out.append(["dtypes", [dtype_name(to_numpy(v).dtype) for v in named.values() if is_array(v)]])
    if kernel.grid:
        out.append(["grid", list(kernel.grid)])
    return out


class Autotuner:
    """An autotuned ``@nki.jit`` kernel (made by :func:`autotune`). Call it like the kernel; its tuned
    parameters are chosen for you. ``cache`` maps (key values, target) to the best Config found in this
    process; ``reports`` holds the TuneReport of every sweep it ran."""

    def __init__(self, kernel, *, configs=None, space=None, key=None, target=None, check=None, check_args=None,
                 rtol=None, search="auto", budget=64, seed=0, workers=None, ray=None,
                 prune_configs_by=None):
        from nkihub.nki.jit import JitKernel, jit
        self.kernel = kernel if isinstance(kernel, JitKernel) else jit(kernel)
        if (configs is None) == (space is None):
            raise ValueError("nki.autotune: give exactly one of configs=[...] or space={...}")
        self.configs = as_configs(configs) if configs is not None else None
        self.space = check_space(space) if space is not None else None
        self.key = None if key is None else list(key)
        self.targets = targets_of(target) if target is not None else None
        self.check, self.check_args, self.rtol = check, check_args, rtol
        self.search, self.budget, self.seed, self.workers, self.ray = search, budget, seed, workers, ray
        prune = prune_configs_by or {}
        unknown = set(prune) - {"early_config_prune"}
        if unknown:
            raise ValueError(f"nki.autotune prune_configs_by: only 'early_config_prune' applies (the cost model "
                             f"is the perf model), got {sorted(unknown)}")
        self.prune = prune.get("early_config_prune")
        self.cache: dict = {}
        self.reports: list = []
        self._last: Config | None = None     # the config of the last launch (best_config)
        self._lock = threading.Lock()
        self._digest = None
        functools.update_wrapper(self, self.kernel.fn)

    def __repr__(self) -> str:
        return f"<nki.autotune of {self.kernel!r}>"

    def __getitem__(self, grid) -> "Autotuner":
        """``tuned[gx, gy](...)``: the SPMD launch, tuned per grid (shares this kernel's caches)."""
        clone = copy.copy(self)
        clone.kernel = self.kernel[grid]
        return clone

    @property
    def fn(self):
        return self.kernel.fn

    def _target(self, target) -> str:
        if target is not None:
            return get_target(target).name
        current = get_target(None).name
        if self.targets is None or current in self.targets:
            return current
        return self.targets[0]

    @property
    def best_config(self) -> "BestConfig":
        """The config the last launch ran with, as ``triton.autotune``'s attribute: it compares, hashes and
        reads (``.kwargs``, ``str``) like that :class:`Config`, and is false (no ``kwargs``) before the
        first launch. Called, ``best_config(*args, target=None, **kwargs)`` is :meth:`config_for` (the
        config for those arguments, tuning if need be), as in nkihub before the attribute."""
        return BestConfig(self._last, self)

    def config_for(self, *args, target=None, **kwargs) -> Config:
        """The config these arguments run with on ``target``: from this process's cache, else the disk
        cache, else a sweep (of every target given to the decorator, which the call's target joins)."""
        tgt = self._target(target)
        kv = key_values(self.kernel, self.key, args, kwargs)
        mem = cache.best_key(kv, tgt)
        found = self.cache.get(mem)
        if found is not None:
            return found
        with self._lock:
            if self._digest is None:
                self._digest = cache.kernel_digest(self.kernel)
            entry = cache.load_best(self._digest).get(mem)
            if entry is not None:
                self.cache[mem] = Config(entry["config"])
                return self.cache[mem]
            targets = tuple(dict.fromkeys((*(self.targets or ()), tgt)))
            self.tune(*args, target=targets, **kwargs)
        if mem not in self.cache:
            raise ValueError(f"nki.autotune: no config of {self.kernel.__name__} passed on {tgt}; "
                             f"the report:\n{self.reports[-1].table()}")
        return self.cache[mem]

    def tune(self, *args, target=None, progress=None, **kwargs):
        """Sweep now for these arguments on ``target`` (default: the decorator's targets, else the current
        one), cache the best config per target on disk, return the TuneReport."""
        targets = targets_of(target if target is not None else self.targets)
        kv = key_values(self.kernel, self.key, args, kwargs)
        report = tune(self.kernel, *args, configs=self.configs, space=self.space, target=targets,
                      check=self.check, check_args=self.check_args, rtol=self.rtol,
                      key=tuple(map(tuple, kv)), search=self.search, budget=self.budget, seed=self.seed,
                      workers=self.workers, ray=self.ray, prune=self.prune, progress=progress, **kwargs)
        self.reports.append(report)
        digest = self._digest or cache.kernel_digest(self.kernel)
        for t, best in report.best.items():
            default = report.default_result(t)
            entry = {"config": best.config.kwargs, "latency_s": best.latency_s,
                     "default_latency_s": default.latency_s if default is not None and default.latency_s else None}
            self.cache[cache.best_key(kv, t)] = best.config
            cache.store_best(digest, cache.best_key(kv, t), entry)
        if nki_config.print_autotuning():
            print(f"nki.autotune {self.kernel.__name__} ({report.seconds:.1f} s, {len(report.results)} "
                  f"candidates, {report.where}):\n{report.table()}", file=sys.stderr)
        return report

    def __call__(self, *args, **kwargs):
        config = self._last = self.config_for(*args, **kwargs)
        return self.kernel(*args, **kwargs, **config.kwargs)

    def run(self, *args, target=None, **kwargs):
        """Run on the simulator for ``target`` with the best config (see ``JitKernel.run``)."""
        config = self._last = self.config_for(*args, target=target, **kwargs)
        return self.kernel.run(*args, target=self._target(target), **kwargs, **config.kwargs)


class BestConfig(Config):
    """``Autotuner.best_config``: the Config of the last launch (false and without ``kwargs`` before the
    first), callable as ``best_config(*args, target=None, **kwargs)`` = ``Autotuner.config_for``."""

    __slots__ = ("_tuner", "chosen")

    def __init__(self, config: Config | None, tuner: "Autotuner"):
        super().__init__(config.kwargs if config is not None else None)
        self._tuner, self.chosen = tuner, config is not None

    def __call__(self, *args, target=None, **kwargs) -> Config:
        return self._tuner.config_for(*args, target=target, **kwargs)

    def __bool__(self) -> bool:
        return self.chosen

    def __eq__(self, other) -> bool:
        if not self.chosen:
            return isinstance(other, BestConfig) and not other.chosen and other._tuner is self._tuner
        return Config.__eq__(self, other) and getattr(other, "chosen", True)

    __hash__ = Config.__hash__

    def __repr__(self) -> str:
        if not self.chosen:
            return f"<best_config of {self._tuner.kernel.__name__}: no launch yet>"
        return Config.__repr__(self)


def autotune(configs=None, key=None, *, space=None, target=None, check=None, check_args=None, rtol=None,
             search="auto", budget=64, seed=0, workers=None, ray=None, prune_configs_by=None):
    """Decorator for an ``@nki.jit`` kernel whose tuning parameters are keyword constants.

    ``configs``: a list of dicts (or ``nki.autotune.Config``); or ``space``: ``{"name": [values]}``.
    ``key``: argument names whose change retunes (tensors by shape and dtype; default every argument).
    ``target``: the target(s) to tune for (default the current one, ``NEURON_PLATFORM_TARGET_OVERRIDE``).
    ``check``: reference function of the kernel's arguments (numpy in, numpy/torch out) every candidate
    must match when simulated on ``check_args`` (default the call's own arguments when small); without it,
    candidates must match the kernel's default config. See :func:`nki.autotune.tune` for the rest.
    """
    def wrap(kernel):
        return Autotuner(kernel, configs=configs, space=space, key=key, target=target, check=check,
                         check_args=check_args, rtol=rtol, search=search, budget=budget, seed=seed,
                         workers=workers, ray=ray, prune_configs_by=prune_configs_by)
    return wrap
