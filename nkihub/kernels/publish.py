"""Publish a kernel source package to a Hub repo in the Hugging Face kernel layout.

A source package is a directory holding a pure-Python package (``__init__.py`` ...) and a
``kernel.json`` (name, package, version, description, functions, dtypes, shapes, references,
benchmarks). Publishing builds::

    README.md                               kernel card (templates/kernel_card.md.j2)
    build/torch-neuron/<package>/...        the package, standalone (kernels.vendor), for Neuron devices
    build/torch-neuron/metadata.json        id, name, version (major), backend, sha256 of every file
    build/torch-cpu/<package>/...           the same package, run on the simulator
    build/torch-cpu/metadata.json

and pushes it in one commit. Each variant's package stands alone: the nkihub modules it imports are
carried into it and anything else outside the standard library, torch, numpy and the public NKI API
is refused (:mod:`kernels.vendor`). The newest major version is committed on ``main`` and branch ``vN``
is pointed at that commit; an older major is committed on its ``vN`` branch. Tag ``vX.Y.Z`` marks
the commit. Unchanged content makes no commit; the same version with other content is refused.

Everything is checked before the Hub is touched (:mod:`kernels.package_check`: strict versions, file
names, no symlink out of the package, no special file), and the commit, the tag and the branch moves
land together or not at all (:mod:`hub_client.release`). A version older than one already released in
its major is refused (branch ``vN`` only moves forward: clients refuse an older signed build served as
current, :mod:`kernels.accepted`). ``sign=KEY`` adds a publisher signature per variant
(:mod:`kernels.signing`), binding the version, the publish time, the release and, with
``expires="30d"``, an expiry.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nkihub.hub_client import paths as P
from nkihub.hub_client.digest import sha256_b64

from . import config
from .card import render_card, tuned_rows
from .package_check import PublishError, check_version, package_files
from .vendor import VendorError, python_depends, vendor_package

VARIANTS = {"torch-neuron": "neuron", "torch-cpu": "cpu"}
REPO_TYPE = "kernel"
_NAME = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")  # Hugging Face kernels' KernelName rule


@dataclass(frozen=True)
class PublishResult:
    repo_id: str
    version: str
    branch: str
    tag: str
    commit: str
    created: bool  # False: the Hub already had exactly this content
    url: str
    notes: tuple = ()  # what a user of the repo should know (e.g. no layers module), one line each

    def __str__(self) -> str:
        what = "published" if self.created else "unchanged (no new commit)"
        return "\n".join([f"{self.repo_id} {self.tag}: {what}; branch {self.branch} -> {self.commit[:12]}",
                          *(f"note: {n}" for n in self.notes)])


def package_notes(package_dir: str | Path, spec: dict) -> tuple:
    """What a package lacks that its users may expect, as notes (publishing goes on). A package without a
    ``layers`` module loads with ``kernels.get`` / Hugging Face ``get_kernel`` (their repos need none), but
    ``kernelize`` cannot swap a layer for it ("does not define any layers", Hugging Face kernels)."""
    package_dir = Path(package_dir)
    if (package_dir / "layers.py").is_file() or (package_dir / "layers" / "__init__.py").is_file():
        return ()
    return (f"{spec['package']} has no layers module: it loads with kernels.get / get_kernel, but kernelize "
            "cannot use it (add layers.py with nn.Module classes, docs/hub.md)",)


def read_kernel_spec(package_dir: str | Path) -> dict:
    """Read and check ``kernel.json`` of a source package."""
    package_dir = Path(package_dir)
    path = package_dir / "kernel.json"
    if not path.is_file():
        raise PublishError(f"{package_dir} has no kernel.json")
    try:
        spec = json.loads(path.read_text())
    except ValueError as e:
        raise PublishError(f"{path} is not valid JSON: {e}") from e
    for key in ("name", "package", "version"):
        if not spec.get(key):
            raise PublishError(f"{path} lacks {key!r}")
    name, package, version = spec["name"], spec["package"], str(spec["version"])
    if not _NAME.match(name):
        raise PublishError(f"kernel name {name!r} must match {_NAME.pattern}")
    if name.replace("-", "_") != package or not package.isidentifier():
        raise PublishError(f"package {package!r} must be the kernel name with '-' as '_' ({name.replace('-', '_')!r}); "
                           "Hugging Face kernels imports build/<variant>/<name with underscores>/")
    check_version(spec["version"], str(path))
    if not (package_dir / "__init__.py").is_file():
        raise PublishError(f"{package_dir} has no __init__.py")
    package_files(package_dir)  # every file may leave the machine, or nothing is published
    for key in ("functions", "dtypes", "references", "benchmarks"):
        if key in spec and not isinstance(spec[key], list):
            raise PublishError(f"{key!r} in {path} must be a list")
    return spec


def build_repo(package_dir: str | Path, out_dir: str | Path, repo_id: str) -> dict:
    """Write the repo layout for ``package_dir`` into ``out_dir``; return the spec."""
    package_dir, out_dir = Path(package_dir), Path(out_dir)
    spec = read_kernel_spec(package_dir)
    package = spec["package"]
    with tempfile.TemporaryDirectory(prefix="nkihub-vendor-") as staging:
        standalone = Path(staging) / package
        try:
            carried = vendor_package(package_dir, standalone, package)
        except VendorError as e:
            raise PublishError(f"{package_dir} cannot be published as a standalone package: {e}") from e
        variants = []
        for variant, backend in VARIANTS.items():
            vdir = out_dir / "build" / variant
            shutil.copytree(standalone, vdir / package)
            variants.append(_write_metadata(vdir, spec, backend, carried))
    (out_dir / "README.md").write_text(render_card(spec, repo_id, variants, tuned_rows(package_dir)))
    return spec


def _write_metadata(vdir: Path, spec: dict, backend: str, carried) -> dict:
    """Write ``vdir/metadata.json`` (Hugging Face kernels 0.17 format plus an ``nkihub`` section)."""
    package, major = spec["package"], int(spec["version"].split(".")[0])
    digest = {p.relative_to(vdir).as_posix(): sha256_b64(p) for p in sorted(vdir.rglob("*")) if p.is_file()}
    content = hashlib.sha256(json.dumps(digest, sort_keys=True).encode()).hexdigest()
    metadata = {
        "id": f"_{package}_{backend}_{content[:10]}",
        "name": spec["name"],
        "version": major,
        "license": spec.get("license", "apache-2.0"),
        "python-depends": python_depends(carried.requires, backend),
        "backend": {"type": backend},
        "digest": {"algorithm": "sha256", "files": digest},
        "nkihub": {"package-version": spec["version"], "functions": spec.get("functions", []),
                   "requires": sorted(carried.requires | {"torch"}), "vendored": carried.vendored},
    }
    (vdir / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    return {"name": vdir.name, "backend": backend, "files": len(digest)}


def publish(package_dir: str | Path, repo_id: str | None = None, *, endpoint: str | None = None,
            token: str | None = None, sign: str | Path | None = None, expires: str | None = None) -> PublishResult:
    """Build and upload ``package_dir`` to ``repo_id`` (default ``neuron/<name>``); see the module doc.

    ``sign`` is a private key file (``nkihub keygen``): each variant is signed with it; ``expires``
    (``"30d"``, ``"12h"``, an ISO date; needs ``sign``) is when loads of a branch stop taking the build
    as current (:mod:`kernels.freshness`). Raises
    :class:`PublishError` for a package that cannot be published (nothing was sent) or a version older
    than one already released in its major (nothing of this publish is left on the Hub), and
    ``hub_client.PublishConflictError`` when the version exists with other content or another
    publisher won a race (nothing of this publish is left on the Hub).
    """
    from nkihub.hub_client.release import release

    spec = read_kernel_spec(package_dir)
    if expires is not None and sign is None:
        raise PublishError("an expiry is part of the signature: --expires needs --sign KEY")
    repo_id = P.check_repo_id(repo_id or f"neuron/{spec['name']}")
    endpoint, token = config.endpoint(endpoint), config.token(token)
    version = spec["version"]
    major = int(version.split(".")[0])
    branch, tag = f"v{major}", f"v{version}"
    with tempfile.TemporaryDirectory(prefix="nkihub-publish-") as tmp:
        build_repo(package_dir, tmp, repo_id)
        if sign is not None:
            from .signing import sign_build

            sign_build(tmp, repo_id, sign, package_version=version, expires=expires)
        done = release(tmp, repo_id, tag=tag, route=lambda branches: _route(major, branches),
                       message=f"Publish {spec['name']} {version}", repo_type=REPO_TYPE, endpoint=endpoint,
                       token=token, guard=lambda tags, branches: _forward_only(repo_id, version, tags))
    return PublishResult(repo_id, version, branch, tag, done.commit, done.created, done.url,
                         package_notes(package_dir, spec))


def _forward_only(repo_id: str, version: str, tags: dict) -> None:
    """Refuse a version older than the newest one released in its major (``vN`` would move backwards)."""
    from nkihub.hub_client.signing import parse_version

    mine = parse_version(version)
    newer = sorted((v for t in tags if re.fullmatch(r"v\d+\.\d+\.\d+", t)
                    and (v := parse_version(t[1:]))[0] == mine[0] and v > mine), reverse=True)
    if newer:
        newest = ".".join(map(str, newer[0]))
        raise PublishError(f"{repo_id} already released {newest} in major {mine[0]}; {version} would move branch "
                           f"v{mine[0]} back to an older version, which clients that accepted {newest} refuse as a "
                           f"rollback: publish a version after {newest}")


def _route(major: int, branches: dict) -> tuple[str, list[str]]:
    """The newest major is committed on ``main`` and ``vN`` follows; an older one on its ``vN`` only."""
    majors = [int(b[1:]) for b in branches if re.fullmatch(r"v\d+", b)]
    return ("main", [f"v{major}"]) if major >= max(majors, default=major) else (f"v{major}", [])
