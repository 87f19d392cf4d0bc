"""Every input of action.yml given hostile values: no value is ever run as code by the action's shell steps.

The action's steps run here as GitHub's runner runs them (tests/local_actions.py), against a fake kvprobe
virtual environment: `kvprobe` and `python -m pip` / `python -m kvprobe.gate.github` are small scripts that
record their argument vectors (and working directory) and answer as the real ones would (`serve` answers
/health, `gate` writes its summary); every other `python` call is the real interpreter (the gate step's word
splitting, the serve step's health check). So one run of the whole action takes a fraction of a second.

A hostile value tries command substitution, backticks, an arithmetic subscript (`a[$(cmd)0]`, which bash runs
wherever the value is evaluated as a number), `;`, pipes, `&&`, redirection, a newline that starts a workflow
command (`::error::…`), globs, an unclosed quote and leading dashes. Each command it would run touches a file
in a folder of the test: that folder must stay empty. And each value must either reach kvprobe (or pip, or
the comment) as data, exactly as given, or make its step fail with an error naming the input.

`command` is a shell command by design (the action runs it with `bash -c` under capture); what is asserted is
that the action adds no evaluation of its own: the text reaches `bash -c` verbatim. `python` and `install`
name a program and a requirement to install: a hostile one is a missing program or a pip argument, never
shell code. The slow fuzz tries every input with each hostile value and with random mixtures of them.
"""
from __future__ import annotations

import random
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from local_actions import JobRun, Runner

ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
INPUTS = sorted(ACTION["inputs"])
INJECTED = "::error::injected"  # a workflow command a newline in a value could start a log line with

# The fake virtual environment's programs. They log each call as NUL-separated words to a file of their own.
FAKE_KVPROBE = r"""#!/bin/bash
{ printf '%s\0' kvprobe "$PWD" "$@"; } > "$(mktemp "$FAKE_LOG/call.XXXXXX")"
case "$1" in
  --version) echo "kvprobe 0 (fake)" ;;
  serve)
    while [ $# -gt 0 ]; do if [ "$1" = --port ]; then port="$2"; fi; shift; done
    exec REAL_PYTHON -c '
import http.server, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()' "$port" ;;
  gate)
    while [ $# -gt 0 ]; do
      case "$1" in
        --junit-xml) echo '<testsuites/>' > "$2" ;;
        --markdown-file) echo '### kvprobe gate: fake' > "$2" ;;
      esac
      shift
    done ;;
esac
exit 0
"""
FAKE_PYTHON = r"""#!/bin/bash
case "$1 $2" in
  "-m pip") { printf '%s\0' pip "${@:3}"; } > "$(mktemp "$FAKE_LOG/call.XXXXXX")"; exit 0 ;;
  "-m kvprobe.gate.github") { printf '%s\0' comment "$GITHUB_TOKEN" "${@:3}"; } > "$(mktemp "$FAKE_LOG/call.XXXXXX")"; exit 0 ;;
esac
exec REAL_PYTHON "$@"
"""

# Hostile values: "{M}" is the folder that must stay empty.
HOSTILE = {
    "substitution": "x$(touch {M}/substitution)",
    "backticks": "x`touch {M}/backticks`",
    "arithmetic": "BASH_VERSINFO[$(touch {M}/arithmetic)0]",
    "newline": "x\ntouch {M}/newline\n" + INJECTED,
    "semicolon": "x; touch {M}/semicolon",
    "pipes": "x | touch {M}/pipe && touch {M}/and > {M}/redirect",
    "glob": "{M}/* {M}/[a-z]?",
    "parameter": "${PATH:?}${x:=$(touch {M}/parameter)}",
    "unclosed-quote": "x' \"$(touch {M}/quote)\" `touch {M}/quote2`",
    "dashes": "--help -o {M}/option",
}
# every metacharacter at once (no quote or backslash, so a shell splits it where str.split() does)
COMPOUND = "x$(touch {M}/1)`touch {M}/2`;touch {M}/3|touch {M}/4&&touch {M}/5>{M}/6\n" + INJECTED + " {M}/*"

NEEDS = {  # what else an input needs for the steps that read it to run
    "serve-timeout": {"serve": "anthropic/claude-opus-5"},
    "port": {"serve": "anthropic/claude-opus-5"},
    "responses-from": {"serve": "anthropic/claude-opus-5"},
    "session": {"command": "python agent.py"},
    "upstream": {"command": "python agent.py"},
}
VALIDATED = {  # inputs whose value is checked before use: (step, message)
    "serve-timeout": ("Start the local engine", "serve-timeout must be whole seconds"),
    "port": ("Start the local engine", "port must be a number"),
}


