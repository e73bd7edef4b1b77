"""The Hub's HTML pages without a browser: routes beside the API, escaping and sanitising, what a page
says about signatures and digests, private repos. tests/hub_client/test_pages_browser.py looks at
the same pages in Chromium."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import pytest
from huggingface_hub import CommitOperationAdd, HfApi

from nkihub.hub_client.server import card_html, overview, serve_in_background

from . import pages_site
from .test_server import raw

SCRIPT = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        s = pages_site.build(tmp_path_factory.mktemp("pages"), mp)
        yield s
        s.server.stop()


def page(hub, path: str, headers=None) -> tuple[int, dict, str]:
    code, h, body = raw(hub, "GET", path, headers=headers)
    return code, {k.lower(): v for k, v in h.items()}, body.decode("utf-8")


def text_of(html: str) -> str:
    """The page's words, tags dropped (what a reader sees, roughly)."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


# ---- routes --------------------------------------------------------------------------------------
def test_index_lists_every_repo_with_org_version_variants_and_signature(site):
    code, h, html = page(site.server, "/")
    assert code == 200 and h["content-type"].startswith("text/html")
    for rid in ("neuron/vit-attn", "neuron/toy-kernel", "neuron/tampered", "acme/toy-kernel", "acme/plain-toy",
                "acme/tiny-model", "acme/tiny-data"):
        assert f'data-repo="{rid}"' in html
    row = html.split('data-repo="neuron/toy-kernel"')[1].split("</tr>")[0]
    assert "v2.0.0" in row and "torch-cpu" in row and "torch-neuron" in row and "signed, trusted key" in row
    assert "tampered or invalid" in html.split('data-repo="neuron/tampered"')[1].split("</tr>")[0]
    assert "signed, key not trusted" in html.split('data-repo="acme/toy-kernel"')[1].split("</tr>")[0]
    assert "unsigned" in html.split('data-repo="acme/plain-toy"')[1].split("</tr>")[0]


@pytest.mark.parametrize("path,expected,absent", [
    ("/?q=vit", ["neuron/vit-attn"], ["neuron/toy-kernel", "acme/tiny-model"]),
    ("/?q=tiny+model", ["acme/tiny-model"], ["acme/tiny-data", "neuron/vit-attn"]),
    ("/kernels", ["neuron/vit-attn", "acme/plain-toy"], ["acme/tiny-model", "acme/tiny-data"]),
    ("/datasets", ["acme/tiny-data"], ["acme/tiny-model"]),
    ("/models", ["acme/tiny-model"], ["neuron/vit-attn"]),
    ("/neuron", ["neuron/vit-attn", "neuron/tampered"], ["acme/toy-kernel"]),
    ("/?type=dataset", ["acme/tiny-data"], ["neuron/vit-attn"]),
])
def test_search_and_filters_narrow_the_index(site, path, expected, absent):
    code, _, html = page(site.server, path)
    assert code == 200
    assert all(f'data-repo="{r}"' in html for r in expected)
    assert not any(f'data-repo="{r}"' in html for r in absent)


def test_repo_page_shows_versions_variants_signatures_tuned_configs_and_benchmark_plot(site):
    code, _, html = page(site.server, "/kernels/neuron/vit-attn")
    assert code == 200
    assert "<h1>vit-attn</h1>" in html  # the card, rendered
    assert 'id="versions"' in html and ">v1<" in html and ">v1.0.0<" in html and ">main<" in html
    assert f"signed by {site.trusted_key_id}, a key trusted for &#39;neuron&#39;" in html
    assert "neuron/vit-attn (torch-cpu): 18 files, metadata.json included" in html
    assert "vit_attn/tuned.json" in html and "<h3>trn1</h3>" in html and "ahead_exp=2" in html
    plot = html.split('<svg class="plot"')[1].split("</svg>")[0]
    assert plot.count("<rect") >= 4 and "190.9" in plot and "trn2 estimated latency (us)" in plot


