"""`kvprobe init-ci` in new agent repositories outside this checkout: what it writes, where, what it keeps and
refuses, and the baseline it makes from a run of the agent (examples/agent.py, the real SDK, against an
instant fake Messages API on 127.0.0.1)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from conftest import ROOT
from fake_messages import messages_api

PROJECT = '[project]\nname = "agent"\nversion = "0"\n'


def kvprobe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    return subprocess.run([sys.executable, "-m", "kvprobe", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def new_repo(tmp_path: Path, sub: str = "") -> Path:
    root = tmp_path / "repo"
    agent = root / sub if sub else root
    agent.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    shutil.copy(ROOT / "examples" / "agent.py", agent / "agent.py")
    (agent / "requirements.txt").write_text("anthropic\n")
    (agent / "pyproject.toml").write_text(PROJECT)
    return agent


def test_init_ci_writes_the_example_workflow_and_settings(tmp_path):
    agent = new_repo(tmp_path)
    done = kvprobe("init-ci", cwd=agent)
    assert done.returncode == 0, done.stderr
    assert (agent / ".github/workflows/kvprobe.yml").read_text() == (ROOT / "examples/github-actions.yml").read_text()
    gate = tomllib.loads((agent / "pyproject.toml").read_text())["tool"]["kvprobe"]["gate"]
    assert gate == {"min_hit_ratio": "50%", "baseline": "ci/kvprobe-baseline.json", "max_regression": "10%"}
    assert (agent / "pyproject.toml").read_text().startswith(PROJECT)  # the project's own table as it was
    assert "no baseline yet at ci/kvprobe-baseline.json: the first CI run stops undecided (exit 3)" in done.stdout
    assert done.stdout.rstrip().endswith("commit them: git add .github/workflows/kvprobe.yml pyproject.toml")
    # the gate reads what init-ci wrote; with no baseline committed yet the comparison says what to commit
    check = kvprobe("gate", str(ROOT / "traces" / "sample_session.jsonl"), "--write-baseline", "run-baseline.json",
                    cwd=agent)
    assert check.returncode == 1, check.stdout  # a failed threshold fails, baseline or not
    assert "settings from pyproject.toml; baseline ci/kvprobe-baseline.json" in check.stdout
    assert "FAIL min_hit_ratio: 39.9% is below 50.0%" in check.stdout  # a failed run writes no baseline
    assert "UNDECIDED regression:baseline: no baseline at ci/kvprobe-baseline.json yet" in check.stdout
    assert not (agent / "run-baseline.json").exists()


def test_an_agent_in_a_sub_folder_gets_a_working_directory_and_its_own_settings(tmp_path):
    agent = new_repo(tmp_path, "services/agent")
    (agent / "pyproject.toml").unlink()
    done = kvprobe("init-ci", "--json", "--command", "python agent.py --fast", "--serve", "openai/gpt-5", cwd=agent)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["written"] == ["services/agent/kvprobe.toml", ".github/workflows/kvprobe.yml"]
    assert data["baseline"] == "services/agent/ci/kvprobe-baseline.json" and data["baseline_exists"] is False
    root = agent.parent.parent
    steps = yaml.safe_load((root / ".github/workflows/kvprobe.yml").read_text())["jobs"]["cache-cost"]["steps"]
    assert steps[2]["run"] == "python -m pip install -r services/agent/requirements.txt"
    assert steps[3]["with"] == {"serve": "openai/gpt-5", "command": "python agent.py --fast", "session": "ci",
                                "working-directory": "services/agent"}
    assert tomllib.loads((agent / "kvprobe.toml").read_text())["gate"]["baseline"] == "ci/kvprobe-baseline.json"


def test_init_ci_keeps_settings_and_refuses_to_replace_a_workflow(tmp_path):
    agent = new_repo(tmp_path)
    (agent / "pyproject.toml").write_text(PROJECT + '\n[tool.kvprobe.gate]\nmin_hit_ratio = "70%"\nbaseline = "b.json"\n')
    first = kvprobe("init-ci", cwd=agent)
    assert first.returncode == 0, first.stderr
    assert "kept pyproject.toml [tool.kvprobe.gate] (its settings stay)" in first.stdout
    assert "no baseline yet at b.json" in first.stdout and 'min_hit_ratio = "70%"' in (agent / "pyproject.toml").read_text()
    before = (agent / "pyproject.toml").read_text()
    again = kvprobe("init-ci", cwd=agent)
    assert again.returncode == 2 and ".github/workflows/kvprobe.yml: already exists; pass --force" in again.stderr
    assert (agent / "pyproject.toml").read_text() == before


def test_init_ci_run_makes_the_baseline_the_first_ci_run_compares_with(tmp_path):
    agent = new_repo(tmp_path)
    with messages_api(read=900, write=90, fresh=10) as (url, _):  # what a warm cache would report
        done = kvprobe("init-ci", "--run", "--upstream", url, cwd=agent)
    assert done.returncode == 0, done.stderr
    assert "baseline: ci/kvprobe-baseline.json" in done.stdout
    assert "git add .github/workflows/kvprobe.yml pyproject.toml ci/kvprobe-baseline.json" in done.stdout
    baseline = json.loads((agent / "ci/kvprobe-baseline.json").read_text())
    # five requests of 10 fresh + 900 read + 90 written input tokens each: 4,500 of 5,000 read
    assert baseline["totals"]["requests"] == 5 and baseline["totals"]["token_hit_ratio"] == 0.9
    assert list(baseline["tasks"]) == ["ci"]


def test_init_ci_refuses_a_baseline_of_a_run_that_failed(tmp_path):
    agent = new_repo(tmp_path)
    failed = agent / "failed.jsonl"
    rec = json.loads((ROOT / "traces" / "sample_session.jsonl").read_text().splitlines()[0])
    rec.pop("response", None)
    rec.pop("usage", None)
    rec["error"] = "could not connect to 127.0.0.1:9"
    failed.write_text(json.dumps(rec) + "\n")
    done = kvprobe("init-ci", "--baseline-from", str(failed), cwd=agent)
    assert done.returncode == 2 and "a baseline of it would let every later run pass" in done.stderr
    assert not (agent / ".github").exists() and (agent / "pyproject.toml").read_text() == PROJECT  # nothing written
