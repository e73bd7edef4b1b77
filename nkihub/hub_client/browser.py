"""A headless Chromium for looking at the Hub's pages: the demo's screenshots and the browser tests.

Selenium drives the system's Chromium (Debian's ``chromium`` and ``chromium-driver``, which
``scripts/setup.sh`` installs where it can) through the system's chromedriver. Both paths are given
to Selenium, so Selenium Manager never tries to download a driver or a browser (this machine, like
CI, reaches no browser download site). ``NKIHUB_CHROMIUM`` and ``NKIHUB_CHROMEDRIVER`` name other
binaries. Selenium itself is in nkihub's ``test`` extras, not a dependency of the package.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVERS = ("chromedriver",)
INSTALL_HINT = ("run `bash scripts/setup.sh` as root (it installs Debian's chromium and chromium-driver), "
                "or `apt-get install -y chromium chromium-driver` and `pip install selenium`")


class BrowserUnavailable(RuntimeError):
    """No headless browser here: Selenium, Chromium or chromedriver is missing (the message says which)."""


def _which(env: str, names: tuple[str, ...]) -> str | None:
    explicit = os.environ.get(env)
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def find() -> tuple[str, str]:
    """``(chromium, chromedriver)`` paths, or :class:`BrowserUnavailable` saying what is missing."""
    missing = []
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    browser = _which("NKIHUB_CHROMIUM", BROWSERS)
    driver = _which("NKIHUB_CHROMEDRIVER", DRIVERS)
    if browser is None:
        missing.append("a Chromium binary (NKIHUB_CHROMIUM or chromium on PATH)")
    if driver is None:
        missing.append("chromedriver (NKIHUB_CHROMEDRIVER or chromedriver on PATH)")
    if missing:
        raise BrowserUnavailable(f"no headless browser: missing {', '.join(missing)}; {INSTALL_HINT}")
    return browser, driver


def open_browser(width: int = 1280, height: int = 900):
    """A headless Chromium WebDriver with a ``width`` x ``height`` window; the caller quits it."""
    browser, driver = find()
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager, should anything reach it, stays offline
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    try:
        return webdriver.Chrome(service=Service(executable_path=driver), options=options)
    except Exception as e:  # selenium's own errors: the browser did not start
        raise BrowserUnavailable(f"{browser} with {driver} did not start: {str(e).splitlines()[0] if str(e) else e}") from e


def screenshot(driver, path: str | Path, full_page: bool = True, max_height: int = 6000) -> Path:
    """Write a PNG of the current page to ``path`` (the whole page, up to ``max_height`` CSS pixels)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not full_page:
        driver.save_screenshot(str(path))
        return path
    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    width = driver.execute_script("return document.documentElement.clientWidth")
    clip = {"x": 0, "y": 0, "width": width, "height": min(int(size["height"]), max_height), "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                             "clip": clip})
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def screenshot_pages(base_url: str, pages: dict[str, str], out_dir: str | Path) -> list[Path]:
    """Open each ``name -> path`` of a Hub at ``base_url`` and write ``out_dir/<name>.png``; one browser."""
    driver = open_browser()
    try:
        written = []
        for name, page in pages.items():
            driver.get(base_url.rstrip("/") + page)
            written.append(screenshot(driver, Path(out_dir) / f"{name}.png"))
        return written
    finally:
        driver.quit()