def test_two_majors_show_as_branches_and_tags_and_history(site):
    _, _, html = page(site.server, "/kernels/neuron/toy-kernel")
    versions = html.split('id="versions"')[1].split("</div>")[0]
    assert versions.index(">main<") < versions.index(">v2<") < versions.index(">v1<")
    assert versions.index(">v2.0.0<") < versions.index(">v1.0.0<")
    _, _, v1 = page(site.server, "/kernels/neuron/toy-kernel?revision=v1")
    assert "Showing <strong class=\"mono\">v1</strong>" in v1 and "1.0.0" in v1
    _, _, log = page(site.server, "/kernels/neuron/toy-kernel/commits/v1")
    assert "Publish toy-kernel 1.0.0" in log and "Publish toy-kernel 2.0.0" not in log


def test_tampered_kernel_shows_the_altered_file_and_an_invalid_signature(site):
    _, _, html = page(site.server, "/kernels/neuron/tampered")
    assert f"signature by {site.trusted_key_id} INVALID" in html
    assert "toy_kernel/ops.py (altered)" in html
    row = html.split('id="variant-torch-cpu"')[1].split("toy_kernel/ops.py</a>")[1].split("</tr>")[0]
    # metadata.json was rewritten to match, so only the signature tells
    assert f"altered since key {site.trusted_key_id} signed it" in row and "metadata.json" not in row
    assert "neuron/tampered (torch-neuron)" in html.split('id="variant-torch-neuron"')[1]
    _, _, blob = page(site.server, "/kernels/neuron/tampered/blob/v1/build/torch-cpu/toy_kernel/ops.py")
    assert 'id="file-status"' in blob and "INVALID" in blob and "return x * 1000" in blob
    _, _, commit = page(site.server, f"/kernels/neuron/tampered/commit/{site.tampered_commit}")
    assert "totally legit" in commit and "build/torch-cpu/toy_kernel/ops.py" in commit and "modified" in commit


def test_a_file_rotted_on_disk_shows_as_corrupt(tmp_path, make_kernel):
    from nkihub.kernels.publish import publish

    with serve_in_background(tmp_path / "hub") as hub:
        publish(make_kernel("1.0.0"), "neuron/toy-kernel", endpoint=hub.url)
        c = hub.storage.resolve("kernel", "neuron/toy-kernel", "main")
        blob = hub.storage.blob_path(c.files["build/torch-cpu/toy_kernel/ops.py"].sha256)
        blob.write_bytes(blob.read_bytes().replace(b"factor", b"fector"))
        _, _, html = page(hub, "/kernels/neuron/toy-kernel")
        assert "corrupt on the server" in html
        _, _, index = page(hub, "/")
        assert "tampered or invalid (torch-cpu, torch-neuron)" in index  # one blob, shared by both variants
        code, _, view = page(hub, "/kernels/neuron/toy-kernel/blob/main/build/torch-cpu/toy_kernel/ops.py")
        assert code == 200 and "corrupt on the server" in view and "fector" not in view


def test_file_view_shows_text_escaped_and_offers_binaries_for_download(site):
    code, _, html = page(site.server, "/acme/tiny-model/blob/main/config.json")
    assert code == 200 and "{&#34;hidden_size&#34;: 64}" in html
    code, _, html = page(site.server, "/acme/tiny-model/blob/main/weights.bin")
    assert code == 200 and 'id="binary"' in html and "not UTF-8 text" in html
    assert 'href="/acme/tiny-model/resolve/main/weights.bin"' in html
    code, _, html = page(site.server, "/acme/tiny-model/tree/main/plots")
    assert code == 200 and "latency.png" in html
    _, _, html = page(site.server, "/acme/tiny-model")
    assert 'src="/acme/tiny-model/resolve/main/plots/latency.png"' in html  # the README's relative image


def test_missing_things_are_html_404s_and_the_api_still_answers_json(site):
    for path in ("/neuron/nope", "/kernels/neuron/vit-attn/blob/main/nope.py", "/kernels/neuron/vit-attn/commits/v9"):
        code, h, html = page(site.server, path)
        assert code == 404 and h["content-type"].startswith("text/html") and "404" in html
    code, h, body = raw(site.server, "GET", "/api/kernels/neuron/vit-attn")
    assert code == 200 and json.loads(body)["id"] == "neuron/vit-attn"
    code, h, body = raw(site.server, "POST", "/")
    assert code == 404 and json.loads(body)["error"]
    code, h, body = raw(site.server, "GET", "/kernels/neuron/vit-attn/resolve/main/README.md")
    assert code == 200 and body.startswith(b"---")


