"""What may be published: a kernel package's version and every file, checked before the Hub is touched.

Publishing reads a directory a user points at, and everything it reads leaves the machine. So a file
is published only if it is a regular file (or a symlink to one) inside the package; a symlink that
leads out of the package (a secret, a home directory) and a special file (a FIFO would block the read
forever, a device is not content) are refused by name. File names must also pass the Hub's path rules
and carry no invisible or direction-changing characters, which make one name display as another.
Versions are strict ``MAJOR.MINOR.PATCH``: the tag ``vX.Y.Z`` is made from it.
"""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from pathlib import Path

from nkihub.hub_client import InvalidNameError
from nkihub.hub_client import paths as P


class PublishError(ValueError):
    """The package cannot be published as it is (bad kernel.json, version already taken ...)."""


_SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
_BYTECODE = (".pyc", ".pyo")


def check_version(version: str, where: str = "kernel.json") -> str:
    """``MAJOR.MINOR.PATCH``, decimal without leading zeros (``1.0.1..2``, ``01.0.0``, ``1.0`` are refused)."""
    if not isinstance(version, str) or not _SEMVER.fullmatch(version):
        raise PublishError(f"version {version!r} in {where} must be MAJOR.MINOR.PATCH (e.g. 1.2.0: decimal "
                           "numbers without leading zeros, nothing before or after)")
    return version


def check_file_name(rel: str) -> str:
    """A path inside the package that the Hub accepts and that reads as what it is."""
    try:
        P.check_path(rel, kind="file name")
    except InvalidNameError as e:
        raise PublishError(f"cannot publish {rel!r}: {e}") from None
    for ch in rel:
        if unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"):
            raise PublishError(f"cannot publish {rel!r}: the file name holds the invisible or control character "
                               f"U+{ord(ch):04X} ({unicodedata.name(ch, 'unnamed')}); rename the file")
    if any(seg != seg.strip() for seg in rel.split("/")):
        raise PublishError(f"cannot publish {rel!r}: a file name starts or ends with white space")
    return rel


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def package_files(package_dir: str | Path) -> list[tuple[str, Path]]:
    """Every file to publish as ``(path in the package, file)``; raise :class:`PublishError` on the first
    file that may not leave the machine. Bytecode (``__pycache__``, ``.pyc``) is skipped."""
    root = Path(package_dir)
    real_root = root.resolve()
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        here = Path(dirpath)
        for d in list(dirnames):
            if (here / d).is_symlink():
                rel = (here / d).relative_to(root).as_posix()
                target = (here / d).resolve()
                where = "leaves the package" if not _inside(target, real_root) else "is a symlinked directory"
                raise PublishError(f"cannot publish {rel!r}: it {where} (-> {target}); copy the files in instead")
        for name in sorted(filenames):
            if name.endswith(_BYTECODE):
                continue
            path = here / name
            rel = check_file_name(path.relative_to(root).as_posix())
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                try:
                    target = path.resolve(strict=True)
                except (FileNotFoundError, RuntimeError):
                    raise PublishError(f"cannot publish {rel!r}: dangling symlink (-> {os.readlink(path)})") from None
                if not _inside(target, real_root):
                    raise PublishError(f"cannot publish {rel!r}: the symlink leaves the package (-> {target}); "
                                       "its content would be uploaded")
                mode = target.stat().st_mode
            if not stat.S_ISREG(mode):
                kind = "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device or special file"
                raise PublishError(f"cannot publish {rel!r}: it is a {kind}, not a regular file")
            out.append((rel, path))
    return out