@dataclass
class Run:
    job: JobRun
    calls: list[list[str]]
    marker: Path
    workspace: Path

    def kvprobe(self, command: str) -> list[str] | None:
        """The argv of the (first) `kvprobe COMMAND` call, without the program name and working directory."""
        return next((c[2:] for c in self.calls if c[0] == "kvprobe" and c[2:3] == [command]), None)

    def cwd(self, command: str) -> str:
        return next(c[1] for c in self.calls if c[0] == "kvprobe" and c[2:3] == [command])

    def step(self, name: str):
        return next(s for s in self.job.steps if s.name == name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_action(base: Path, inputs: dict[str, str], *, venv: bool = True, workdir: str | None = None) -> Run:
    """The whole action with these inputs against the fake virtual environment."""
    workspace, temp, marker, log = base / "workspace", base / "runner-temp", base / "marker", base / "calls"
    for d in (workspace, temp, marker, log):
        d.mkdir(parents=True, exist_ok=True)
    if workdir is not None:
        (workspace / workdir).mkdir(parents=True, exist_ok=True)
    if venv:
        bin_dir = temp / "kvprobe-venv" / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        for name, text in (("kvprobe", FAKE_KVPROBE), ("python", FAKE_PYTHON)):
            (bin_dir / name).write_text(text.replace("REAL_PYTHON", sys.executable))
            (bin_dir / name).chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(base), "LANG": "C.UTF-8", "FAKE_LOG": str(log),
           "GITHUB_TOKEN": "t0ken", "GITHUB_REPOSITORY": "acme/agent"}
    runner = Runner(workspace, temp, env, {})
    try:
        job = runner.run_action(ROOT, inputs)
    finally:
        runner.stop_left_running()
    calls = [f.read_text().split("\0")[:-1] for f in sorted(log.iterdir(), key=lambda f: f.stat().st_mtime_ns)]
    return Run(job, calls, marker, workspace)


def hostile_run(base: Path, name: str, value: str) -> Run:
    """The action with `name` set to `value` (the other inputs as NEEDS says), with the checks every input
    shares: nothing ran, and no log line is a workflow command the value injected."""
    inputs = {"traces": "ci/a.jsonl", "port": str(_free_port()), "serve-timeout": "20", **NEEDS.get(name, {}),
              name: value}
    if name == "working-directory":
        inputs["traces"] = ""
    run = run_action(base, inputs, venv=name != "python",
                     workdir=value if name == "working-directory" else None)
    assert sorted(p.name for p in run.marker.iterdir()) == [], f"{name}={value!r} ran a command\n{run.job.log}"
    assert not [line for line in run.job.log.splitlines() if line.startswith(INJECTED)], run.job.log
    return run


def after_dashes(argv: list[str]) -> list[str]:
    return argv[argv.index("--") + 1:]


def shell_words(value: str) -> list[str]:
    """How a shell splits an unquoted expansion with globbing off (space, tab, newline)."""
    return value.split()


def check_delivered(name: str, value: str, run: Run) -> None:
    """The value reached its consumer as data, or its step failed naming the input."""
    job = run.job
    if name in VALIDATED:
        step, message = VALIDATED[name]
        if value.isdigit():
            return
        assert run.step(f"{step}").code == 2 and message in job.log, job.log
        assert run.kvprobe("serve") is None  # refused before the server was started
        return
    if name == "python":
        assert run.step("Install kvprobe").code != 0 and not run.calls  # a program that is not there
        return
    if name == "install":
        if value.startswith("-") or any(ord(c) < 32 for c in value):
            assert run.step("Install kvprobe").code == 2 and "install must be one pip requirement" in job.log
        else:
            assert ["pip", "--disable-pip-version-check", "-q", "install", value] in run.calls, run.calls
        return
    assert job.code == 0, job.log
    gate = run.kvprobe("gate")
    if name == "traces":
        assert after_dashes(gate) == shell_words(value)
        assert after_dashes(run.kvprobe("lint")) == shell_words(value)  # (a glob matching nothing stays as it is)
    elif name == "lint":
        assert after_dashes(run.kvprobe("lint")) == shell_words(value)
    elif name in ("config", "undecided"):
        i = gate.index(f"--{name}")
        assert gate[i + 1] == value
    elif name == "command":
        assert after_dashes(run.kvprobe("capture")) == ["bash", "-c", value]
    elif name == "session":
        capture = run.kvprobe("capture")
        assert capture[capture.index("--session") + 1] == value
    elif name == "upstream":
        capture = run.kvprobe("capture")
        i = capture.index("--anthropic-upstream")
        assert capture[i:i + 4] == ["--anthropic-upstream", value, "--openai-upstream", value + "/v1"]
    elif name == "serve":
        serve = run.kvprobe("serve")
        assert serve[serve.index("--emulate") + 1] == value and "kvprobe serve answers at" in job.log
    elif name == "responses-from":
        serve = run.kvprobe("serve")
        assert serve[serve.index("--responses-from") + 1] == value
    elif name == "github-token":
        assert ["comment", value] == next(c[:2] for c in run.calls if c[0] == "comment")
    elif name == "engine":
        assert not any("torch" in c for c in run.calls)  # only "true" installs the engine
    elif name == "working-directory":
        assert Path(run.cwd("gate")) == (run.workspace / value).resolve()
    elif name == "comment":
        assert not any(c[0] == "comment" for c in run.calls)  # only "true" comments
    # sarif and artifact only choose whether a hosted action's step runs (`if:`): no shell reads them


