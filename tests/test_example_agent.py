"""The CI example end to end: the example agent runs against `serve --emulate` under `capture`, and `gate`
checks its trace against the committed baseline (passes as is; fails when a timestamp breaks the prefix)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from kvprobe.serve import start_server

EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module")
def emulated_api():
    with start_server(cache="emulate", emulate="anthropic/claude-opus-5") as handle:
        yield handle.base_url


def run_agent(base_url: str, trace, bug: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_BASE_URL")}
    if bug:
        env["AGENT_BUG"] = bug
    return subprocess.run([sys.executable, "-m", "kvprobe", "capture", "-o", str(trace), "--session", "agent-ci",
                           "--anthropic-upstream", base_url, "--", sys.executable, str(EXAMPLES / "agent.py")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def gate(trace) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvprobe", "gate", str(trace), "--baseline",
                           str(EXAMPLES / "agent-baseline.json"), "--max-regression", "10%", "--min-hit-ratio", "0.5",
                           "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_the_agent_passes_its_baseline_and_a_timestamp_fails_it(emulated_api, tmp_path):
    good = tmp_path / "good.jsonl"
    run = run_agent(emulated_api, good)
    assert run.returncode == 0, run.stderr
    assert "step 4: read" in run.stdout and len(good.read_text().splitlines()) == 5
    result = gate(good)
    assert result.returncode == 0, result.stdout
    bad = tmp_path / "bad.jsonl"
    assert run_agent(emulated_api, bad, bug="timestamp").returncode == 0
    result = gate(bad)
    assert result.returncode == 1
    data = json.loads(result.stdout)
    failed = {c["name"] for c in data["checks"] if not c["passed"]}
    assert {"min_hit_ratio", "regression:input_equivalent_tokens"} <= failed
    assert data["top_causes"][0]["kind"] == "prefix_changed"
    assert "system" in data["top_causes"][0]["why"] or "timestamp" in data["top_causes"][0]["why"]


def test_github_actions_example_emulates_the_model_the_agent_asks_for():
    """The workflow (run end to end by tests/test_ci_e2e.py) serves the model examples/agent.py requests, so the
    emulated usage follows that model's cache rules; the action runs the agent under capture, then the gate."""
    import yaml

    steps = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())["jobs"]["cache-cost"]["steps"]
    (gate,) = [s for s in steps if s.get("uses", "").startswith("kvprobe/kvprobe@")]
    assert gate["with"]["serve"] == "anthropic/claude-opus-5" and gate["with"]["command"] == "python agent.py"
    assert 'MODEL = os.environ.get("AGENT_MODEL", "claude-opus-5")' in (EXAMPLES / "agent.py").read_text()
    action = (ROOT / "action.yml").read_text()
    for command in ('"$BIN/kvprobe" serve --emulate', '"$BIN/kvprobe" "${args[@]}" -- bash -c "$INPUT_COMMAND"',
                    '"$BIN/kvprobe" gate "${args[@]}"'):
        assert command in action


def test_example_cache_test_passes_through_the_pytest_plugin(emulated_api):
    """examples/test_agent_cache.py, as a user's suite would run it: the plugin is on by installation."""
    env = {**os.environ, "ANTHROPIC_BASE_URL": emulated_api}
    run = subprocess.run([sys.executable, "-m", "pytest", str(EXAMPLES / "test_agent_cache.py"), "-q",
                          "-p", "no:cacheprovider", "-o", "addopts="],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
