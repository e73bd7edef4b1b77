"""The README kernel card of a published repo, rendered from ``templates/kernel_card.md.j2``."""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


def tuned_rows(package_dir) -> list[dict]:
    """Rows of the card's tuned-config table from the package's ``tuned.json`` (none without one)."""
    import json

    from .tuned import FILE

    path = Path(package_dir) / FILE
    if not path.is_file():
        return []
    rows = []
    for name, entries in json.loads(path.read_text()).get("kernels", {}).items():
        for e in entries:
            speed = f"{e['default_us'] / e['estimate_us']:.2f}x" if e.get("default_us") else ""
            rows.append({"kernel": name, "target": e["target"],
                         "shapes": ", ".join("x".join(map(str, s)) + f" {d}" for s, d in e["tensors"]),
                         "config": ", ".join(f"{k}={v!r}" for k, v in e["config"].items()),
                         "estimate_us": e["estimate_us"], "default_us": e.get("default_us") or "", "speedup": speed})
    return rows


def render_card(spec: dict, repo_id: str, variants: list[dict], tuned: list[dict] | None = None) -> str:
    """Render the card for a ``kernel.json`` ``spec``; ``variants`` are ``{name, backend, files}``;
    ``tuned`` the rows of :func:`tuned_rows`."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=False,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    benchmarks = list(spec.get("benchmarks") or [])
    columns: list[str] = []
    for row in benchmarks:
        for key in row:
            if key not in columns:
                columns.append(key)
    return env.get_template("kernel_card.md.j2").render(
        name=spec["name"], package=spec["package"], version=spec["version"],
        major=int(str(spec["version"]).split(".")[0]), description=spec.get("description", ""),
        license=spec.get("license", "apache-2.0"), repo_id=repo_id, functions=spec.get("functions", []),
        shapes=spec.get("shapes", ""), dtypes=spec.get("dtypes", []), references=spec.get("references", []),
        benchmarks=benchmarks, bench_columns=columns, variants=variants, tuned=tuned or [],
    )
