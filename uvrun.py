#!/usr/bin/env python3
"""`python3 uvrun.py ARGS...` is `uv run ARGS...` in this checkout, on any Python 3.8 or later, with or without uv.

The README's two commands go through this file so that they work as written on a fresh machine:
- uv is the one on PATH, else the one this file installed into `.uv/` of the checkout before, else it is
  installed there now with `pip install --target .uv uv`. A folder of the checkout, not the Python's own
  site-packages: Debian's and Ubuntu's system Python refuse `pip install uv` (PEP 668, "externally managed
  environment") but not an install into a folder of your own, and nothing is written outside the checkout.
  A Python without pip (Debian's python3 without the python3-pip package) gets a message saying what to
  install instead.
- `uv.lock` takes torch from a local folder of wheels on this project's own machines (pyproject.toml's
  [[tool.uv.index]] of format "flat"). Where that folder does not exist, uv cannot install from the lock,
  so this file adds `--no-sources-package` for the packages pinned to it: they come from PyPI, and uv
  updates your copy of uv.lock to say so.

Exit status: uv's, or 2 when uv could not be found or installed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
TOOL = ROOT / ".uv"  # where uv is installed when it is not on PATH (.gitignore lists it)


def say(text: str) -> None:
    sys.stderr.write(f"uvrun: {text}\n")
    sys.stderr.flush()


def _installed() -> Path | None:
    for name in ("uv", "uv.exe"):
        for folder in ("bin", "Scripts"):
            path = TOOL / folder / name
            if path.is_file():
                return path
    return None


def _install() -> Path | None:
    """uv from PyPI into .uv/ with this Python's pip (PEP 668 does not apply to an install into a folder)."""
    has_pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0
    if not has_pip:
        say(f"uv is not on PATH and {sys.executable} has no pip to install it with: install uv "
            "(https://docs.astral.sh/uv/getting-started/installation/), or pip (on Debian and Ubuntu: "
            "`apt install python3-pip`), then run this again")
        return None
    say(f"uv is not on PATH: installing it into {TOOL} (once) with pip")
    env = {**os.environ, "PIP_ROOT_USER_ACTION": "ignore"}  # an install into .uv/ is no system change
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                           "--upgrade", "--target", str(TOOL), "uv"], env=env)
    if done.returncode != 0:
        say("pip could not install uv (see above); install uv yourself "
            "(https://docs.astral.sh/uv/getting-started/installation/) and run this again")
        return None
    return _installed()


def find_uv() -> Path | None:
    on_path = shutil.which("uv")
    return Path(on_path) if on_path else (_installed() or _install())


def _uv_settings(text: str) -> tuple[list[dict], dict]:
    """pyproject.toml's [[tool.uv.index]] list and [tool.uv.sources] table (tomllib from Python 3.11; before
    that, a reading of the two shapes this project writes)."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11 runs this file too; uv then fetches a Python the project accepts
        indexes = [dict(re.findall(r'^\s*(\w+)\s*=\s*"([^"]*)"', block, flags=re.M))
                   for block in re.split(r"^\s*\[", text, flags=re.M) if block.startswith("[tool.uv.index]]")]
        sources = {name: {"index": index} for name, index in re.findall(
            r'^\s*\[tool\.uv\.sources\.([\w.-]+)\]\s*\n(?:[^\[\n]*\n)*?\s*index\s*=\s*"([^"]+)"', text, flags=re.M)}
        return indexes, sources
    uv = tomllib.loads(text).get("tool", {}).get("uv", {})
    return uv.get("index", []), uv.get("sources", {})


def unreachable_sources(pyproject: Path) -> list[str]:
    """The packages [tool.uv.sources] pins to a local flat index (a folder of wheels) not on this machine."""
    if not pyproject.is_file():
        return []
    indexes, sources = _uv_settings(pyproject.read_text(encoding="utf-8"))
    missing = set()
    for index in indexes:
        url = str(index.get("url", ""))
        folder = url[len("file://"):] if url.startswith("file://") else url
        if index.get("format") == "flat" and "://" not in folder and not Path(folder).is_dir():
            missing.add(index.get("name"))
    pinned = []
    for package, spec in sources.items():
        for one in spec if isinstance(spec, list) else [spec]:
            if isinstance(one, dict) and one.get("index") in missing:
                pinned.append(package)
    return sorted(set(pinned))


def command(uv: Path, args: list[str]) -> list[str]:
    cmd = [str(uv), "run", "--project", str(ROOT)]
    for package in unreachable_sources(ROOT / "pyproject.toml"):
        say(f"the local folder uv.lock takes {package} from is not on this machine: {package} comes from PyPI "
            "(uv updates uv.lock to say so)")
        cmd += ["--no-sources-package", package]
    return cmd + args


def main(args: list[str]) -> int:
    uv = find_uv()
    if uv is None:
        return 2
    try:
        return subprocess.run(command(uv, args)).returncode
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
