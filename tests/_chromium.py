"""Headless Chromium for the tests of the HTML pages (``test_report_html.py``, ``test_compare.py``)."""
from __future__ import annotations

import shutil
import subprocess


def chromium() -> str | None:
    """The Chromium executable, or None when none is installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def screenshot(page, tmp_path, min_bytes: int):
    """Render ``page`` (a path) at 1280 x 2400 to ``tmp_path / 'shot.png'``; the screenshot holds more than
    ``min_bytes`` bytes and the page logged nothing to the console. Returns the PNG's path."""
    png = tmp_path / "shot.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
             "--window-size=1280,2400", "--hide-scrollbars", f"--screenshot={png}"]
    r = subprocess.run([chromium(), *flags, page.as_uri()], capture_output=True, text=True, timeout=120)
    assert png.is_file() and png.stat().st_size > min_bytes, r.stderr[-2000:]
    console = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    return png
