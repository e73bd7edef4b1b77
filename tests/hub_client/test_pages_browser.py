"""The Hub's pages in a real browser: headless Chromium (Debian's, through Selenium and the system
chromedriver) against a Hub on 127.0.0.1. One browser and one Hub for the module. Each page looked at
is written to out/pages/<name>.png for a person to look at.

Where no browser can be started the tests skip, except under CI=true, where they fail: CI must run them
(scripts/setup.sh installs chromium and chromium-driver).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nkihub.hub_client.browser import BrowserUnavailable, open_browser, screenshot

from . import pages_site

SHOTS = pages_site.ROOT / "out" / "pages"


@pytest.fixture(scope="module")
def browser():
    try:
        driver = open_browser()
    except BrowserUnavailable as e:
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"CI must run the browser tests, but {e}", pytrace=False)
        pytest.skip(str(e))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        s = pages_site.build(tmp_path_factory.mktemp("pages-browser"), mp)
        yield s
        s.server.stop()


def by_css(driver, css: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css)


def all_css(driver, css: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, css)


def listed(driver) -> list[str]:
    return [row.get_attribute("data-repo") for row in all_css(driver, "#repos tbody tr")]


def shot(driver, name: str) -> Path:
    path = screenshot(driver, SHOTS / f"{name}.png")
    assert path.stat().st_size > 5000  # a page, not a blank
    return path


def test_index_lists_what_was_published(browser, site):
    browser.get(site.url + "/")
    assert browser.title.startswith("Repos")
    assert sorted(listed(browser)) == ["acme/plain-toy", "acme/tiny-data", "acme/tiny-model", "acme/toy-kernel",
                                       "neuron/tampered", "neuron/toy-kernel", "neuron/vit-attn"]
    row = by_css(browser, 'tr[data-repo="neuron/vit-attn"]').text
    assert "neuron" in row and "v1.0.0" in row and "torch-cpu" in row and "signed, trusted key" in row
    assert "tampered or invalid" in by_css(browser, 'tr[data-repo="neuron/tampered"]').text
    shot(browser, "index")


def test_search_box_narrows_the_index(browser, site):
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(site.url + "/")
    box = by_css(browser, 'form.search input[name="q"]')
    box.send_keys("vit")
    by_css(browser, "form.search button").click()
    WebDriverWait(browser, 30).until(EC.url_contains("q=vit"))
    assert listed(browser) == ["neuron/vit-attn"]
    assert "1 of 7 repos match" in by_css(browser, "main").text
    shot(browser, "index-search")
    box = by_css(browser, 'form.search input[name="q"]')
    assert box.get_attribute("value") == "vit"
    box.clear()
    box.send_keys("tiny")
    by_css(browser, "form.search button").click()
    WebDriverWait(browser, 30).until(EC.url_contains("q=tiny"))
    assert sorted(listed(browser)) == ["acme/tiny-data", "acme/tiny-model"]


def test_kernel_page_shows_card_versions_and_signature_status(browser, site):
    browser.get(site.url + "/")
    by_css(browser, 'tr[data-repo="neuron/vit-attn"] a[href="/kernels/neuron/vit-attn"]').click()
    assert browser.current_url.endswith("/kernels/neuron/vit-attn")
    assert by_css(browser, "#card h1").text == "vit-attn"
    assert "kernels.get(\"neuron/vit-attn\", version=1)" in by_css(browser, "#card").text
    versions = by_css(browser, "#versions").text
    assert "main" in versions and "v1" in versions and "v1.0.0" in versions
    signatures = by_css(browser, "#signatures").text
    assert f"torch-cpu: signed by {site.trusted_key_id}, a key trusted for 'neuron'" in signatures
    assert "torch-neuron" in signatures
    variant = by_css(browser, "#variant-torch-cpu").text
    assert f"{site.trusted_key_id} (trusted by this Hub)" in variant
    assert "neuron/vit-attn (torch-cpu): 18 files, metadata.json included" in variant
    assert "vit_attn/nki_kernels.py" in variant and "matches" in variant
    plot = by_css(browser, "#benchmarks svg")
    assert plot.is_displayed() and plot.size["width"] > 300 and "trn1 estimated latency (us)" in plot.text
    tuned = by_css(browser, "#tuned").text
    assert "trn1" in tuned and "trn2" in tuned and "vit_attention_kernel" in tuned
    shot(browser, "kernel-vit-attn")


def test_untrusted_and_unsigned_kernels_say_so(browser, site):
    browser.get(site.url + "/kernels/acme/toy-kernel")
    assert f"signed by {site.other_key_id}, a key not trusted (this Hub trusts no key for 'acme')" in \
        by_css(browser, "#signatures").text
    browser.get(site.url + "/kernels/acme/plain-toy")
    assert by_css(browser, "#trust").text == "unsigned"
    shot(browser, "kernel-unsigned")


def test_a_tampered_file_shows_as_such(browser, site):
    browser.get(site.url + "/kernels/neuron/tampered")
    assert "tampered or invalid (torch-cpu)" == by_css(browser, "#trust").text
    variant = by_css(browser, "#variant-torch-cpu")
    assert f"signature by {site.trusted_key_id} INVALID" in variant.text
    bad = [r.text for r in variant.find_elements("css selector", "tr.bad")]  # the code and the digest list that hides it
    assert [b.split()[0] for b in bad] == ["metadata.json", "toy_kernel/ops.py"]
    assert all("altered since key" in b for b in bad)
    assert "ok" in by_css(browser, "#variant-torch-neuron h3").text  # the other variant is untouched
    shot(browser, "kernel-tampered")
    variant.find_element("link text", "toy_kernel/ops.py").click()
    assert "/blob/v1/build/torch-cpu/toy_kernel/ops.py" in browser.current_url
    assert "altered since key" in by_css(browser, "#file-status").text
    assert "return x * 1000" in by_css(browser, "#source").text
    shot(browser, "file-tampered")


def test_file_views_text_binary_and_tree(browser, site):
    browser.get(site.url + "/kernels/neuron/vit-attn/tree/v1/build/torch-cpu/vit_attn")
    assert "nki_kernels.py" in by_css(browser, "#tree").text
    shot(browser, "tree")
    by_css(browser, "#tree").find_element("link text", "__init__.py").click()
    assert "def vit_attention" in by_css(browser, "#source").text
    assert "Matches its variant's metadata.json and what key" in by_css(browser, "#file-status").text
    shot(browser, "file-text")
    browser.get(site.url + "/acme/tiny-model/blob/main/weights.bin")
    assert "not UTF-8 text" in by_css(browser, "#binary").text
    assert by_css(browser, "#download").get_attribute("href") == site.url + "/acme/tiny-model/resolve/main/weights.bin"
    shot(browser, "file-binary")


def test_commit_history_per_branch(browser, site):
    browser.get(site.url + "/kernels/neuron/toy-kernel/commits/main")
    rows = all_css(browser, "#commits tbody tr")
    assert [r.find_elements("css selector", "td")[1].text for r in rows] == \
        ["Publish toy-kernel 2.0.0", "Publish toy-kernel 1.0.0", "initial commit"]
    assert "v2.0.0" in rows[0].text and "v1" in rows[1].text
    shot(browser, "commits")
    browser.get(site.url + "/kernels/neuron/toy-kernel/commits/v1")
    assert len(all_css(browser, "#commits tbody tr")) == 2


def test_readme_markup_does_not_run_and_plots_show(browser, site):
    browser.get(site.url + "/acme/tiny-model")
    assert by_css(browser, "#card h1").text == "Tiny model"
    assert browser.execute_script("return typeof window.pwned") == "undefined"
    assert browser.execute_script("return document.querySelectorAll('#card script, [onerror]').length") == 0
    assert browser.execute_script("return document.querySelector('#plots img').naturalWidth") > 0
    shot(browser, "model")
