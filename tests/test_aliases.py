"""nkihub.aliases: the top-level ``nki`` and ``neuronxcc.nki`` are nkihub's modules themselves (one object per
module) where AWS's packages are absent, and AWS's own win by path order where they are present."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, *, cwd: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(cwd), timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def test_nki_is_nkihub_nki_one_module_object_per_module():
    import nki
    import nki.isa as nisa
    import nki.language as nl

    import nkihub.nki
    import nkihub.nki.isa
    import nkihub.nki.language

    assert nki is nkihub.nki and nl is nkihub.nki.language and nisa is nkihub.nki.isa
    assert nki.__spec__.name == "nkihub.nki" and nl.__name__ == "nkihub.nki.language"
    from nki.language import shared_hbm

    assert shared_hbm is nkihub.nki.language.shared_hbm


def test_the_stand_ins_sit_after_site_packages(tmp_path):
    purelib = sysconfig.get_paths()["purelib"]
    where, stand_ins, site = _run(
        "import sys, nkihub.aliases as a, sysconfig; p = [x.rstrip('/') for x in sys.path]; "
        "s = next(i for i, x in enumerate(p) if x.endswith('_toplevel')); "
        f"print(a.resolve('nki'), s, p.index({purelib.rstrip('/')!r}))", cwd=tmp_path)
    assert where == "nkihub" and int(stand_ins) > int(site)


def test_an_installed_nki_wins_and_nkihub_keeps_working(tmp_path):
    theirs = tmp_path / "site" / "nki"
    (theirs / "language").mkdir(parents=True)
    (theirs / "__init__.py").write_text("THEIRS = True\n")
    (theirs / "language" / "__init__.py").write_text("THEIRS_LANGUAGE = True\n")
    site = str(tmp_path / "site")
    code = (f"import sys; sys.path.insert(sys.path.index({sysconfig.get_paths()['purelib']!r}), {site!r}); "
            "import nki, nki.language as nl, nkihub.nki, nkihub.nki.language as ours, nkihub.aliases as a; "
            "print(nki.THEIRS, nl.THEIRS_LANGUAGE, nki is not nkihub.nki, hasattr(ours, 'shared_hbm'), "
            "a.resolve('nki'))")
    assert _run(code, cwd=tmp_path) == ["True", "True", "True", "True", "other"]


def test_a_missing_submodule_is_a_plain_import_error(tmp_path):
    code = ("import importlib, nki\n"
            "try:\n    importlib.import_module('nki.no_such_module')\n"
            "except ModuleNotFoundError as e:\n    print(type(e).__name__)\n")
    assert _run(code, cwd=tmp_path) == ["ModuleNotFoundError"]
