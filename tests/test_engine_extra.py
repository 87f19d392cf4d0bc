"""Without the `engine` extra, the commands that start the engine say how to install it (exit 2), never a
traceback; the analysis commands never need it."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
# As if torch were not installed: importlib finds no module set to None in sys.modules
WITHOUT_TORCH = "import sys; sys.modules['torch'] = None; sys.argv = ['kvprobe', *sys.argv[1:]]\n" \
                "from kvprobe.cli import main; main()"


def kvprobe_without_torch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


@pytest.mark.parametrize("args", [
    ["serve", "--emulate", "anthropic/claude-sonnet-4-5", "--port", "0"],
    ["run-probe", "examples/public_notes.txt"],
    ["replay", str(SAMPLE)],
])
def test_engine_commands_name_the_install_instead_of_a_traceback(args):
    done = kvprobe_without_torch(*args)
    assert done.returncode == 2, done.stderr
    assert "needs torch (the `engine` extra, not installed)" in done.stderr
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in done.stderr
    assert "pip install 'kvprobe[engine] @ git+https://github.com/kvprobe/kvprobe'" in done.stderr
    assert "Traceback" not in done.stderr and "ModuleNotFoundError" not in done.stderr


def test_analysis_and_dry_runs_need_no_engine():
    assert kvprobe_without_torch("gate", str(SAMPLE), "--min-hit-ratio", "0.3").returncode == 0
    assert kvprobe_without_torch("run-probe", "examples/public_notes.txt", "--dry-run").returncode == 0
