"""What the ``nki`` subcommands share: loading ``FILE.py:NAME``, parsing shapes and dtypes, making inputs."""
from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from pathlib import Path

import numpy as np

from nkihub.nki.jit import JitKernel, jit
from nkihub.simulator.dtypes import as_dtype


def load_object(spec: str):
    """The object ``NAME`` of ``FILE.py:NAME`` (the file is imported as a module)."""
    if ":" not in spec:
        raise ValueError(f"expected FILE.py:NAME, got {spec!r}")
    file, name = spec.rsplit(":", 1)
    path = Path(file)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {file}")
    mod_name = f"_nki_cli_{abs(hash(str(path.resolve())))}"
    module = sys.modules.get(mod_name)
    if module is None:
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        loader_spec.loader.exec_module(module)
    try:
        return getattr(module, name)
    except AttributeError:
        raise ValueError(f"{file} has no {name!r}") from None


def load_kernel(spec: str) -> JitKernel:
    """The kernel of ``FILE.py:KERNEL`` (wrapped with ``nki.jit`` if it is a plain function)."""
    obj = load_object(spec)
    if not callable(obj):
        raise ValueError(f"{spec} is not a function")
    return obj if isinstance(obj, JitKernel) else jit(obj)


def parse_shape(text: str) -> tuple[int, ...]:
    """``128x512`` -> (128, 512)."""
    try:
        shape = tuple(int(s) for s in text.lower().replace(",", "x").split("x") if s)
    except ValueError:
        raise ValueError(f"--shape {text!r}: expected sizes joined by 'x', e.g. 128x512") from None
    if not shape or any(s <= 0 for s in shape):
        raise ValueError(f"--shape {text!r}: expected positive sizes joined by 'x', e.g. 128x512")
    return shape


def add_kernel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernel", metavar="FILE.py:KERNEL", help="the kernel to load")
    p.add_argument("--shape", action="append", default=[], metavar="AxB",
                   help="shape of the next tensor argument (repeat once per tensor argument)")
    p.add_argument("--dtype", action="append", default=[], metavar="DTYPE",
                   help="dtype of the tensor arguments: once for all, or once per --shape (default float32)")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="a non-tensor keyword argument (a Python literal)")
    p.add_argument("--target", default=None, help="trn1, trn2 or trn3 (default: NEURON_PLATFORM_TARGET_OVERRIDE, "
                   "else trn2)")


def make_inputs(args, *, random: bool, seed: int = 0, kernel=None) -> tuple[list, dict]:
    """(positional arrays, keyword constants) from ``--shape``/``--dtype``/``--arg``; with ``kernel``, first
    checks that every parameter without a default gets a shape or an ``--arg`` (``check_arguments``)."""
    shapes = [parse_shape(s) for s in args.shape]
    dtypes = args.dtype or ["float32"]
    if len(dtypes) not in (1, len(shapes)):
        raise ValueError(f"give --dtype once or once per --shape ({len(shapes)}), got {len(dtypes)}")
    if len(dtypes) == 1:
        dtypes = dtypes * len(shapes)
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, name in zip(shapes, dtypes):
        dt = as_dtype(name)
        if random:
            a = rng.standard_normal(shape).astype(np.float32)
            arrays.append(a.astype(dt) if dt.kind == "f" or "float" in dt.name else
                          rng.integers(0, 8, shape).astype(dt))
        else:
            arrays.append(np.zeros(shape, dtype=dt))
    consts = {}
    for item in args.arg:
        if "=" not in item:
            raise ValueError(f"--arg {item!r}: expected NAME=VALUE")
        key, value = item.split("=", 1)
        try:
            consts[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            consts[key] = value
    if kernel is not None:
        check_arguments(kernel, len(shapes), consts)
    return arrays, consts


def check_arguments(kernel, n_shapes: int, consts: dict) -> None:
    """Refuse, naming the parameter, a command line that leaves a parameter of ``kernel`` without a value:
    the ``--shape`` flags fill its parameters in order, ``--arg NAME=VALUE`` the rest by name."""
    import inspect
    fn = getattr(kernel, "fn", kernel)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return
    name = getattr(fn, "__name__", "kernel")
    if n_shapes > len(positional):
        raise ValueError(f"{n_shapes} --shape flags for {name}, which takes {len(positional)} positional "
                         f"parameters ({', '.join(p.name for p in positional) or 'none'})")
    missing = [p.name for p in positional[n_shapes:] if p.default is p.empty and p.name not in consts]
    missing += [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty
                and p.name not in consts]
    if missing:
        order = ", ".join(p.name for p in positional)
        raise ValueError(
            f"{name}: parameter {missing[0]!r} has no value: give one --shape per tensor parameter, in order "
            f"({order}; {n_shapes} given), e.g. --shape 128x512, or a non-tensor one as --arg "
            f"{missing[0]}=VALUE" + (f" (also missing: {', '.join(missing[1:])})" if missing[1:] else ""))
