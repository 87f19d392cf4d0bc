"""Real agent CLIs, installed from npm at the versions pinned in .ci/agents.txt (`bash .ci/install-agents`), run
for 3 non-interactive turns through `kvprobe capture` against `kvprobe serve` on the bundled model (no key,
no download), in emulate mode and then in cassette mode on what the first run recorded.

Each run asserts what a user would check: every turn exits 0 and every request was answered 200 (a valid
trace, no record with an error), `usage` reads from the agent's own log what the capture recorded (model by
model, but for the calls the agent does not log), `report` names what the turns changed (the third turn switches the model:
`model changed`; Claude Code's second drops a tool: `prefix changed at tools`), and `gate` passes the run and
fails a seeded regression (Claude Code's tool list changed every turn). Claude Code run with
DISABLE_PROMPT_CACHING=1 sends no cache_control and says so in its log, and `report` of that log names the setting;
with ENABLE_PROMPT_CACHING_1H=1 it asks for 1h entries and its log says that too.

Marked `real_agents` (not in the default suite: `.ci/run` runs them in their own step, `uv run pytest -m
real_agents`); a CLI that is not installed is skipped, saying so. The CLIs never reach the internet:
telemetry, update checks and auth flows are off (the env and settings files below), and every base URL
points at the capture proxy (`capture --upstream`: one server, serve, behind each of its mounts, Gemini's
included), which sets the variables each CLI reads.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kvprobe.serve import start_server
from kvprobe.trace import read_trace

pytestmark = pytest.mark.real_agents

AGENTS = Path(os.environ.get("KVPROBE_AGENTS_DIR", Path.home() / ".cache" / "kvprobe" / "agents"))
BIN = AGENTS / "node_modules" / ".bin"
TURN_TIMEOUT = 900  # seconds: the bundled model on 2 CPU cores, a few requests per turn
PROMPTS = ["Say hello in one short sentence.", "Now say goodbye.", "One more word, please."]
QUIET = {  # no telemetry, update checks, error reports, auth flows or other traffic
    "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_BUG_COMMAND": "1",
    "GEMINI_TELEMETRY_ENABLED": "false", "GEMINI_CLI_TRUST_WORKSPACE": "true", "NO_UPDATE_NOTIFIER": "1",
    "CODEX_DISABLE_ANALYTICS": "1", "OTEL_SDK_DISABLED": "true", "DO_NOT_TRACK": "1", "CI": "true",
}
SETTINGS = {"security": {"auth": {"selectedType": None}}, "telemetry": {"enabled": False},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}


@dataclass
class Agent:
    name: str
    binary: str
    turns: list[list[str]]  # each turn's arguments after the binary
    env: dict[str, str] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)  # settings file (under HOME) -> auth type
    logs: str = ""  # where under HOME the agent writes its own session logs (what `kvprobe usage` reads)
    unlogged: tuple[str, ...] = ()  # models whose calls the agent does not write to its log (Gemini's router)


BASE_URL = "@BASE_URL@"  # replaced, in the child, by the OPENAI_BASE_URL capture gives it


def _codex(*args: str) -> list[str]:
    provider = ["-c", "model_provider=kv", "-c", "model_providers.kv.name=kv", "-c",
                f"model_providers.kv.base_url={BASE_URL}", "-c",
                "model_providers.kv.wire_api=responses", "-c", "model_providers.kv.env_key=OPENAI_API_KEY",
                "-c", "model_providers.kv.request_max_retries=0", "-c", "model_providers.kv.stream_max_retries=0",
                "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false"]
    return ["exec", "--skip-git-repo-check", *provider, *args]


AGENT_LIST = [
    Agent("claude-code", "claude", [
        ["-p", PROMPTS[0], "--max-turns", "1"],
        ["-p", PROMPTS[1], "--max-turns", "1", "--continue", "--disallowedTools", "Write"],
        ["-p", PROMPTS[2], "--max-turns", "1", "--continue", "--disallowedTools", "Write",
         "--model", "claude-sonnet-5"]], env={"ANTHROPIC_API_KEY": "sk-ant-kvprobe-local"},
          logs=".claude/projects"),
    Agent("codex", "codex", [_codex(PROMPTS[0]), _codex("resume", "--last", PROMPTS[1]),
                             _codex("-m", "gpt-5.5", "resume", "--last", PROMPTS[2])],
          env={"OPENAI_API_KEY": "sk-kvprobe-local"}, logs=".codex/sessions"),
    Agent("gemini-cli", "gemini", [["-p", PROMPTS[0]], ["--resume", "latest", "-p", PROMPTS[1]],
                                   ["--resume", "latest", "-m", "gemini-3.5-flash", "-p", PROMPTS[2]]],
          env={"GEMINI_API_KEY": "kvprobe-local"},
          settings={".gemini/settings.json": "gemini-api-key"}, logs=".gemini/tmp", unlogged=("flash-lite",)),
    Agent("qwen-code", "qwen", [["-p", PROMPTS[0]], ["--continue", "-p", PROMPTS[1]],
                                ["--continue", "-m", "qwen3-max", "-p", PROMPTS[2]]],
          env={"OPENAI_API_KEY": "sk-kvprobe-local", "OPENAI_MODEL": "qwen3-coder-plus"},
          settings={".qwen/settings.json": "openai"}, logs=".qwen/projects"),
]


def _installed(agent: Agent) -> Path:
    path = BIN / agent.binary
    if not path.exists():
        pytest.skip(f"{agent.binary} ({agent.name}) is not installed in {AGENTS}: run `bash .ci/install-agents` "
                    "(npm, versions pinned in .ci/agents.txt)")
    return path


def _home(tmp: Path, agent: Agent) -> tuple[Path, Path]:
    # one work folder for a test's runs: a cassette is replayed where it was recorded, as a CI job re-runs in
    # the same checkout (the agents put their working directory in the prompt)
    home, work = tmp / "home", tmp.parent / "work"
    work.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(exist_ok=True)
    for name, auth in agent.settings.items():
        settings = json.loads(json.dumps(SETTINGS))
        settings["security"]["auth"]["selectedType"] = auth
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(json.dumps(settings))
    (work / "README.md").write_text("# demo\n")
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    return home, work


@dataclass
class Run:
    trace: Path
    seconds: list[float]
    serve_trace: Path
    home: Path | None = None


def run_agent(agent: Agent, serve_url: str, serve_trace: Path, tmp: Path, session: str,
              extra: Callable[[int], list[str]] | None = None) -> Run:
    """Three turns of one agent; returns the trace of its requests and the seconds each turn took."""
    binary = _installed(agent)
    home, work = _home(tmp, agent)
    env = {**os.environ, **QUIET, **agent.env, "HOME": str(home), "PATH": f"{BIN}:{os.environ['PATH']}"}
    trace = tmp / "trace.jsonl"
    seconds = []
    for turn, args in enumerate(agent.turns):
        argv = [str(binary), *args, *(extra(turn) if extra else [])]
        if agent.binary == "codex":  # Codex takes its base URL from its config: the proxy's, from the env
            argv = ["bash", "-c", 'a=(); for x in "$@"; do a+=("${x//' + BASE_URL + '/$OPENAI_BASE_URL}"); done; '
                    'exec "${a[@]}"', "bash", *argv]
        argv = [sys.executable, "-m", "kvprobe", "capture", "-o", str(trace), "--append", "--session", session,
                "--agent", agent.name, "--upstream", serve_url, "--", *argv]
        start = time.monotonic()
        done = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True, timeout=TURN_TIMEOUT,
                              stdin=subprocess.DEVNULL)
        seconds.append(round(time.monotonic() - start, 1))
        assert done.returncode == 0, f"{agent.name} turn {len(seconds)}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return Run(trace, seconds, serve_trace, home)


def _report(trace: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "kvprobe", "report", str(trace), "--json"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvprobe", "gate", *args], capture_output=True, text=True,
                          timeout=300)


def _usage_by_model(path: Path) -> dict[str, tuple[int, ...]]:
    done = subprocess.run([sys.executable, "-m", "kvprobe", "usage", str(path), "--json"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return {row["model"]: (row["requests"], row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"],
                           row["output_tokens"]) for row in json.loads(done.stdout)["by_model"]}


def check_own_log(agent: Agent, run: Run) -> None:
    """What kvprobe reads from the agent's own log equals what the capture recorded, model by model (requests,
    input, read, write, output), but for the calls the agent is known not to log (Gemini CLI's router)."""
    assert run.home is not None and (run.home / agent.logs).is_dir(), f"{agent.name}: no log in {agent.logs}"
    own, captured = _usage_by_model(run.home / agent.logs), _usage_by_model(run.trace)
    captured = {m: v for m, v in captured.items() if not any(u in m for u in agent.unlogged)}
    assert own == captured, f"{agent.name}: own log {own} against the capture {captured}"


def check_run(agent: Agent, run: Run) -> dict:
    records = list(read_trace(run.trace))  # strict: a malformed line fails here
    assert len(records) >= 3, f"{agent.name}: {len(records)} requests for 3 turns"
    failed = [(r.id, r.error) for r in records if r.error]
    assert not failed, f"{agent.name}: requests kvprobe did not answer 200: {failed[:3]}"
    report = _report(run.trace)
    causes = {(c["kind"], c["what"]) for c in report["causes"]}
    assert ("params_changed", "model") in causes, f"{agent.name}: the model switch is not named: {causes}"
    return {"agent": agent.name, "requests": len(records), "seconds_per_turn": run.seconds,
            "causes": sorted(f"{k} {w}" for k, w in causes)}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    trace = tmp_path_factory.mktemp("serve") / "served.jsonl"
    with start_server(cache="emulate", emulate="anthropic", model_window=1024, max_output_tokens=24,
                      trace=trace, dtype="auto") as handle:
        yield handle, trace


MEASURED: list[dict] = []


@pytest.mark.parametrize("agent", AGENT_LIST, ids=[a.name for a in AGENT_LIST])
def test_three_turns_against_serve_then_replayed_from_their_cassette(agent, emulated, tmp_path):
    server, serve_trace = emulated
    run = run_agent(agent, server.base_url, serve_trace, tmp_path / "emulate", f"{agent.name}-emulate")
    figures = check_run(agent, run)
    check_own_log(agent, run)
    if agent.binary == "claude":
        assert any(c.startswith("prefix_changed tools") for c in figures["causes"]), figures
    gate = _gate(str(run.trace), "--max-failed-requests", "0", "--max-input-equivalent", "100000000")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    # The same agent again, answered from what it was answered the first time
    cassette_trace = tmp_path / "cassette-served.jsonl"
    with start_server(cache="emulate", emulate="anthropic", model_window=1024, max_output_tokens=24,
                      trace=cassette_trace, responses_from=run.trace, dtype="auto") as replay:
        rerun = run_agent(agent, replay.base_url, cassette_trace, tmp_path / "cassette", f"{agent.name}-cassette")
        stats = replay.state.cassette.stats.to_json()
    check_run(agent, rerun)
    assert stats["exact"] + stats["diverged"] >= 3, stats  # every turn found its recorded answer
    MEASURED.append({**figures, "cassette": stats, "cassette_seconds_per_turn": rerun.seconds})
    print(json.dumps(MEASURED[-1]))


def test_gate_fails_a_seeded_cache_regression(emulated, tmp_path):
    """A tool list that changes every turn (a tool or MCP server toggled per turn: the classic breaker) fails
    the gate against the baseline of a clean run of the same task."""
    agent = Agent("claude-code", "claude", [["-p", p, "--max-turns", "1", *(["--continue"] if i else [])]
                                            for i, p in enumerate(PROMPTS)], env=AGENT_LIST[0].env)
    server, serve_trace = emulated
    clean = run_agent(agent, server.base_url, serve_trace, tmp_path / "clean", "regress")
    baseline = tmp_path / "baseline.json"
    done = subprocess.run([sys.executable, "-m", "kvprobe", "baseline", str(clean.trace), "-o", str(baseline)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr

    def toggled(turn: int) -> list[str]:
        return ["--disallowedTools", ("Write", "Edit", "Read")[turn]]
    broken = run_agent(agent, server.base_url, serve_trace, tmp_path / "broken", "regress", toggled)
    assert _gate(str(clean.trace), "--baseline", str(baseline)).returncode == 0
    gate = _gate(str(broken.trace), "--baseline", str(baseline), "--max-regression", "10%")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "FAIL regression" in gate.stdout and "tools" in gate.stdout


def test_claude_code_with_caching_switched_off_says_so_in_its_own_log(emulated, tmp_path):
    """DISABLE_PROMPT_CACHING=1: Claude Code sends no cache_control (the capture shows it), its log says
    `promptCacheRequested: off`, and `report` of that log names the setting instead of inferring a cause."""
    run = _claude_with(emulated, tmp_path, "DISABLE_PROMPT_CACHING")
    sent = [r.request for r in read_trace(run.trace) if r.request]
    assert sent and not any("cache_control" in json.dumps(body) for body in sent)
    assert run.home is not None
    report = _report(run.home / ".claude" / "projects")
    assert "sent with prompt caching off (the log says so)" in " ".join(report["notes"]), report["notes"]
    assert "DISABLE_PROMPT_CACHING" in " ".join(report["notes"])
    assert "prompt caching off (the log says so)" in report["bill"]["headline"]


def test_claude_code_asked_for_1h_entries_says_so_in_its_own_log(emulated, tmp_path):
    """ENABLE_PROMPT_CACHING_1H=1: every breakpoint Claude Code sends asks for 1h (the capture shows it), and
    each request read from its own log carries what it asked for (`cache_requested`), the lifetime the
    usage-only analysis gives what it wrote."""
    from kvprobe.importers import load_any

    run = _claude_with(emulated, tmp_path, "ENABLE_PROMPT_CACHING_1H")
    marks = [m for r in read_trace(run.trace) if r.request for m in _cache_controls(r.request)]
    assert marks and all(m.get("ttl") == "1h" for m in marks), marks
    assert run.home is not None
    logged = list(load_any(run.home / ".claude" / "projects", history=False))
    assert len(logged) == 2 and {r.extra.get("cache_requested") for r in logged} == {"1h"}


def _claude_with(emulated, tmp_path, setting: str) -> Run:
    """Two turns of Claude Code with one of its environment settings at 1, through capture against serve."""
    agent = Agent("claude-code", "claude", [["-p", PROMPTS[0], "--max-turns", "1"],
                                            ["-p", PROMPTS[1], "--max-turns", "1", "--continue"]],
                  env={**AGENT_LIST[0].env, setting: "1"}, logs=".claude/projects")
    server, serve_trace = emulated
    return run_agent(agent, server.base_url, serve_trace, tmp_path / setting.lower(), setting.lower())


def _cache_controls(value: object) -> list[dict]:
    """Every cache_control object in a request body."""
    if isinstance(value, dict):
        found = [value["cache_control"]] if isinstance(value.get("cache_control"), dict) else []
        return found + [m for v in value.values() for m in _cache_controls(v)]
    if isinstance(value, list):
        return [m for v in value for m in _cache_controls(v)]
    return []


def teardown_module() -> None:
    if MEASURED:
        print("\nreal agents:", json.dumps(MEASURED, indent=1))