def test_pages_send_a_policy_that_runs_no_script(site):
    _, h, _ = page(site.server, "/")
    csp = h["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp and "frame-ancestors 'none'" in csp
    assert h["x-content-type-options"] == "nosniff"


# ---- escaping ------------------------------------------------------------------------------------
@pytest.fixture
def hostile(hub):
    """A repo whose file names and README try to inject markup."""
    api = HfApi(endpoint=hub.url, token=False)
    api.create_repo("acme/hostile")
    readme = (f"# Hostile {SCRIPT}\n\n<img src=x onerror=alert(2)> <a href=\"javascript:alert(3)\">click</a>\n"
              "<iframe src=\"https://example.invalid\"></iframe><style>body{display:none}</style>\n"
              "<div onclick=\"alert(4)\" style=\"position:fixed\">div</div>\n\n[md](javascript:alert(5))\n")
    api.create_commit("acme/hostile", [
        CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=readme.encode()),
        CommitOperationAdd(path_in_repo=f"{SCRIPT}.py", path_or_fileobj=f"x = '{SCRIPT}'\n".encode()),
        CommitOperationAdd(path_in_repo=f"dir{SCRIPT}/a.txt", path_or_fileobj=b"a\n"),
    ], commit_message=f"commit {SCRIPT}")
    return hub


def assert_inert(html: str) -> None:
    for bad in ("<script", "onerror", "onclick", 'href="javascript:', 'src="javascript:', "<iframe", "<style>body",
                "alert(1)</script>"):
        assert bad not in html.split("</style>", 1)[1], bad  # past the page's own stylesheet


def test_file_and_commit_names_with_markup_are_escaped(hostile):
    q = quote(f"{SCRIPT}.py")
    assert_inert(page(hostile, "/")[2])
    for path in ("/acme/hostile", "/acme/hostile/tree/main", f"/acme/hostile/blob/main/{q}",
                 "/acme/hostile/commits/main", f"/acme/hostile/tree/main/{quote('dir' + SCRIPT)}"):
        code, _, html = page(hostile, path)
        assert code == 200, path
        assert_inert(html)
        assert "&lt;script&gt;" in html, path
    _, _, log = page(hostile, "/acme/hostile/commits/main")
    assert "commit &lt;script&gt;alert(1)&lt;/script&gt;" in log


def test_readme_html_is_sanitised(hostile):
    _, _, html = page(hostile, "/acme/hostile")
    card = html.split('id="card">')[1].split("</article>")[0]
    assert_inert("</style>" + card)
    assert "<h1>Hostile </h1>" in card and "<img" in card and ">click</a>" in card and "div" in card


def test_reflected_query_and_bad_names_are_escaped(hostile):
    code, _, html = page(hostile, "/?q=" + quote(SCRIPT))
    assert code == 200 and SCRIPT not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    code, _, html = page(hostile, "/" + quote(SCRIPT))
    assert code == 400 and SCRIPT not in html and "invalid repo id" in text_of(html)
    code, _, html = page(hostile, "/acme/hostile/commits/main?p=" + quote(SCRIPT))
    assert code == 400 and SCRIPT not in html and "&lt;script&gt;" in html


# ---- access --------------------------------------------------------------------------------------
def test_private_repos_need_the_token_public_ones_do_not(tmp_path):
    with serve_in_background(tmp_path / "hub", token="s3cret") as hub:
        api = HfApi(endpoint=hub.url, token="s3cret")
        api.create_repo("acme/open")
        api.create_repo("acme/secret", private=True)
        _, _, index = page(hub, "/")
        assert 'data-repo="acme/open"' in index and "acme/secret" not in index and "1 repos." in index
        assert page(hub, "/acme/open")[0] == 200
        code, _, html = page(hub, "/acme/secret")
        assert code == 404 and "acme/secret" in html  # the name asked for, no more
        assert page(hub, "/acme/secret/tree/main")[0] == 404
        auth = {"Authorization": "Bearer s3cret"}
        assert 'data-repo="acme/secret"' in page(hub, "/", auth)[2]
        assert page(hub, "/acme/secret", auth)[0] == 200
        assert page(hub, "/acme/secret", {"Authorization": "Bearer wrong"})[0] == 404
        with pytest.raises(Exception):
            HfApi(endpoint=hub.url, token=False).create_repo("acme/other")  # writes still need the token


