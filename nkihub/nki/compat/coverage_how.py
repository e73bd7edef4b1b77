"""How each name of the coverage table is simulated and costed, found from the code: the instructions a
function can emit (its ``emit("opcode", ...)`` calls and the package functions it reaches, read from the
source) and, per instruction, the engines and cost rule of its row in the instruction table.
"""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap

from nkihub.simulator.isa import OPS

# The engines' cost rules (nkihub/simulator/cost_rules.py, shared/hardware.md), in a few words each.
ENGINE_COST = {
    "tensor": "Tensor max(N, 64) cycles (fp32 x4)",
    "vector": "Vector max(64, N) cycles",
    "scalar": "Scalar max(64, N) cycles",
    "gpsimd": "GpSimd 150 + N cycles",
    "dma": "DMA ~1.9 us + bytes / queue bandwidth",
}
REGISTER_COST = "sequencer register op: 64 cycles, + 60 when it reads or writes memory (an estimate)"
COLLECTIVE_COST = "ring on the DMA queues: (n - 1) x DMA latency + bytes per rank / DMA bandwidth"
KIND_HOW = {
    "dtype": ("numpy dtype (ml_dtypes for bf16/fp8/fp4; packed MX types stored as unsigned ints); engines "
              "compute in fp32 and round to nearest even", "no cost of its own"),
    "buffer": ("memory region of a tensor; SBUF/PSUM tiles get addresses from the allocator",
               "no cost of its own (accesses are costed by the instructions)"),
    "enum": ("trace-time value selecting an instruction's behaviour", "no cost of its own"),
    "constant": ("trace-time value", "no cost of its own"),
    "class": ("trace-time Python object", "no cost of its own"),
}
TRACE_TIME = ("trace time (Python): no instruction", "no cost")
OVERRIDES = {
    "jit": ("traces the kernel into a Program per signature, runs it on the numpy executor",
            "nki.profile / nki.benchmark cost the Program on the cost model"),
    "simulate": ("runs the traced Program on the numpy executor", "not costed (use nki.profile)"),
    "simulate_kernel": ("runs the traced Program on the numpy executor", "not costed (use nki.profile)"),
    "benchmark": ("runs the kernel on the simulator", "latency from the cost model's schedule (an estimate)"),
    "profile": ("runs the kernel on the simulator", "per-engine timeline from the cost model (an estimate)"),
    "baremetal": ("runs the kernel on the simulator", "not costed (use nki.profile)"),
}


def _is_ours(obj) -> bool:
    return inspect.isfunction(obj) and (obj.__module__ or "").startswith(("nki", "neuronxcc"))


def _resolve(node, fn):
    """The object a Name / Attribute chain in ``fn``'s source refers to, or None."""
    if isinstance(node, ast.Name):
        closure = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
        if node.id in closure:
            return closure[node.id]
        return fn.__globals__.get(node.id, getattr(__builtins__, node.id, None) if node.id != "print" else None)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, fn)
        return getattr(base, node.attr, None) if base is not None else None
    return None


@functools.lru_cache(maxsize=None)
def opcodes_of(fn) -> frozenset:
    """Opcodes ``fn`` can emit: literal first arguments of ``emit``/``Sync`` calls in its source and in every
    package function it names."""
    found: set[str] = set()
    seen: set = set()

    def walk(f):
        if not _is_ours(f) or f in seen:
            return
        seen.add(f)
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(f)))
        except (OSError, TypeError, SyntaxError):
            return
        for node in ast.walk(tree):
            # A call whose first argument is an opcode (emit("activation", ...), Sync("all_reduce", ...),
            # a helper passing the opcode on) emits that instruction.
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                    and node.args[0].value in OPS:
                found.add(node.args[0].value)
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(getattr(node, "ctx", None), ast.Load):
                target = _resolve(node, f)
                if isinstance(target, type) and "_assign_into" in vars(target):
                    for member in vars(target).values():   # a value that emits when assigned
                        walk(member)
                elif _is_ours(target):
                    walk(target)

    walk(getattr(fn, "__wrapped__", fn))
    return frozenset(found)


def _cost_of(opcodes) -> str:
    if any(op in _COLLECTIVES for op in opcodes):
        return COLLECTIVE_COST
    if opcodes and all(op.startswith("register_") for op in opcodes):
        return REGISTER_COST
    engines = sorted({e for op in opcodes for e in OPS[op].engines}, key=list(ENGINE_COST).index)
    return "; ".join(ENGINE_COST[e] for e in engines)


_COLLECTIVES = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_gather_v", "all_to_all_v",
                "collective_permute", "collective_permute_implicit", "sendrecv", "core_barrier"}


NOT_SIMULATED = ("exists; raises NotSimulatedError naming the kernel line", "none")
GAP = ("-", "-")


def how(entry, obj) -> tuple[str, str]:
    """(how it is simulated, how it is costed) for an implemented name."""
    if entry.name in OVERRIDES and entry.kind in ("function", "decorator"):
        return OVERRIDES[entry.name]
    if entry.kind not in ("function", "decorator") or not callable(obj) or isinstance(obj, type):
        kind = entry.kind.split()[0] if entry.kind.split() else ""
        return KIND_HOW.get(kind, KIND_HOW["constant"])
    ops = opcodes_of(obj) if inspect.isfunction(obj) else frozenset()
    if not ops:
        return TRACE_TIME
    names = ", ".join(f"`{op}`" for op in sorted(ops))
    return f"instruction{'s' if len(ops) > 1 else ''} {names}", _cost_of(ops)
