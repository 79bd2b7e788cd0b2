"""Debian's chromium through its chromedriver by Selenium (never a browser download); ``need``s them."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.redis_server import REPO_ROOT, need

SCREENSHOTS = REPO_ROOT / "tests" / ".screenshots"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,760",
    "--hide-scrollbars",
)


def _binary(variable: str, names: tuple[str, ...]) -> str:
    found = os.environ.get(variable) or next(filter(None, (shutil.which(n) for n in names)), None)
    if not found:
        need(names[0], f"not on PATH and {variable} is not set (scripts/test installs chromium and chromium-driver)")
    return found  # type: ignore[return-value]


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium ``WebDriver`` with a fresh profile."""
    try:
        from selenium import webdriver  # noqa: PLC0415 - only the browser tests need it
        from selenium.webdriver.chrome.service import Service  # noqa: PLC0415
    except ImportError as exc:
        need("selenium", str(exc))
    browser = _binary("CHROMIUM", ("chromium", "chromium-browser"))
    driver_path = _binary("CHROMEDRIVER", ("chromedriver",))
    profile = tempfile.mkdtemp(prefix="setqueue-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver: object, name: str) -> Path:
    """The whole page, up to 1600 px high, as tests/.screenshots/<name>.png (untracked)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    # The body's height (the root is at least the window) plus the window's non-page part, or the foot is cut.
    height = driver.execute_script(  # type: ignore[attr-defined]
        "return document.body.scrollHeight + window.outerHeight - window.innerHeight"
    )
    driver.set_window_size(1280, min(max(int(height), 400), 1600))  # type: ignore[attr-defined]
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    driver.set_window_size(1280, 760)  # type: ignore[attr-defined]
    return path