def fill(template: str, marker: Path) -> str:
    return template.replace("{M}", str(marker))


@pytest.mark.parametrize("name", INPUTS)
def test_no_input_value_is_run_as_code(tmp_path, name):
    """Every input, with every shell metacharacter at once and with an arithmetic subscript."""
    for i, template in enumerate((COMPOUND, HOSTILE["arithmetic"])):
        base = tmp_path / str(i)
        value = fill(template, base / "marker")
        if name == "working-directory" and "\n" in value:
            value = value.replace("\n", " ")  # (GitHub's runner takes the folder name as given; a newline is legal)
        check_delivered(name, value, hostile_run(base, name, value))


def test_every_input_is_covered():
    """A new input of the action is tried here too (its consumer named in check_delivered or NEEDS)."""
    assert len(INPUTS) == 20 and {"args", "serve-timeout", "port", "traces", "command", "responses-from"} <= set(INPUTS)


@pytest.mark.parametrize(("value", "words"), [
    # the case: a branch name ``x$(cmd)`` interpolated into `args: --baseline ${{ github.head_ref }}.json`
    ("--baseline x$(touch${IFS}{M}/pwned).json", ["--baseline", "x$(touch${IFS}{M}/pwned).json"]),
    ("--baseline 'ci/my base.json'  --min-hit-ratio \"80%\"", ["--baseline", "ci/my base.json", "--min-hit-ratio", "80%"]),
    ("--max-cost-usd\n0.5 `touch {M}/b` ${HOME}", ["--max-cost-usd", "0.5", "`touch", "{M}/b`", "${HOME}"]),
    ("--baseline \"x$(touch {M}/q).json\" a\\ b", ["--baseline", "x$(touch {M}/q).json", "a b"]),
    ("", []),
])
def test_args_are_split_into_words_never_evaluated(tmp_path, value, words):
    run = hostile_run(tmp_path, "args", fill(value, tmp_path / "marker"))
    gate = run.kvprobe("gate")
    assert gate[1:gate.index("--junit-xml")] == [fill(w, tmp_path / "marker") for w in words]
    assert run.job.code == 0


def test_args_with_an_unclosed_quote_fail_the_gate_step(tmp_path):
    run = hostile_run(tmp_path, "args", fill(HOSTILE["unclosed-quote"], tmp_path / "marker"))
    assert run.step("Gate").code == 2 and run.kvprobe("gate") is None
    assert "::error title=kvprobe gate::cannot split args into words: No closing quotation" in run.job.log
    assert run.job.code == 2 and run.job.outputs["exit-code"] == "2"


def test_a_port_with_a_newline_cannot_write_the_steps_outputs(tmp_path):
    """`port: "1\\npid=1"` once reached $GITHUB_OUTPUT through the url line (and the stop step kills $pid)."""
    run = hostile_run(tmp_path, "port", "1\npid=1")
    assert run.step("Start the local engine").code == 2
    assert "port must be a number, got $'1\\npid=1'" in run.job.log  # one line, quoted as data


def test_serve_timeout_counts_leading_zeros_as_decimal(tmp_path):
    """"010" is ten seconds (bash arithmetic would read 010 as octal eight, and refuse 090)."""
    run = hostile_run(tmp_path, "serve-timeout", "090")
    assert run.step("Start the local engine").code == 0 and run.kvprobe("serve")


def _mixtures(rng: random.Random, count: int) -> list[str]:
    parts = list(HOSTILE.values()) + ["'", '"', "\\", "\n", "\t", " ", "$", "`", "(", ")", "{", "}", "[", "]",
                                      "*", "?", "~", "!", "#", "&", "|", ";", "<", ">", "%0A", "::", "-"]
    return ["".join(rng.choice(parts) for _ in range(rng.randint(1, 6))) for _ in range(count)]


@pytest.mark.slow
@pytest.mark.parametrize("name", INPUTS)
def test_fuzz_every_input_with_hostile_values(tmp_path, name):
    """Each input with each hostile value and 12 random mixtures of them (seeded per input)."""
    rng = random.Random(f"action-inputs-{name}")
    values = list(HOSTILE.values()) + _mixtures(rng, 12)
    for i, template in enumerate(values):
        base = tmp_path / str(i)
        value = fill(template, base / "marker")
        if name == "working-directory":
            value = value.lstrip("/")  # a folder of the workspace (an absolute one would be made in the marker)
        run = hostile_run(base, name, value)
        if name not in ("args", "traces", "lint", "working-directory"):
            check_delivered(name, value, run)
