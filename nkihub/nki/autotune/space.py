"""The candidates of a sweep: a list of configs, or a space of parameter values searched exhaustively
when it is small and with Optuna's TPE sampler when it is large (never a hand-written optimiser).

A config is a set of keyword constants of the kernel (``{"k_group": 2, "m_tiles": 4}``), written as a
dict or as ``nki.autotune.Config(kwargs)`` in the manner of ``triton.Config``.
"""
from __future__ import annotations

import itertools
import math

EXHAUSTIVE_LIMIT = 256   # spaces with at most this many configs are searched exhaustively
_SCALARS = (type(None), bool, int, float, str)


class Config:
    """The keyword constants of one candidate: ``Config({"k_group": 2})`` or ``Config(k_group=2)``.
    Hashable and ordered by name, so equal configs key the same cache entry."""

    __slots__ = ("kwargs",)

    def __init__(self, kwargs: dict | None = None, **more):
        merged = dict(kwargs or {}, **more)
        for name, value in merged.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"autotune config parameter names are identifiers, got {name!r}")
            if not isinstance(value, _SCALARS):
                raise ValueError(f"autotune config {name}={value!r}: values are None, bool, int, float or str "
                                 "(keyword constants of the kernel)")
        self.kwargs = dict(sorted(merged.items()))

    def items(self) -> tuple:
        return tuple(self.kwargs.items())

    def __eq__(self, other) -> bool:
        return isinstance(other, Config) and self.items() == other.items()

    def __hash__(self) -> int:
        return hash(self.items())

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items()) + ")"

    def __str__(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items()) or "(no parameters)"


def as_config(value) -> Config:
    """A Config from a Config, a dict of keyword constants, or a Triton-style object with ``.kwargs``."""
    if isinstance(value, Config):
        return value
    if isinstance(value, dict):
        return Config(value)
    if isinstance(getattr(value, "kwargs", None), dict):
        return Config(value.kwargs)
    raise ValueError(f"an autotune config is a dict of keyword constants or nki.autotune.Config, got {value!r}")


def as_configs(configs) -> list[Config]:
    """The configs of a ``configs=[...]`` list, duplicates dropped (first kept), in order."""
    out = list(dict.fromkeys(as_config(c) for c in configs))
    if not out:
        raise ValueError("autotune configs=[] is empty: give at least one config")
    return out


def check_space(space: dict) -> dict[str, tuple]:
    """``space={"name": [values...]}`` checked: identifier names, non-empty lists of constants."""
    if not isinstance(space, dict) or not space:
        raise ValueError("autotune space= is a non-empty dict of parameter name -> list of values")
    out = {}
    for name, values in space.items():
        values = tuple(values) if isinstance(values, (list, tuple, range)) else None
        if not values:
            raise ValueError(f"autotune space[{name!r}] must be a non-empty list of values")
        Config({name: v for v in values[:1]})   # checks the name and value kinds
        for v in values:
            Config({name: v})
        out[name] = tuple(dict.fromkeys(values))
    return out


def space_size(space: dict[str, tuple]) -> int:
    return math.prod(len(v) for v in space.values())


def product(space: dict[str, tuple]) -> list[Config]:
    """Every config of the space, the last parameter varying fastest."""
    names = list(space)
    return [Config(dict(zip(names, values))) for values in itertools.product(*space.values())]


class Exhaustive:
    """Hands out every config once, the default config first (evaluated even when outside the list: it
    is what the sweep is compared with)."""

    name = "exhaustive"

    def __init__(self, configs: list[Config], first: Config | None = None):
        self._todo = ([first] if first is not None else []) + [c for c in configs if c != first]
        self.size = len(self._todo)

    def ask(self, n: int) -> list[Config]:
        batch, self._todo = self._todo[:n], self._todo[n:]
        return batch

    def tell(self, config: Config, latency_s: float | None) -> None:
        pass


class TPE:
    """Optuna's TPE sampler over a space (ask-and-tell), seeded, so the same sweep asks the same configs.
    Invalid or wrong candidates are told as infeasible through TPE's constraints, so it learns to avoid
    them. Stops after ``budget`` distinct configs (or when the sampler keeps repeating itself)."""

    name = "tpe"

    def __init__(self, space: dict[str, tuple], budget: int, seed: int = 0, first: Config | None = None):
        try:
            import optuna
        except ImportError:
            raise ImportError(f"a space of {space_size(space)} configs is searched with Optuna's TPE sampler: "
                              "pip install 'nkihub[tune]' (optuna>=5), or give a space of at most "
                              f"{EXHAUSTIVE_LIMIT} configs") from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(2, budget // 4)))
        self._study = optuna.create_study(direction="minimize", sampler=sampler)
        self._space, self._budget = space, budget
        self.size = min(budget, space_size(space))
        self._seen: dict[Config, float | None] = {}
        self._pending: dict[Config, list] = {}
        self._asked = 0
        if first is not None and all(first.kwargs.get(k) in v for k, v in space.items()):
            self._study.enqueue_trial(dict(first.kwargs))

    def ask(self, n: int) -> list[Config]:
        batch = []
        # a sampler that keeps proposing configs it has seen is done: bound the trials it may waste
        while len(batch) < n and len(self._seen) + len(self._pending) < self._budget and self._asked < 4 * self._budget:
            trial = self._study.ask()
            self._asked += 1
            config = Config({k: trial.suggest_categorical(k, list(v)) for k, v in self._space.items()})
            if config in self._seen:
                self._finish(trial, self._seen[config])
            elif config in self._pending:
                self._pending[config].append(trial)
            else:
                self._pending[config] = [trial]
                batch.append(config)
        return batch

    def tell(self, config: Config, latency_s: float | None) -> None:
        self._seen[config] = latency_s
        for trial in self._pending.pop(config, []):
            self._finish(trial, latency_s)

    def _finish(self, trial, latency_s: float | None) -> None:
        feasible = latency_s is not None
        trial.set_constraint("passes", 0.0 if feasible else 1.0)   # TPE samples away from infeasible configs
        self._study.tell(trial, latency_s if feasible else float("inf"))


def search_for(space: dict | None, configs: list | None, *, search: str = "auto", budget: int = 64, seed: int = 0,
               first: Config | None = None):
    """The search over ``configs`` or ``space``: ``exhaustive`` (every config), ``tpe`` (Optuna, at most
    ``budget`` configs), or ``auto`` (exhaustive up to EXHAUSTIVE_LIMIT configs, else TPE)."""
    if search not in ("auto", "exhaustive", "tpe"):
        raise ValueError(f"autotune search={search!r}: expected 'auto', 'exhaustive' or 'tpe'")
    if configs is not None:
        if search == "tpe":
            raise ValueError("autotune search='tpe' needs space={...}, not configs=[...]")
        return Exhaustive(configs, first)
    size = space_size(space)
    if search == "exhaustive" or (search == "auto" and size <= EXHAUSTIVE_LIMIT):
        return Exhaustive(product(space), first)
    if budget < 1:
        raise ValueError(f"autotune budget={budget}: at least 1 config")
    return TPE(space, budget, seed, first)
