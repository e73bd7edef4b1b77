"""The API coverage table: every public name of AWS NKI in both dialects (the inventory
``nki_api.md`` beside this module, compiled from the public AWS documentation) against this package.

``python -m nkihub.nki.compat.coverage > docs/api_coverage.md`` regenerates ``docs/api_coverage.md``; a test
checks the committed table is current and that implemented functions accept the documented parameter
names (so keyword calls work).
"""
from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

INVENTORY = Path(__file__).with_name("nki_api.md")

# Inventory module -> the module of this package that implements it (None: no such module here).
MODULES = {
    "nki": "nki", "nki.language": "nki.language", "nki.isa": "nki.isa", "nki.collectives": "nki.collectives",
    "nki.typing": "nki.typing", "nki.compiler.kernel_builder": "nki.compiler.kernel_builder",
    "neuronxcc.nki": "nkihub.nki.compat", "neuronxcc.nki.language": "nkihub.nki.compat.language",
    "neuronxcc.nki.isa": "nkihub.nki.compat.isa", "neuronxcc.nki.compiler": "nkihub.nki.compat.compiler",
    "neuronxcc.nki.compiler.sbuf": "nkihub.nki.compat.compiler:sbuf", "neuronxcc.nki.compiler.psum":
        "nkihub.nki.compat.compiler:psum", "neuronxcc.nki.typing": "nkihub.nki.compat.typing",
}

# Documented names with no simulation (key: module.name or a whole module; value: why). None today.
GAPS: dict[str, str] = {}
# Names that exist here and raise NotSimulatedError at the kernel line (nki.compat.extra.not_simulated).
NOT_SIMULATED = {
    "neuronxcc.nki.isa.builtin_custom_op": "runs a custom GpSimd microcode library, which has no numpy model",
}
# Names implemented with a documented difference.
_DYN = ("unrolled for the trip count the call's data gives: a kernel whose Python reads a register is traced "
        "with its inputs, once per distinct data (nki.runtime)")
NOTES = {
    "nki.language.dynamic_range": _DYN, "nki.language.fori_loop": _DYN, "nki.language.while_loop": _DYN,
    "nki.isa.VirtualRegister": "a one-element int32 tile; bool()/int() read its run-time value (" + _DYN + ")",
    "nki.language.dropout": "kept values are not rescaled; random stream is numpy's, not XORWOW",
    "nki.isa.topk": "result order not fixed by the API pages: ascending values (descending with sorted=True), "
        "equal values lowest slot first; slots of the last written position past result k-1 get NaN / 0xFFFFFFFF",
    "nki.language.rand": "uniform [0, 1) from numpy's generator (seeded per run), not XORWOW",
    "neuronxcc.nki.benchmark": "latency is the cost model's estimate (all percentiles equal)",
    "neuronxcc.nki.profile": "records the cost model's estimate; writes no NEFF/NTFF files",
    "neuronxcc.nki.language.nc": "grids over NeuronCores run one program at a time",
    "nki.language.divide": "supported (the docs list it as unsupported)",
    "nki.language.tfloat32": "stored as float32; tf32 matmul rounding not modelled",
    "nki.isa.local_gather": "follows AWS's numpy reference (indices are element offsets along the free axis, "
        "shared by a core's 16 partitions); out-of-bounds indices raise",
    "nki.isa.dma_compute": "a gathering source (vector_offset) is staged through HBM by a dma_copy_indirect; "
        "an indirect destination (scatter read-modify-write, unique_indices) is refused",
    "nki.isa.exponential": "trn3 only; accumulator state lives in reduce_res (reduce_res with idle is rejected)",
    "nki.isa.activate2": "trn3 only; accumulator state lives in reduce_res (reduce_res with idle is rejected)",
    "nki.isa.quantize_mx": "trn3 only; block scale 2^(floor(log2 amax) - emax) as in OCP MX v1.0 and the "
        "nki-library goldens (the 2.32 API page describes a scale twice as large)",
    "nki.isa.nc_matmul_mx": "trn3 only; tile_position/tile_size accepted, the whole array is costed",
    "nki.isa.rand2": "trn3 only; numpy's generator, not XORWOW",
    "nki.isa.tensor_scalar_cumulative": "the Vector Engine's accumulator registers are a [128, 1] fp32 SBUF "
        "tensor of the Program, so reduce_cmd=reduce continues where the previous instruction left them",
    "nki.compiler.kernel_builder.compile_kernel": "the guide names it without a signature: (kernel, *args, "
        "target=...) -> the compiled Program, as nki.compile",
    "nki.typing.tensor": "an annotation (nt.tensor[shape]); no runtime effect",
    "nki.isa.rand_get_state": "the state is seed words of numpy's generator (reading it reseeds), not XORWOW's",
    "nki.isa.rand_set_state": "loads state words written by rand_get_state",
    "nki.isa.NkiInstruction": "depends_on is recorded; program order and data dependencies already order",
    "nki.isa.get_nc_sub_version": "1 on trn3 (the stepping with the Vector Engine's exponential), else 0",
    "nki.language.average": "an operator constant; no instruction takes it yet",
    "nki.isa.core_barrier": "between the program instances of a launch (e.g. kernel[nl.nc(2)]); trn2+, cores (0, 1), "
                            "data in HBM",
    "nki.isa.sendrecv": "between the 2 program instances of a launch (e.g. kernel[nl.nc(2)]), ranks 0 and 1 "
                        "(LNC=2); trn2+, SBUF tiles of one dtype and shape",
    "neuronxcc.nki.language.all_reduce": "across the SPMD program instances along program_axes",
    "neuronxcc.nki.language.gemm_grid": "the index grid of a [128, 512] tile (the stub describes no return value)",
    "neuronxcc.nki.language.gemm_stationary_grid": "the index grid of a [128, 128] tile (the stub describes no "
        "return value)",
    "neuronxcc.nki.compiler.sbuf.alloc": "each logical block at the tile the function names (nki.placement); "
        "overlap, capacity and start-partition errors; automatic tiles go around them",
    "neuronxcc.nki.compiler.psum.alloc": "each logical block in the bank the function names (nki.placement)",
    "neuronxcc.nki.compiler.sbuf.mod_alloc": "the docs' modulo rule; blocks on one tile share its bytes",
    "neuronxcc.nki.compiler.psum.mod_alloc": "the docs' modulo rule over banks; blocks on one bank share it",
}


