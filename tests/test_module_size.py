"""No source module over 800 lines (DESIGN.md: modules around 200 lines, none over ~800)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nkihub", "benchmarks")
LIMIT = 800


def test_no_module_over_800_lines():
    sizes = {p: len(p.read_text().splitlines()) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    assert len(sizes) > 10
    big = [f"{p.relative_to(ROOT)}: {n} lines" for p, n in sorted(sizes.items()) if n > LIMIT]
    assert not big, "split these modules:\n" + "\n".join(big)
