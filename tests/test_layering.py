"""The import direction between packages, by an AST scan of every source file: simulator imports nothing
above it; nki never imports kernels or hub_client; hub_client imports none of nki, kernels, simulator."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "simulator": {"nki", "kernels", "hub_client", "neuronxcc"},
    "nki": {"kernels", "hub_client"},
    "hub_client": {"nki", "kernels", "simulator", "neuronxcc"},
}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(top-level package, line) of every absolute import in a file, at any depth (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {(alias.name.split(".")[0], node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_direction(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    bad = [f"{f.relative_to(ROOT)}:{line} imports {mod}" for f in files for mod, line in imported_packages(f)
           if mod in FORBIDDEN[package]]
    assert not bad, "\n".join(bad)


def test_the_scan_sees_lazy_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    import kernels.x\n    from hub_client import y\n")
    assert imported_packages(f) == {("kernels", 2), ("hub_client", 3)}
