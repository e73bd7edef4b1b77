"""A repo's README as a page shows it: Markdown rendered by markdown-it-py, the HTML sanitised by nh3.

Raw HTML in a README is allowed through the Markdown renderer, as on the Hugging Face Hub, and then
sanitised (ammonia's allow-list: no script, no event handler, no ``javascript:`` URL, no style); pages
also send a Content-Security-Policy without scripts, so a sanitiser bug alone cannot run code. Relative
links and images point into the repo at the revision shown. The YAML front matter becomes data (license,
tags), and the card's "Benchmarks" table is read back from the Markdown for the page's plot.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|\Z)", re.S)
_NUMBER = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
CELL = re.compile(rf"^\s*{_NUMBER}\s*(?:\(\s*{_NUMBER}\s*[-\u2013]\s*{_NUMBER}\s*\))?\s*$")
SERIES_HEADER = re.compile(r"latency|\(us\)|_us\b|\(ms\)|_ms\b", re.I)
PALETTE = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#be123c")


@dataclass(frozen=True)
class Card:
    html: str  # sanitised; safe to mark up
    meta: dict  # front matter (only str, list of str values kept)
    title: str
    description: str  # first paragraph, plain text
    bench_columns: tuple = ()
    bench_rows: tuple = ()  # tuples of cell text
    plot: dict | None = None  # see :func:`plot_geometry`
    problems: tuple = field(default=())


def _markdown():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def split_front_matter(text: str) -> tuple[dict, str, str]:
    """``(meta, body, problem)``: the YAML front matter as a dict of strings / lists of strings."""
    m = FRONT_MATTER.match(text)
    if not m:
        return {}, text, ""
    import yaml

    try:
        data = yaml.safe_load(m.group(1))
    except yaml.YAMLError as e:
        return {}, text[m.end():], f"front matter is not YAML: {str(e).splitlines()[0]}"
    meta = {}
    for k, v in (data.items() if isinstance(data, dict) else ()):
        if isinstance(v, (str, int, float, bool)):
            meta[str(k)] = str(v)
        elif isinstance(v, list):
            meta[str(k)] = [str(x) for x in v if isinstance(x, (str, int, float))]
    return meta, text[m.end():], ""


def _rewrite(root: str, repo_url: str, revision: str, base_dir: str):
    """An nh3 attribute filter pointing relative ``src`` (to the file) and ``href`` (to its page) into the repo."""
    rev = quote(revision, safe="")

    def attribute_filter(tag: str, attr: str, value: str):
        if attr not in ("src", "href") or not value or value.startswith(("#", "/")):
            return value
        parts = urlsplit(value)
        if parts.scheme or parts.netloc:
            return value
        path = posixpath.normpath(posixpath.join(base_dir, parts.path)) if parts.path else ""
        if not path or path.startswith("..") or path == ".":
            return None
        kind = "resolve" if attr == "src" else "blob"
        frag = f"#{quote(parts.fragment)}" if parts.fragment else ""
        return f"{root}{repo_url}/{kind}/{rev}/{quote(path, safe='/')}{frag}"

    return attribute_filter


def sanitize(html: str, attribute_filter=None) -> str:
    """Allow-listed HTML only (nh3/ammonia defaults: no script, style, event handlers or unsafe URLs)."""
    import nh3

    return nh3.clean(html, attribute_filter=attribute_filter, link_rel="noopener noreferrer nofollow")


def render(text: str, root: str = "", repo_url: str = "", revision: str = "main", path: str = "README.md") -> Card:
    """Render a README (Markdown with optional front matter) for a page; see the module doc."""
    meta, body, problem = split_front_matter(text)
    md = _markdown()
    tokens = md.parse(body)
    html = sanitize(md.renderer.render(tokens, md.options, {}),
                    _rewrite(root, repo_url, revision, posixpath.dirname(path)) if repo_url else None)
    title, description = _title_and_description(md, tokens)
    columns, rows = benchmark_table(tokens)
    return Card(html, meta, title, description, columns, rows, plot_geometry(columns, rows),
                (problem,) if problem else ())


def _plain(token) -> str:
    return "".join(c.content for c in (token.children or []) if c.type in ("text", "code_inline")).strip()


def _text(md, token) -> str:
    """The text a person reads in an inline token: rendered, sanitised, tags dropped (script bodies too)."""
    import html

    import nh3

    return " ".join(html.unescape(nh3.clean(md.renderer.render([token], md.options, {}), tags=set())).split())


def _title_and_description(md, tokens) -> tuple[str, str]:
    title = description = ""
    for i, t in enumerate(tokens):
        if t.type == "heading_open" and t.tag == "h1" and not title:
            title = _plain(tokens[i + 1])
        elif t.type == "paragraph_open" and not description and i + 1 < len(tokens):
            description = _text(md, tokens[i + 1])
        if description and title:
            break
    return title, description[:300]


def benchmark_table(tokens) -> tuple[tuple, tuple]:
    """Columns and rows (cell text) of the first table under a "Benchmarks" heading, else empty."""
    inside, columns, rows, row = False, [], [], None
    for i, t in enumerate(tokens):
        if t.type == "heading_open":
            if columns:
                break
            inside = _plain(tokens[i + 1]).lower().startswith("benchmark")
        elif not inside:
            continue
        elif t.type == "tr_open":
            row = []
        elif t.type in ("th_open", "td_open") and row is not None:
            row.append(_plain(tokens[i + 1]))
        elif t.type == "tr_close" and row is not None:
            if columns:
                rows.append(tuple(row))
            else:
                columns = row
            row = None
        elif t.type == "table_close" and columns:
            break
    return tuple(columns), tuple(rows)


def _nice(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``x``: round axis ticks."""
    import math

    p = 10.0 ** math.floor(math.log10(x))
    return next(p * m for m in (1, 2, 2.5, 5, 10) if p * m >= x * (1 - 1e-9))