@dataclass(frozen=True)
class Entry:
    """One documented name: its dialect, module, name, kind, parameter names and notes."""

    dialect: str
    module: str
    name: str
    kind: str
    params: tuple | None   # None for non-functions or unknown parameter lists
    notes: str


def _params(text: str):
    if "?" in text:
        return None
    out = []
    for p in (x.strip() for x in text.split(",")):
        if not p or p.startswith("*"):
            continue
        out.append(p.rstrip("=").strip())
    return tuple(out)


def inventory(path: Path = INVENTORY) -> list[Entry]:
    """Every name of the inventory, in its order."""
    entries, dialect, module = [], "", ""
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            dialect = "current" if "Current" in line else "old" if "Old" in line else ""
        m = re.match(r"### `([\w.]+)`", line)
        if m:
            module = m.group(1)
            continue
        if not dialect or not module or not line.startswith("| ") or line.startswith(("| function", "| name")):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        fm = re.match(r"([\w]+)\((.*)\)$", cells[0])
        if fm:
            kind = "decorator" if "decorator" in (cells[1] if len(cells) > 1 else "") else "function"
            entries.append(Entry(dialect, module, fm.group(1), kind, _params(fm.group(2)),
                                 cells[1] if len(cells) > 1 else ""))
        elif re.match(r"\w+$", cells[0]) and len(cells) >= 2:
            entries.append(Entry(dialect, module, cells[0], cells[1], None, cells[2] if len(cells) > 2 else ""))
    return entries


def resolve(entry: Entry):
    """The object implementing ``entry`` here, or None."""
    target = MODULES.get(entry.module)
    if target is None:
        return None
    mod_name, _, attr = target.partition(":")
    obj = importlib.import_module(mod_name)
    if attr:
        obj = getattr(obj, attr)
    return getattr(obj, entry.name, None)


def missing_params(entry: Entry, obj) -> list[str]:
    """Documented parameter names ``obj`` does not accept (empty when it takes ``**kwargs``)."""
    if entry.params is None or not callable(obj):
        return []
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return []
    return [p for p in entry.params if p not in sig.parameters]


def rows():
    """(entry, status, why) for every inventory name."""
    for e in inventory():
        key = f"{e.module}.{e.name}"
        gap = GAPS.get(key) or GAPS.get(e.module)
        obj = None if MODULES.get(e.module) is None else resolve(e)
        if obj is not None and key in NOT_SIMULATED:
            yield e, "not simulated", NOT_SIMULATED[key]
        elif obj is None or (gap and key in GAPS):
            yield e, "gap", gap or "not implemented"
        else:
            bad = missing_params(e, obj)
            yield e, "implemented", ("missing parameters: " + ", ".join(bad)) if bad else NOTES.get(key, "")


def how(entry: Entry, status: str) -> tuple[str, str]:
    """(how the name is simulated, how it is costed) for a row of the table."""
    from nkihub.nki.compat import coverage_how
    if status == "gap":
        return coverage_how.GAP
    if status == "not simulated":
        return coverage_how.NOT_SIMULATED
    return coverage_how.how(entry, resolve(entry))


def render() -> str:
    """The Markdown table (docs/api_coverage.md)."""
    out = ["# NKI API coverage", "",
           "Generated by `python -m nkihub.nki.compat.coverage > docs/api_coverage.md` from the code and the inventory "
           "`nkihub/nki/compat/nki_api.md` (names and parameter names from the public AWS NKI documentation). "
           "Do not edit by hand.", "",
           "*Simulated as* lists the instructions of the instruction table (`nkihub/simulator/isa/`) a name can emit, "
           "found from its code; *costed as* gives those instructions' engine cost rules "
           "(`nkihub/simulator/cost_rules.py`; every figure is an estimate). Names that emit nothing run at trace "
           "time. *Not simulated* names exist and raise `NotSimulatedError` at the kernel line.", ""]
    all_rows = list(rows())
    for dialect, title in (("current", "Current dialect (`import nki`)"),
                           ("old", "Old dialect (`import neuronxcc.nki`, a translation layer)")):
        sel = [r for r in all_rows if r[0].dialect == dialect]
        done = sum(1 for _, s, _ in sel if s == "implemented")
        unsim = sum(1 for _, s, _ in sel if s == "not simulated")
        out += [f"## {title}", "", f"{done + unsim} of {len(sel)} names present "
                f"({100 * (done + unsim) // len(sel)}%): {done} simulated, {unsim} present but not simulated.", ""]
        module = None
        for e, status, why in sel:
            if e.module != module:
                module = e.module
                out += ["", f"### `{module}`", "", "| name | kind | status | simulated as | costed as | notes |",
                        "|---|---|---|---|---|---|"]
            sim, cost = how(e, status)
            out.append(f"| `{e.name}` | {e.kind} | {status} | {sim} | {cost} | {why} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
