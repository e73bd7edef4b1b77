"""``import neuronxcc.nki`` resolves to the compatibility layer, and never shadows a real neuronx-cc."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_neuronxcc_imports_resolve_to_compat():
    import neuronxcc.nki as old_nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    from neuronxcc.nki.typing import tensor

    import nkihub.nki.compat as compat
    assert old_nki.jit is compat.jit and old_nki.simulate_kernel is compat.simulate_kernel
    assert nl is compat.language and nisa is compat.isa
    assert tensor[4, 5] is tensor


def test_real_neuronxcc_wins(tmp_path):
    fake = tmp_path / "neuronxcc"
    (fake / "nki").mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    (fake / "nki" / "__init__.py").write_text("REAL_NKI = True\n")
    code = "import neuronxcc.nki as n, neuronxcc; print(getattr(n, 'REAL_NKI', False), neuronxcc.REAL)"
    # The real package sits where an installed distribution would, before nkihub's stand-in directory (which
    # nkihub-aliases.pth appends after site-packages): it wins by ordinary path order.
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); {code}"],
                         capture_output=True, text=True, cwd=str(ROOT), check=True)
    assert out.stdout.split() == ["True", "True"]