def plot_geometry(columns: tuple, rows: tuple, width: int = 450, bar: int = 16) -> dict | None:
    """Bars (value, and the band ``lo-hi`` drawn as a whisker where a cell gives one) for every column
    that reads as a latency, grouped by row; ``None`` when nothing in the table can be plotted."""
    series = [j for j, c in enumerate(columns) if SERIES_HEADER.search(c)
              and any(j < len(r) and CELL.match(r[j]) for r in rows)
              and all(j >= len(r) or not r[j] or CELL.match(r[j]) for r in rows)]
    if not series or not rows:
        return None
    labels = [j for j in range(len(columns)) if j not in series]
    values = []
    for r in rows:
        cells = []
        for j in series:
            m = CELL.match(r[j]) if j < len(r) else None
            cells.append(tuple(float(x) for x in m.groups() if x is not None) if m else None)
        values.append(cells)
    top = _nice(max(max(c) for cells in values for c in cells if c) or 1.0)
    # each row's label (its other cells: shape, dtype) on a line of its own above its bars, so a long
    # shape description is never clipped; the ticks' labels reach 1.0 * top, the bars' values past it
    left, right, pad, label_h = 6, 56, 8, 16
    span = width - left - right
    groups, y = [], pad
    for r, cells in zip(rows, values):
        label = ", ".join(r[j] for j in labels[:2] if j < len(r) and r[j])
        y0 = y + label_h
        bars = []
        for k, c in enumerate(cells):
            if c is None:
                continue
            v = c[0]
            b = {"y": y0 + k * (bar + 2), "w": max(1.0, span * v / top), "value": f"{v:g}",
                 "color": PALETTE[k % len(PALETTE)], "lo": 0.0, "hi": 0.0, "band": ""}
            if len(c) == 3:
                b.update(lo=left + span * c[1] / top, hi=left + span * c[2] / top, band=f"{c[1]:g}-{c[2]:g}")
            b["text_x"] = max(left + b["w"], b["hi"]) + 6
            bars.append(b)
        groups.append({"label": label[:70], "label_y": y + 12, "bars": bars})
        y = y0 + max(1, len(cells)) * (bar + 2) + pad
    legend = [{"name": columns[j], "color": PALETTE[k % len(PALETTE)], "y": y + 34 + 18 * k}
              for k, j in enumerate(series)]
    ticks = [{"x": left + span * f, "label": f"{top * f:.3g}",
              "anchor": "start" if f == 0 else "end" if f == 1 else "middle"} for f in (0, 0.2, 0.4, 0.6, 0.8, 1.0)]
    return {"width": width, "height": y + 24 + 18 * len(series), "left": left, "span": span, "bar": bar,
            "axis_y": y - pad / 2, "groups": groups, "legend": legend, "ticks": ticks}
