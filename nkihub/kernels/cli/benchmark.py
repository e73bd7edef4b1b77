"""``nkihub benchmark REPO|PATH``: run the ``benchmark.py`` shipped in a kernel package, if any."""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("benchmark", help="run the benchmarks shipped with a kernel (benchmark.py)")
    p.add_argument("target", help="repo id (neuron/NAME) or a local kernel source package directory")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--version", default=None)
    g.add_argument("--revision", default=None)
    p.add_argument("--endpoint", default=None)
    p.add_argument("--trust-remote-code", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from nkihub.hub_client.signing import digest_set

    from ..loading import _module_name, get, import_variant
    from ..verify import read_files

    local = Path(args.target)
    if local.is_dir():
        files = read_files(local.resolve())  # imported from these bytes: a new content is a new module
        content = hashlib.sha256(json.dumps(digest_set(files), sort_keys=True).encode()).hexdigest()[:12]
        module = import_variant(local.resolve(), _module_name("bench", local.resolve().name, content), files)
    else:
        module = get(args.target, version=args.version, revision=args.revision, endpoint=args.endpoint,
                     trust_remote_code=args.trust_remote_code)
    pkg_dir = Path(module.__file__).parent
    if not (pkg_dir / "benchmark.py").is_file():
        print(f"{args.target}: this kernel ships no benchmark.py; nothing to run")
        return 0
    bench = importlib.import_module(f"{module.__name__}.benchmark")
    if not callable(getattr(bench, "main", None)):
        print(f"{args.target}: benchmark.py has no main(); it ran on import")
        return 0
    result = bench.main()
    return int(result) if isinstance(result, int) else 0
