"""docs/torch.md, "Your own kernel as an op": the two code blocks run as written (the module, then its use)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

DOC = Path(__file__).resolve().parents[2] / "docs" / "torch.md"


def _blocks() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## Your own kernel as an op"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_docs_own_kernel_op_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.setenv("NKI_CACHE_DIR", str(tmp_path / "cache"))
    module, use = _blocks()
    assert "OpLibrary(" in module and "@lib.op(" in module and "launch(" in module
    (tmp_path / "my_axpy.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        exec(compile(use, "torch.md (use)", "exec"), {})
        import my_axpy
        assert my_axpy.lib.namespace.startswith("_my_axpy_0_1_0_")
    finally:
        sys.modules.pop("my_axpy", None)
