"""The import direction between nkihub's rooms, by an AST scan of every source file: simulator imports
nothing above it; nki never imports kernels, hub_client or device; hub_client imports none of nki, kernels,
simulator, device; device (the emulated neuron torch device) imports neither kernels nor hub_client. And one import root: nkihub's own code names its modules ``nkihub.<room>``; only the library
kernels (published, standalone) import the public ``nki`` API by its top-level name."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "simulator": {"nki", "kernels", "hub_client", "device"},
    "nki": {"kernels", "hub_client", "device"},
    "hub_client": {"nki", "kernels", "simulator", "device"},
    # the emulated device sits beside the language: it runs kernels through nki, never through kernels
    "device": {"kernels", "hub_client"},
}
# Top-level names nkihub's code never imports: its former roots, and (outside the published library
# kernels and the stand-ins) AWS's `nki` / `neuronxcc`, which may be AWS's own where they are installed.
# A top-level `kernels` is Hugging Face's package, a dependency nkihub uses.
OLD_ROOTS = {"simulator", "hub_client"}
AWS_NAMES = {"nki", "neuronxcc"}
# What `nkihub publish` carries into published packages (nkihub.kernels.vendor): the public NKI API only.
PUBLISHED = ("nkihub/kernels/library/", "nkihub/kernels/torch_ops.py", "nkihub/kernels/device.py",
             "nkihub/kernels/tuned.py")


def imported_modules(path: Path) -> set[tuple[str, int]]:
    """(absolute module, line) of every absolute import in a file, at any depth (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {(alias.name, node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module, node.lineno))
    return found


def room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "nkihub" and len(parts) > 1 else None


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_direction(package):
    files = sorted((ROOT / "nkihub" / package).rglob("*.py"))
    assert files, f"no sources under nkihub/{package}/"
    bad = [f"{f.relative_to(ROOT)}:{line} imports {mod}" for f in files for mod, line in imported_modules(f)
           if room(mod) in FORBIDDEN[package]]
    assert not bad, "\n".join(bad)


def test_one_import_root():
    bad = []
    for f in sorted((ROOT / "nkihub").rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        published = rel.startswith(PUBLISHED)
        for mod, line in imported_modules(f):
            top = mod.split(".")[0]
            if top in OLD_ROOTS or (top in AWS_NAMES and not published):
                bad.append(f"{rel}:{line} imports {mod}")
    assert not bad, "\n".join(bad)


def test_the_scan_sees_lazy_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    import nkihub.kernels.x\n    from nkihub.hub_client import y\n")
    assert {room(m) for m, _ in imported_modules(f)} == {"kernels", "hub_client"}
