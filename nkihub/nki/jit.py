"""``nki.jit``: trace a kernel for concrete shapes, dtypes and constant arguments into a Program, check
and allocate it, cache it, and replay it on the simulator on every later call with the same signature.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import linecache
import operator
import threading
import time

import numpy as np

from nkihub.nki import calllog, outputs, tracing
from nkihub.nki.arrays import is_array, is_torch, to_numpy
from nkihub.nki.runtime import Eager, NeedsRuntime
from nkihub.nki.tensor import NkiTensor
from nkihub.simulator.allocate import allocate
from nkihub.simulator.dtypes import dtype_name
from nkihub.simulator.errors import KernelRuleError, NkiError, SourceLoc
from nkihub.simulator import config as sim_config
from nkihub.simulator.reorder import allocate_in_demand_order
from nkihub.simulator.replay import executor_for
from nkihub.simulator.program import Program
from nkihub.simulator.targets import get_target
from nkihub.simulator.validate import validate


class CompiledKernel:
    """A traced, validated and allocated Program for one signature, with its executor."""

    def __init__(self, program: Program, target):
        self.program = program
        self.target = target
        self._executors = {}
        self._lock = threading.Lock()
        self._estimate_s = None

    def estimated_s(self) -> float:
        """The cost model's latency of one run of this Program on its target (an estimate; computed once)."""
        if self._estimate_s is None:
            from nkihub.simulator.report import estimate
            self._estimate_s = estimate(self.program, self.target).latency_s
        return self._estimate_s

    @property
    def executor(self):
        """The engine running this Program (``NKIHUB_SIM_ENGINE``: the fast replay engine or the reference
        executor), made on first use."""
        engine = sim_config.engine()
        with self._lock:
            if engine not in self._executors:
                # checked: _trace ran the dataflow checks, so pooled buffers need no NaN refill, unless
                # they let a partly written tile through (simulator.taint): its unwritten part must read NaN
                checked = not self.program.meta.get("reads_unwritten", False)
                self._executors[engine] = executor_for(self.program, self.target, checked=checked)
            return self._executors[engine]


