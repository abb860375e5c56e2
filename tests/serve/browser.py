"""A real headless Chromium for the web view's tests: Debian's `chromium` and
`chromium-driver`, installed with apt when missing (like PostgreSQL in tests/conftest.py).
If they cannot be installed the browser tests FAIL, never skip."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PACKAGES = ("chromium", "chromium-driver")


def _apt_install() -> None:
    prefix: list[str] = []
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            pytest.fail("chromium is not installed and there is no root or sudo to install it")
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*prefix, "apt-get", "install", "-y", "-q", *PACKAGES]
    if subprocess.run(install, env=env, capture_output=True, timeout=900).returncode != 0:
        subprocess.run([*prefix, "apt-get", "update", "-q"], env=env, capture_output=True,
                       timeout=600)
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.fail(f"apt-get install {' '.join(PACKAGES)} failed: {done.stderr[-2000:]}")


def ensure_chromium() -> None:
    """Install Debian's chromium and its driver when either is missing."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        from tests.installs import machine_install_lock

        with machine_install_lock():
            if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
                _apt_install()
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail(f"{CHROMIUM} or {CHROMEDRIVER} missing even after apt-get install")


def start_chromium(width: int = 1400, height: int = 1000):
    """A headless Chromium driven through chromedriver (selenium)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    ensure_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-extensions", f"--window-size={width},{height}",
                "--no-first-run", "--disable-background-networking"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    return driver


def full_page_screenshot(driver, path: Path, width: int = 1400) -> Path:
    """Resize the window to the page's height (up to 4000 px), then save a PNG."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(int(height) + 40, 600), 4000))
    driver.save_screenshot(str(path))
    return path
