"""The README's two commands go through uvrun.py: on a stock system Python that refuses `pip install uv` (PEP
668, Debian's own /usr/bin/python3 here), with no uv on PATH, it installs uv into the checkout and runs
`uv run`; where the lock's local wheel folder is missing it takes the pinned package from PyPI. Each case
runs in a checkout of its own outside the repository: uvrun.py and a small project (six from PyPI, pinned
to a local wheel folder that does not exist, as torch is pinned to this project's machines' folder)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT

SYSTEM_PYTHON = Path("/usr/bin/python3")
PROJECT = """[project]
name = "probe-project"
version = "0"
requires-python = ">=3.11"
dependencies = ["six"]

[tool.uv]
package = false

[[tool.uv.index]]
name = "local-wheels"
url = "/nonexistent/kvprobe-test-wheels"
format = "flat"
explicit = true

[tool.uv.sources.six]
index = "local-wheels"
marker = "sys_platform == 'linux'"
"""


def _externally_managed(python: Path) -> bool:
    if not python.is_file():
        return False
    stdlib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                            capture_output=True, text=True).stdout.strip()
    has_pip = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True).returncode == 0
    return has_pip and (Path(stdlib) / "EXTERNALLY-MANAGED").is_file()


needs_pep668 = pytest.mark.skipif(not _externally_managed(SYSTEM_PYTHON),
                                  reason="no externally managed system Python with pip at /usr/bin/python3")


def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "checkout"
    repo.mkdir()
    shutil.copy(ROOT / "uvrun.py", repo / "uvrun.py")
    (repo / "pyproject.toml").write_text(PROJECT)
    return repo


def stock_env(tmp_path: Path) -> dict[str, str]:
    """A fresh user's shell: the system PATH (no uv, no pyenv), a home of its own, no pip or uv settings."""
    keep = {k: v for k, v in os.environ.items() if k.startswith(("SSL_", "REQUESTS_CA", "PIP_CERT", "LANG"))}
    home = tmp_path / "home"
    home.mkdir()
    return {**keep, "HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin",
            "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(Path.home() / ".cache" / "uv")),
            "PIP_CACHE_DIR": str(Path.home() / ".cache" / "pip")}


@needs_pep668
def test_uvrun_works_where_pip_install_uv_is_refused(tmp_path):
    repo, env = checkout(tmp_path), stock_env(tmp_path)
    assert shutil.which("uv", path=env["PATH"]) is None
    refused = subprocess.run([str(SYSTEM_PYTHON), "-m", "pip", "install", "-q", "uv"], cwd=repo, env=env,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr  # the old command
    done = subprocess.run([str(SYSTEM_PYTHON), "uvrun.py", "python", "-c", "import six; print('six', six.__version__)"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "uvrun: uv is not on PATH: installing it into" in done.stderr
    assert "the local folder uv.lock takes six from is not on this machine: six comes from PyPI" in done.stderr
    assert done.stdout.startswith("six 1.")
    assert (repo / ".uv" / "bin" / "uv").is_file()  # inside the checkout: the system Python is untouched
    purelib = sysconfig.get_paths(vars={"base": "/usr", "platbase": "/usr"})["purelib"]
    assert not list(Path(purelib).glob("uv-*.dist-info"))
    # the second run finds the uv it installed and installs nothing more
    again = subprocess.run([str(SYSTEM_PYTHON), "uvrun.py", "python", "-c", "print('again')"], cwd=repo, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout == "again\n" and "installing" not in again.stderr


def test_uvrun_says_what_to_install_on_a_python_without_pip(tmp_path):
    """A venv made --without-pip stands for Debian's python3 without the python3-pip package."""
    repo = checkout(tmp_path)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    env = {**stock_env(tmp_path), "PATH": "/nonexistent"}
    done = subprocess.run([str(tmp_path / "bare" / "bin" / "python"), "uvrun.py", "python", "-c", "1"], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "has no pip to install it with: install uv" in done.stderr and "apt install python3-pip" in done.stderr
    assert not (repo / ".uv").exists()
