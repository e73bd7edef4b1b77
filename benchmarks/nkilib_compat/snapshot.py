"""Making a snapshot of aws-neuron/nki-library importable in the harness process (nothing is copied)."""
from __future__ import annotations

import sys
from pathlib import Path


def prepare(snapshot: str) -> None:
    """Put the snapshot's ``src`` on ``sys.path`` (its packages are ``nkilib_src.nkilib``), forget modules
    imported from another snapshot, and install the stand-ins for the references' dependencies that PyPI
    does not have."""
    src = str(Path(snapshot).resolve() / "src")
    for name in [m for m in sys.modules if m == "nkilib_src" or m.startswith("nkilib_src.")]:
        path = getattr(sys.modules[name], "__file__", None) or ""
        if not str(Path(path).resolve()).startswith(src):
            del sys.modules[name]
    if src in sys.path:
        sys.path.remove(src)
    sys.path.insert(0, src)
    from nkilib_compat import standins
    standins.install()
    standins.install_test_enums()
    standins.expose_test_utils(snapshot)
