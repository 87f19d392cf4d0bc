"""Headless Chromium, for the PNG chart (and for tests that check what a browser really renders).

Chromium is found on PATH (chromium, chromium-browser, google-chrome) or at $KVPROBE_CHROMIUM. Each call
starts a fresh headless browser with a throwaway profile and no network features.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from kvprobe.errors import KvprobeError

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars")
TIMEOUT_S = 90
MAX_PIXELS_SIDE = 16000  # Chromium cannot capture a surface wider or taller than about 16k device pixels


class BrowserError(KvprobeError):
    """Chromium is missing or failed."""


def find_chromium() -> str | None:
    env = os.environ.get("KVPROBE_CHROMIUM")
    if env:
        return env if Path(env).is_file() else shutil.which(env)
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


def _run(args: list[str], profile: str) -> subprocess.CompletedProcess[bytes]:
    exe = find_chromium()
    if exe is None:
        raise BrowserError("Chromium is needed to draw a PNG: install it (Debian: apt-get install chromium) or "
                           "set KVPROBE_CHROMIUM to its path; or write an SVG instead (-o timeline.svg)")
    cmd = [exe, *FLAGS, f"--user-data-dir={profile}", *args]
    try:
        return subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S, check=False,
                              env={**os.environ, "DBUS_SESSION_BUS_ADDRESS": "disabled:"})
    except subprocess.TimeoutExpired:
        raise BrowserError(f"Chromium did not finish within {TIMEOUT_S}s") from None
    except OSError as exc:
        raise BrowserError(f"could not start Chromium at {exe}: {exc.strerror or exc}") from None


def screenshot(html_file: Path, png: Path, width: int, height: int, scale: float = 1.0) -> None:
    """Render a local HTML file at width x height CSS pixels into `png` (written by Chromium)."""
    scale = min(scale, MAX_PIXELS_SIDE / max(width, height, 1))
    with tempfile.TemporaryDirectory(prefix="kvprobe-chromium-") as profile:
        proc = _run([f"--window-size={width},{height}", f"--force-device-scale-factor={scale:g}",
                     f"--screenshot={png}", html_file.resolve().as_uri()], profile)
    if proc.returncode != 0 or not png.is_file() or png.stat().st_size == 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise BrowserError(f"Chromium could not draw the PNG (exit {proc.returncode}): {' | '.join(tail)}")


def dump_dom(html_file: Path, budget_ms: int = 3000, width: int | None = None, height: int = 1000) -> str:
    """The DOM after the page's scripts ran, serialised (Chromium's --dump-dom); laid out in a window
    `width` x `height` CSS pixels when a width is given."""
    size = [f"--window-size={width},{height}"] if width else []
    with tempfile.TemporaryDirectory(prefix="kvprobe-chromium-") as profile:
        proc = _run([*size, f"--virtual-time-budget={budget_ms}", "--dump-dom", html_file.resolve().as_uri()],
                    profile)
    if proc.returncode != 0:
        raise BrowserError(f"Chromium failed (exit {proc.returncode})")
    return proc.stdout.decode("utf-8", errors="replace")
