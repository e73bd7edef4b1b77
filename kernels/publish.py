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
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hub_client import paths as P
from hub_client.digest import sha256_b64

from . import config
from .card import render_card
from .vendor import VendorError, python_depends, vendor_package

VARIANTS = {"torch-neuron": "neuron", "torch-cpu": "cpu"}
REPO_TYPE = "kernel"
_NAME = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")  # Hugging Face kernels' KernelName rule
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)([-+.a-zA-Z0-9]*)$")


class PublishError(ValueError):
    """The package cannot be published as it is (bad kernel.json, version already taken ...)."""


@dataclass(frozen=True)
class PublishResult:
    repo_id: str
    version: str
    branch: str
    tag: str
    commit: str
    created: bool  # False: the Hub already had exactly this content
    url: str

    def __str__(self) -> str:
        what = "published" if self.created else "unchanged (no new commit)"
        return f"{self.repo_id} {self.tag}: {what}; branch {self.branch} -> {self.commit[:12]}"


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
    if not _VERSION.match(version):
        raise PublishError(f"version {version!r} must look like MAJOR.MINOR.PATCH")
    if not (package_dir / "__init__.py").is_file():
        raise PublishError(f"{package_dir} has no __init__.py")
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
    (out_dir / "README.md").write_text(render_card(spec, repo_id, variants))
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
            token: str | None = None) -> PublishResult:
    """Build and upload ``package_dir`` to ``repo_id`` (default ``neuron/<name>``); see the module doc."""
    from hub_client.client import hf_api, push_folder, remote_files, set_branch

    spec = read_kernel_spec(package_dir)
    repo_id = P.check_repo_id(repo_id or f"neuron/{spec['name']}")
    endpoint, token = config.endpoint(endpoint), config.token(token)
    version = spec["version"]
    major = int(version.split(".")[0])
    branch, tag = f"v{major}", f"v{version}"
    api = hf_api(endpoint, token)
    url = str(api.create_repo(repo_id, repo_type=REPO_TYPE, exist_ok=True))
    with tempfile.TemporaryDirectory(prefix="nkihub-publish-") as tmp:
        build_repo(package_dir, tmp, repo_id)
        refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
        tags = {t.name: t.target_commit for t in refs.tags}
        branches = {b.name: b.target_commit for b in refs.branches}
        majors = [int(b[1:]) for b in branches if re.fullmatch(r"v\d+", b)]
        if tag in tags:
            from hub_client.client import local_files
            from hub_client.digest import file_digests

            published = {p: o for p, o in remote_files(api, repo_id, tags[tag], REPO_TYPE).items() if p != ".gitattributes"}
            staged = {rel: file_digests(p)[1] for rel, p in local_files(tmp).items()}
            if published != staged:
                raise PublishError(f"{repo_id} already has {tag} with different content; bump the version in kernel.json")
        target = "main" if major >= max(majors, default=major) else branch
        if target == branch and branch not in branches:
            api.create_branch(repo_id, branch=branch, revision="main", repo_type=REPO_TYPE)
        pushed = push_folder(tmp, repo_id, branch=target, message=f"Publish {spec['name']} {version}",
                             repo_type=REPO_TYPE, endpoint=endpoint, token=token)
    if target == "main":
        set_branch(repo_id, branch, pushed.commit, repo_type=REPO_TYPE, endpoint=endpoint, token=token)
    if tag not in tags:
        api.create_tag(repo_id, tag=tag, revision=pushed.commit, repo_type=REPO_TYPE, exist_ok=True)
    return PublishResult(repo_id, version, branch, tag, pushed.commit, pushed.created, url)
