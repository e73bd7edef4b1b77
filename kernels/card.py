"""The README kernel card of a published repo, rendered from ``templates/kernel_card.md.j2``."""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


def render_card(spec: dict, repo_id: str, variants: list[dict]) -> str:
    """Render the card for a ``kernel.json`` ``spec``; ``variants`` are ``{name, backend, files}``."""
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
        benchmarks=benchmarks, bench_columns=columns, variants=variants,
    )