# ---- units -----------------------------------------------------------------------------------------
def test_card_front_matter_title_description_and_benchmark_table():
    card = card_html.render("---\nlicense: mit\ntags: [a, b]\n---\n# T\n\nFirst *para* <b>x</b>.\n\n"
                            "## Benchmarks\n\n| shape | dtype | trn1 estimated latency (us) | speed |\n|---|---|---|---|\n"
                            "| s | bf16 | 10.0 (8.0-12.5) | 2x |\n| m | bf16 | 20 | 3x |\n\n## After\n\n| x |\n|---|\n| 1 |\n")
    assert card.meta == {"license": "mit", "tags": ["a", "b"]}
    assert card.title == "T" and card.description == "First para x."
    assert card.bench_columns == ("shape", "dtype", "trn1 estimated latency (us)", "speed")
    assert card.bench_rows == (("s", "bf16", "10.0 (8.0-12.5)", "2x"), ("m", "bf16", "20", "3x"))
    bars = [b for g in card.plot["groups"] for b in g["bars"]]
    assert [b["value"] for b in bars] == ["10", "20"] and bars[0]["band"] == "8-12.5" and bars[1]["band"] == ""
    assert [entry["name"] for entry in card.plot["legend"]] == ["trn1 estimated latency (us)"]


def test_card_without_benchmarks_has_no_plot_and_bad_front_matter_is_reported():
    card = card_html.render("---\n: [\n---\n# T\n")
    assert card.plot is None and card.problems and "front matter" in card.problems[0]


def test_relative_links_point_into_the_repo_and_cannot_climb_out():
    card = card_html.render("[a](docs/x.md) ![i](img/p.png) [up](../../etc) [h](#s) [w](https://e.org/x)",
                            "", "/kernels/o/r", "v1", "README.md")
    assert 'href="/kernels/o/r/blob/v1/docs/x.md"' in card.html
    assert 'src="/kernels/o/r/resolve/v1/img/p.png"' in card.html
    assert "etc" not in card.html.split(">up<")[0].rsplit("<a", 1)[1]
    assert 'href="#s"' in card.html and 'href="https://e.org/x"' in card.html


def test_tuned_rows_are_grouped_by_target_and_bad_entries_skipped():
    rows = overview._tuned_rows({"kernels": {"k": [
        {"target": "trn2", "tensors": [[[8, 4], "bfloat16"]], "config": {"a": 1}, "estimate_us": 2.0, "default_us": 3.0},
        {"target": "trn1", "tensors": [[[8, 4], "bfloat16"]], "config": {"a": 2}, "estimate_us": 4.0},
        {"target": "trn1", "estimate_us": "x"}, "junk"]}})
    assert list(rows) == ["trn1", "trn2"]
    assert rows["trn2"][0] == {"kernel": "k", "shapes": "8x4 bfloat16", "config": "a=1", "estimate_us": "2",
                               "default_us": "3", "speedup": "1.50x"}
    assert rows["trn1"][0]["speedup"] == "" and len(rows["trn1"]) == 1


def test_list_repos_sees_complete_repos_only(hub):
    api = HfApi(endpoint=hub.url, token=False)
    api.create_repo("b/m")
    api.create_repo("a/k", repo_type="kernel")
    (hub.storage.root / "repos" / "model" / "x" / "half").mkdir(parents=True)  # no refs.json: not a repo
    assert hub.storage.list_repos() == [("kernel", "a/k"), ("model", "b/m")]


def test_statement_fields_beyond_repo_variant_and_files_are_shown_and_expiry_warns():
    assert overview._short(None) == "none" and overview._short({"torch-cpu": "a", "torch-neuron": "b"}) == \
        "torch-cpu, torch-neuron" and overview._short(3) == "3"
    assert overview._expired("2001-01-01T00:00:00Z") == "2001-01-01T00:00:00Z"
    assert overview._expired("2999-01-01T00:00:00Z") == "" and overview._expired(None) == ""
    assert overview._expired("soon") == ""