def _flat(bound: inspect.BoundArguments):
    """(name, value) of every argument in signature order, ``*args``/``**kwargs`` spread out (the items of
    ``*xs`` are named ``xs_0``, ``xs_1`` ...): the order kernel inputs are numbered in."""
    params = bound.signature.parameters
    for name, value in bound.arguments.items():
        kind = params[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            yield from ((f"{name}_{i}", v) for i, v in enumerate(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            yield from value.items()
        else:
            yield name, value


def _signature_key(bound: inspect.BoundArguments):
    parts = []
    for name, value in _flat(bound):
        if is_array(value):
            arr = to_numpy(value)
            parts.append((name, "T", tuple(arr.shape), dtype_name(arr.dtype)))
        else:
            try:
                hash(value)
                parts.append((name, "C", value))
            except TypeError:
                parts.append((name, "C", repr(value)))
    return tuple(parts)


def _data_digest(bound: inspect.BoundArguments) -> str:
    """A digest of the tensor arguments' contents (data-dependent kernels trace once per data)."""
    h = hashlib.sha256()
    for name, value in _flat(bound):
        if is_array(value):
            arr = np.ascontiguousarray(to_numpy(value))
            h.update(f"{name}:{arr.dtype.str}:{arr.shape}".encode())
            h.update(arr.view(np.uint8).reshape(-1).data)
    return h.hexdigest()


class ByData:
    """The cache entry of a signature whose kernel reads registers in Python control flow: compiled
    kernels by input-data digest, the most recent few kept."""

    KEEP = 8

    def __init__(self):
        self._by: dict = {}

    def get(self, digest: str):
        entry = self._by.pop(digest, None)
        if entry is not None:
            self._by[digest] = entry   # most recently used last
        return entry

    def put(self, digest: str, entry):
        self._by[digest] = entry
        while len(self._by) > self.KEEP:
            self._by.pop(next(iter(self._by)))
        return entry


def launch_grid(grid, fn) -> tuple[int, ...]:
    """``kernel[gx, gy]``'s grid as a tuple of positive ints; a grid with no programs is an error at the
    launch line (AWS NKI launches ``prod(grid)`` programs: zero would silently run nothing)."""
    dims = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    out = []
    for g in dims:
        try:
            n = operator.index(g)
        except TypeError:
            raise KernelRuleError("launch-grid", f"launch grid dims are integers; got {g!r} in "
                                  f"{fn.__name__}[{', '.join(map(repr, dims))}]", loc=tracing.caller_loc()) from None
        if n < 1:
            raise KernelRuleError("launch-grid", f"{fn.__name__}[{', '.join(map(str, dims))}] launches no "
                                  "program: every launch grid dim must be at least 1", loc=tracing.caller_loc())
        out.append(n)
    if not out:
        raise KernelRuleError("launch-grid", f"{fn.__name__}[()] has an empty launch grid",
                              loc=tracing.caller_loc())
    return tuple(out)


class JitKernel:
    """A kernel decorated with ``@nki.jit``. Calling it runs it on the simulator (tracing once per
    signature); ``kernel[gx, gy](...)`` launches an SPMD grid."""

    # A kernel named test_* (AWS's examples have one) is not a pytest test: AWS's kernel objects are
    # not functions either, so pytest passes them by.
    __test__ = False

    def __init__(self, fn, grid: tuple = (), cache: dict | None = None, **options):
        self.fn = fn
        self.grid = tuple(grid)
        self.options = options
        self._cache = {} if cache is None else cache
        self._sig = inspect.signature(fn)
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid) -> "JitKernel":
        return type(self)(self.fn, launch_grid(grid, self.fn), self._cache, **self.options)

    def __repr__(self) -> str:
        return f"<nki.jit kernel {self.fn.__qualname__}{'[' + ', '.join(map(str, self.grid)) + ']' if self.grid else ''}>"

    # -- tracing ---------------------------------------------------------------------------------------
    def _bind(self, args, kwargs) -> inspect.BoundArguments:
        bound = self._sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound

    def specialize(self, *args, target=None, **kwargs) -> CompiledKernel:
        """The compiled kernel for these arguments (traced, checked and allocated on first use)."""
        # A kernel declaring its target (@nki.jit(platform_target="trn3")) runs for it unless told otherwise.
        tgt = get_target(target or self.options.get("platform_target"))
        bound = self._bind(args, kwargs)
        key = (tgt.name, self.grid, _signature_key(bound))
        entry = self._cache.get(key)
        if entry is None:
            with self._lock:
                entry = self._cache.get(key)
                if entry is None:
                    try:
                        entry = CompiledKernel(self._trace(bound, tgt), tgt)
                    except NeedsRuntime:
                        entry = ByData()   # its control flow reads registers: one Program per data
                    self._cache[key] = entry
        if isinstance(entry, ByData):
            digest = _data_digest(bound)
            with self._lock:
                compiled = entry.get(digest)
                if compiled is None:
                    compiled = entry.put(digest, CompiledKernel(self._trace(bound, tgt, with_data=True), tgt))
            return compiled
        return entry

    def trace(self, *args, target=None, **kwargs) -> Program:
        """The checked, allocated Program of this kernel for these arguments."""
        try:
            return self.specialize(*args, target=target, **kwargs).program
        except NkiError as exc:
            raise exc.with_traceback(None) from None

    def _def_loc(self) -> SourceLoc:
        code = self.fn.__code__
        return SourceLoc(code.co_filename, code.co_firstlineno, 0, None,
                         linecache.getline(code.co_filename, code.co_firstlineno).rstrip("\n"))

    def _trace(self, bound: inspect.BoundArguments, target, ranks: list | None = None,
               with_data: bool = False) -> Program:
        """Trace every program instance of the launch grid; with ``ranks`` (one bound argument set per
        rank, nki.multicore.run_ranks) every rank's instances, each rank with its own inputs and outputs.
        ``with_data``: run the instructions on the call's inputs while tracing, so control flow on
        registers takes the path of this data (nki.runtime); the Program is marked data-dependent."""
        from nkihub.nki import multicore, placement
        b = tracing.Builder(self.fn.__name__, target)
        b.grid = self.grid
        b.n_ranks = len(ranks) if ranks else 1
        data = {}
        if with_data:
            if ranks:
                raise KernelRuleError("dynamic-control-flow", "registers in Python control flow are not "
                                      "supported in multi-rank launches", loc=self._def_loc())
            b.runtime = Eager(b.program, target, data)
        with b.active():
            def arg(name, value):
                if not is_array(value):
                    return value
                arr = to_numpy(value)
                spec = b.new_tensor(arr.shape, dtype_name(arr.dtype), "hbm", kind="input",
                                    name=f"{name}_r{b.rank}" if ranks else name, loc=self._def_loc())
                b.program.inputs.append(spec.name)
                data[spec.name] = arr
                return NkiTensor(spec)

            for b.rank, bound in enumerate(ranks or [bound]):
                # Rebuild the call from the bound arguments (tensors replaced by handles), keeping *args
                # and keyword-only parameters where they belong.
                args, kwargs, P = [], {}, inspect.Parameter
                for name, value in bound.arguments.items():
                    kind = self._sig.parameters[name].kind
                    if kind is P.VAR_POSITIONAL:
                        args += [arg(f"{name}_{i}", v) for i, v in enumerate(value)]
                    elif kind is P.VAR_KEYWORD:
                        kwargs.update({k: arg(k, v) for k, v in value.items()})
                    elif kind is P.KEYWORD_ONLY:
                        kwargs[name] = arg(name, value)
                    else:
                        args.append(arg(name, value))
                ids = list(itertools.product(*(range(g) for g in self.grid))) if self.grid else [()]
                ret, b.shared_outputs = None, []   # every rank has its own HBM outputs
                for pid in ids:
                    b.begin_instance(pid)
                    ret = self.fn(*args, **kwargs)
                self._set_outputs(b.program, ret)
        if b.syncs:
            multicore.merge(b)   # before finish(): synchronisation points are instruction indices
        b.finish()
        placement.check(b)   # direct allocation: block lifetimes over the final instruction order
        if ranks:
            b.program.meta["ranks"] = len(ranks)
        if with_data:
            b.program.meta["data_dependent"] = True
        validate(b.program, target, rules=False)
        if b.syncs:
            allocate(b.program, target)   # synchronisation points fix the order across instances
        else:   # tiles that do not fit in program order: retry in the order a scheduler would pick
            allocate_in_demand_order(b.program, target, allocate)
        return b.program

    def _set_outputs(self, program: Program, ret) -> None:
        outputs.set_outputs(program, ret, self.fn)

    # -- running ----------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if tracing.current() is not None:
            return self.fn(*args, **kwargs)  # a kernel called from a kernel is inlined
        return self.run(*args, **kwargs)

    def run(self, *args, target=None, **kwargs):
        """Run on the simulator; returns numpy arrays, or CPU torch tensors when any input is one.
        Inside ``nki.estimating(...)`` the launch is costed on the cost model instead (see nki.estimate)."""
        from nkihub.nki import estimate
        if estimate.active() is not None:
            return estimate.record(self, args, kwargs, any(is_torch(a) for a in args))
        try:
            compiled = self.specialize(*args, target=target, **kwargs)
            bound = self._bind(args, kwargs)
            callers = {name: v for name, v in _flat(bound) if is_array(v)}
            start = time.perf_counter()
            outs = compiled.executor.run([to_numpy(a) for a in callers.values()])
            simulated_s = time.perf_counter() - start
        except NkiError as exc:
            raise exc.with_traceback(None) from None
        result = outputs.deliver(compiled.program, outs, callers, any(is_torch(a) for a in callers.values()))
        device = outputs.caller_device(callers.values())
        if calllog.enabled():
            calllog.log().record(calllog.KernelCall(
                self.fn.__name__, tuple(tuple(to_numpy(a).shape) for a in callers.values()),
                tuple(dtype_name(to_numpy(a).dtype) for a in callers.values()), device,
                compiled.target.name, compiled.estimated_s(), simulated_s))
        return outputs.to_device(result, device)


def jit(fn=None, **kwargs):
    """Decorator: make ``fn`` an NKI kernel (``@nki.jit`` or ``@nki.jit(...)``)."""
    if fn is None:
        return lambda f: JitKernel(f, **kwargs)
    return fn if isinstance(fn, JitKernel) else JitKernel(fn, **kwargs)


def simulate(kernel):
    """``nki.simulate(kernel)(*args)``: run a kernel on the simulator with numpy arrays or torch tensors."""
    k = kernel if isinstance(kernel, JitKernel) else JitKernel(kernel)
    return k.run
