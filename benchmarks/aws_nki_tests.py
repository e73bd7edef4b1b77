"""Run AWS's own NKI tests (aws-neuron/aws-neuron-sdk, folder ``nki/test/``) unmodified against nkihub and
count how many pass.

Those files are the examples of every NKI API page, each checked against a numpy golden, written in the
``neuronxcc.nki`` dialect with ``@nki.jit(mode="simulation")``; with nkihub installed (and no neuronx-cc),
``import neuronxcc.nki`` is nkihub's. AWS's code is never committed here: fetch a snapshot, then

    .venv/bin/python benchmarks/aws_nki_tests.py                       # finds /work/.mirror/aws-neuron+aws-neuron-sdk
    .venv/bin/python benchmarks/aws_nki_tests.py /path/to/aws-neuron-sdk/.git    # a git dir (HEAD is used)
    .venv/bin/python benchmarks/aws_nki_tests.py /path/to/aws-neuron-sdk         # or a checkout
    .venv/bin/python benchmarks/aws_nki_tests.py -k dma_copy -v                  # a subset, with tracebacks

The folder is copied to a temporary directory and run there by pytest with this interpreter. The count M
is the number of tests in the files (methods ``test*`` of their ``unittest.TestCase`` classes and
undecorated module-level ``test_*`` functions, which is what unittest and pytest collect with AWS's own
toolchain); a file that fails to import fails all of its tests. The report ends with
"N of M AWS NKI tests pass" and the failures grouped by cause.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

FOLDER = "nki/test"
MIRROR = "aws-neuron+aws-neuron-sdk"


def find_snapshot(given: str | None) -> Path:
    """The snapshot to use: ``given`` (a git dir or a checkout), else the fetched mirror under
    ``$NKIHUB_SNAPSHOTS`` or /work/.mirror."""
    if given:
        return Path(given)
    for root in (os.environ.get("NKIHUB_SNAPSHOTS"), "/work/.mirror"):
        if root and (Path(root) / MIRROR / "repo").exists():
            return Path(root) / MIRROR / "repo"
    raise SystemExit(f"no snapshot of aws-neuron/aws-neuron-sdk found under /work/.mirror/{MIRROR}; "
                     "pass its git dir or a checkout")


def copy_tests(snapshot: Path, dest: Path) -> Path:
    """Copy ``nki/test`` of ``snapshot`` (a checkout, or a git dir read at HEAD) into ``dest``."""
    if (snapshot / FOLDER).is_dir():
        shutil.copytree(snapshot / FOLDER, dest / "test")
        return dest / "test"
    archive = subprocess.run(["git", f"--git-dir={snapshot}", "archive", "HEAD", FOLDER],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / FOLDER


def _is_testcase(cls: ast.ClassDef) -> bool:
    return any((isinstance(b, ast.Attribute) and b.attr == "TestCase") or (isinstance(b, ast.Name) and
               b.id == "TestCase") for b in cls.bases)


def count_tests(folder: Path) -> dict[str, list[str]]:
    """{file stem: [test ids "Class::method" or "function"]} of every ``test_*.py`` in ``folder``."""
    tests = {}
    for path in sorted(folder.glob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        ids = []
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and _is_testcase(node):
                ids += [f"{node.name}::{f.name}" for f in node.body
                        if isinstance(f, ast.FunctionDef) and f.name.startswith("test")]
            elif isinstance(node, ast.FunctionDef) and node.name.startswith("test") and not node.decorator_list:
                ids.append(node.name)
        tests[path.stem] = ids
    return tests


_PATH = re.compile(r"(/[\w.+-]+)+\.py(:\d+)*")


def _cause(text: str) -> str:
    """A failure's cause as one line: an nki rule error by its rule and message, else the last exception
    line pytest printed, without file names and line numbers."""
    m = re.search(r"error: (.*?) \[rule: ([\w-]+)\]", text)
    if m:
        return f"rule {m.group(2)}: {_PATH.sub('<file>', m.group(1))[:200]}"
    lines = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    excs = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Warning)\b", ln)]
    line = (excs or lines or [text.strip().splitlines()[-1] if text.strip() else "?"])[-1]
    line = _PATH.sub("<file>", line)
    return line[:200]


def run(folder: Path, extra: list[str], verbose: bool) -> dict[str, tuple[str, str]]:
    """Run pytest in ``folder``; returns {"file::Class::method": (outcome, cause)} from its junit report."""
    report = folder / "report.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors",
           f"--junitxml={report}", "-o", "junit_family=xunit1", *extra]
    proc = subprocess.run(cmd, cwd=folder, capture_output=not verbose, text=True)
    if not report.exists():
        raise SystemExit(f"pytest wrote no report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    results = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        cls, name = case.get("classname", ""), case.get("name", "")
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skipped = case.find("skipped")
        if not cls:   # a collection error: the module itself
            results[name.split("/")[-1].removesuffix(".py")] = ("error", _cause((bad.text or "") if bad is not None
                                                                               else ""))
            continue
        parts = cls.split(".")
        key = "::".join([parts[0], *parts[1:], name])
        if bad is not None:
            results[key] = ("failed", _cause((bad.text or "") + "\n" + (bad.get("message") or "")))
        elif skipped is not None:
            results[key] = ("skipped", skipped.get("message") or "")
        else:
            results[key] = ("passed", "")
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot", nargs="?", help="git dir or checkout of aws-neuron/aws-neuron-sdk")
    ap.add_argument("-k", help="pytest -k expression (a subset)")
    ap.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy and print its path")
    args = ap.parse_args(argv)
    snapshot = find_snapshot(args.snapshot)
    tmp = Path(tempfile.mkdtemp(prefix="aws-nki-tests-"))
    try:
        folder = copy_tests(snapshot, tmp)
        tests = count_tests(folder)
        extra = ["-k", args.k] if args.k else []
        results = run(folder, extra + (["--tb=short"] if args.verbose else ["--tb=short", "-q"]), args.verbose)
        passed, failures = 0, defaultdict(list)
        total = 0
        for stem, ids in tests.items():
            for tid in ids:
                key = f"{stem}::{tid}"
                if key in results:
                    outcome, cause = results[key]
                elif stem in results:   # the module did not import
                    outcome, cause = "failed", "module does not import: " + results[stem][1]
                elif args.k:
                    continue   # deselected
                else:
                    outcome, cause = "failed", "not collected"
                total += 1
                if outcome == "passed":
                    passed += 1
                else:
                    failures[cause].append(key)
        for cause, keys in sorted(failures.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            print(f"\n{len(keys)} x {cause}")
            for k in keys:
                print(f"    {k}")
        print(f"\n{passed} of {total} AWS NKI tests pass")
        if args.keep:
            print(f"(copy kept in {folder})")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
