"""The CI gate as another repository adopts it: `kvprobe init-ci` (from the built wheel) writes the workflow and
settings of a fresh agent repository outside this checkout, and its job is run here with CI=true
(tests/local_actions.py runs the job and action.yml's composite steps as GitHub's runner does), the built
wheel installed by the action with pip into a fresh venv.

The venv's dependencies (torch, the model, the SDKs) come from this project's environment through a .pth
file, so pip installs the wheel without reaching an index (.ci/run installs the wheel with a full resolution).
The workflow runs: a first run with no baseline (undecided, naming the file of its artifact to commit), a
pass against that file once committed, a regression (a timestamp at the top of the system prompt), an empty
capture, a dead upstream (every request failed: not green) and an empty baseline (refused) — exit codes, job
summary, JUnit XML, annotations, lint's SARIF and the one PR comment, which always holds the latest verdict.
The agent's requests go to one `kvprobe serve --emulate` the test starts (one engine load); under -m slow,
to the server the action starts for each run, as the example workflow does (its first run makes the
baseline). The action's own start-up is also checked where it must fail: a server that never answers.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from check_jsonschema.builtin_schemas import get_builtin_schema
from jsonschema.validators import validator_for
from ruamel.yaml import YAML

from conftest import ROOT
from local_actions import Runner

ACTION = "kvprobe/kvprobe"  # what the example workflow `uses:`; here, this checkout
WORKFLOW = ROOT / "examples" / "github-actions.yml"
PROJECT = '[project]\nname = "agent"\nversion = "0"\n'


def test_action_and_workflow_match_the_published_schemas():
    """SchemaStore's schemas for action.yml and workflows (vendored by check-jsonschema, offline), on YAML 1.2
    as GitHub reads it (`on:` is a key, not YAML 1.1's true)."""
    for path, name in ((ROOT / "action.yml", "vendor.github-actions"), (WORKFLOW, "vendor.github-workflows")):
        schema = get_builtin_schema(name)
        errors = list(validator_for(schema)(schema).iter_errors(YAML(typ="safe").load(path.read_text())))
        assert not errors, [e.message for e in errors]
    broken = YAML(typ="safe").load((ROOT / "action.yml").read_text())
    del broken["runs"]["steps"][0]["shell"]  # a composite run step without a shell is refused by GitHub
    schema = get_builtin_schema("vendor.github-actions")
    assert list(validator_for(schema)(schema).iter_errors(broken))


def test_pre_commit_hook_lints_request_bodies(tmp_path):
    import re

    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "kvprobe-lint" and hook["language"] == "python"
    files = re.compile(hook["files"])
    assert files.search("prompts/system.json") and files.search("app/requests/turn.jsonl")
    assert not files.search("package.json")
    entry = hook["entry"].split()
    assert entry[0] == "kvprobe"
    done = subprocess.run([sys.executable, "-m", "kvprobe", *entry[1:], str(ROOT / "examples" / "request_a.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "KV101" in done.stdout  # a warning: the default --fail-on error lets it pass


class FakeGitHub(BaseHTTPRequestHandler):
    """The REST calls the sticky comment makes (list, create, edit), on one pull request of one repository."""

    comments: list[dict] = []

    def _reply(self, code: int, data) -> None:
        body = json.dumps(data).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def do_GET(self):  # noqa: N802
        assert self.path.startswith("/repos/acme/agent/issues/7/comments")
        self._reply(200, self.comments)

    def do_POST(self):  # noqa: N802
        assert self.path == "/repos/acme/agent/issues/7/comments" and self.headers["Authorization"] == "Bearer t0ken"
        self.comments.append({"id": 100 + len(self.comments), "body": self._body()["body"]})
        self._reply(201, self.comments[-1])

    def do_PATCH(self):  # noqa: N802
        cid = int(self.path.rsplit("/", 1)[1])
        next(c for c in self.comments if c["id"] == cid)["body"] = self._body()["body"]
        self._reply(200, {"id": cid})

    def log_message(self, *args):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _venv_with_deps(path: Path, deps: Path) -> Path:
    """A fresh venv whose site-packages sees this project's dependencies (not kvprobe itself)."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "kvprobe-e2e-deps.pth").write_text(str(deps) + "\n")
    # the venv's bundled setuptools is older than torch's floor: use the one beside the dependencies
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], timeout=120)
    return python


@pytest.fixture(scope="module")
def runner_machine(built_wheel, tmp_path_factory):
    """What every case shares: the runner's Python, kvprobe's venv (made once; the action reuses it), a fake
    GitHub API for the PR comment, and one `kvprobe serve --emulate` started from the installed wheel."""
    base = tmp_path_factory.mktemp("runner")
    assert not base.is_relative_to(ROOT)
    deps = base / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("kvprobe", "_editable_impl_kvprobe", "localengine", "__editable__")):
            (deps / entry.name).symlink_to(entry)
    system = _venv_with_deps(base / "system-python", deps)  # what actions/setup-python would give
    temp = base / "runner-temp"
    temp.mkdir()
    python = _venv_with_deps(temp / "kvprobe-venv", deps)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(built_wheel)], check=True, timeout=300)
    api = ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    event = base / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    env = {"PATH": f"{system.parent}:/usr/bin:/bin", "HOME": str(base), "LANG": "C.UTF-8",
           "GITHUB_TOKEN": "t0ken", "GITHUB_REPOSITORY": "acme/agent", "GITHUB_EVENT_PATH": str(event),
           "GITHUB_API_URL": f"http://127.0.0.1:{api.server_port}", "KVPROBE_CACHE_DIR": str(base / "cache")}
    machine = {"base": base, "temp": temp, "env": env, "wheel": built_wheel, "kvprobe": temp / "kvprobe-venv" / "bin"
               / "kvprobe", "serve_url": None}
    yield machine
    api.shutdown()
    if machine.get("serve") is not None:
        machine["serve"].terminate()
        machine["serve"].wait(30)


def _shared_server(adopter) -> str:
    """`kvprobe serve --emulate` from the installed wheel, as a user runs it to make a baseline locally (one for
    the module: it is stopped when the module's machine is torn down)."""
    machine = adopter.get("machine", adopter)
    if machine["serve_url"] is None:
        port = _free_port()
        log = open(machine["base"] / "serve.log", "w")
        machine["serve"] = subprocess.Popen([str(machine["kvprobe"]), "serve", "--emulate", "anthropic/claude-opus-5",
                                             "--port", str(port)], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                            env=machine["env"])
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except OSError:
                assert machine["serve"].poll() is None, (machine["base"] / "serve.log").read_text()
                time.sleep(0.5)
        machine["serve_url"] = url
    return machine["serve_url"]


@pytest.fixture
def adopter(runner_machine, tmp_path):
    """A fresh agent repository outside the checkout, set up by `kvprobe init-ci` (no baseline yet)."""
    repo = tmp_path / "agent-repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    shutil.copy(ROOT / "examples" / "agent.py", repo / "agent.py")
    (repo / "requirements.txt").write_text("anthropic\n")
    (repo / "pyproject.toml").write_text(PROJECT)
    done = subprocess.run([str(runner_machine["kvprobe"]), "init-ci"], cwd=repo, capture_output=True, text=True,
                          timeout=120, env=runner_machine["env"])
    assert done.returncode == 0, done.stderr
    assert "commit them: git add .github/workflows/kvprobe.yml pyproject.toml" in done.stdout
    assert (repo / ".github" / "workflows" / "kvprobe.yml").read_text() == WORKFLOW.read_text()
    FakeGitHub.comments = [{"id": 1, "body": "LGTM"}]
    # the module's machine itself under "machine": the shared server is started and stopped there, not on this copy
    return {**runner_machine, "repo": repo, "env": dict(runner_machine["env"]), "machine": runner_machine}


def run(adopter, **inputs: str):
    runner = Runner(adopter["repo"], adopter["temp"], adopter["env"], {ACTION: ROOT})
    inputs = {"install": str(adopter["wheel"]), "port": str(_free_port()), **inputs}
    job = runner.run_job(adopter["repo"] / ".github" / "workflows" / "kvprobe.yml", "cache-cost", {ACTION: inputs})
    if os.environ.get("KVPROBE_E2E_TIMES"):  # where the seconds go: KVPROBE_E2E_TIMES=times.txt
        with open(os.environ["KVPROBE_E2E_TIMES"], "a") as fh:
            fh.write(" | ".join(f"{s.name.split(' / ')[-1]} {s.seconds:.1f}" for s in job.steps if s.seconds) + "\n")
    out = adopter["temp"] / "kvprobe"
    junit = out / "junit.xml"
    summary = runner.summary.read_text() if runner.summary.exists() else ""
    return job, summary, ET.parse(junit).getroot().find("testsuite") if junit.exists() else None


def _timestamped(trace: Path, out: Path) -> Path:
    """The run as AGENT_BUG=timestamp makes it: a new time atop the system prompt of every request, so from the
    second on nothing is read and everything is written again (the usage a provider logs for that)."""
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    for i, rec in enumerate(records):
        rec["request"]["system"][0]["text"] = f"Current time: 10:00:{i:02d}.\n" + rec["request"]["system"][0]["text"]
        usage = rec["response"]["usage"]
        usage["cache_creation_input_tokens"] += usage["cache_read_input_tokens"]
        usage["cache_read_input_tokens"] = 0
        if isinstance(usage.get("cache_creation"), dict):
            usage["cache_creation"]["ephemeral_5m_input_tokens"] = usage["cache_creation_input_tokens"]
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    return out


def cases(suite) -> dict[str, str]:
    """Each JUnit test case's name and outcome (passed, failure, error, skipped)."""
    return {c.get("name"): next((t.tag for t in c if t.tag in ("failure", "error", "skipped")), "passed")
            for c in suite.iter("testcase")}


def test_the_action_fails_when_its_server_never_answers(adopter):
    job, summary, suite = run(adopter, port="70000")  # `kvprobe serve` refuses the port and exits
    assert job.code == 1 and "::error title=kvprobe serve::the server exited before it answered" in job.log
    status = {s.name: s.status for s in job.steps}
    assert status["kvprobe cost gate / Run the command under capture"] == "skipped (failed before)"
    assert status["kvprobe cost gate / Comment on the pull request"] == "ran"
    assert suite is None
    # the gate did not run, and the job summary and the comment say so: no earlier verdict stands
    assert summary.startswith("### kvprobe gate: ❗ did not run")
    assert [c["id"] for c in FakeGitHub.comments] == [1, 101] and "❗ did not run" in FakeGitHub.comments[1]["body"]


def _comment() -> str:
    (_, latest) = FakeGitHub.comments  # the user's and kvprobe's one comment, edited in place
    assert latest["id"] == 101
    return latest["body"]


# Each case's agent run goes through one server the test starts (one engine load), or, under -m slow, through
# the server the action itself starts for each run, as the example workflow does (an engine load per run).
@pytest.mark.parametrize("serving", ["shared", pytest.param("action", marks=pytest.mark.slow)])
def test_the_workflow_init_ci_writes_gates_an_agent_repository(adopter, serving):
    repo = adopter["repo"]
    via = (lambda: {"serve": "", "upstream": _shared_server(adopter)}) if serving == "shared" else dict
    out = adopter["temp"] / "kvprobe"

    # the first run: no baseline yet. The thresholds are checked, the comparison is undecided and the summary
    # names the file to commit; the run's baseline is in its artifact
    job, summary, suite = run(adopter, **via())
    assert job.code == 3, job.log
    assert [s.status for s in job.steps][:3] == ["skipped (uses actions/checkout@v4)",
                                                 "skipped (uses actions/setup-python@v5)", "ran"]
    if serving == "action":
        assert "kvprobe serve answers at http://127.0.0.1:" in job.log
    assert cases(suite) == {"failed_requests": "passed", "min_hit_ratio": "passed", "regression:baseline": "error"}
    first = summary.split("\n", 1)[0]
    assert first == "### kvprobe gate: ❔ could not decide"
    assert "no baseline at ci/kvprobe-baseline.json yet" in summary
    assert "kvprobe-baseline.json in this run's \\`kvprobe\\` artifact: commit it as ci/kvprobe-baseline.json" in summary
    assert "::error file=pyproject.toml,line=7,title=kvprobe gate%3A regression%3Abaseline::" in job.log
    assert _comment().startswith("<!-- kvprobe-gate -->\n" + first)
    baseline = json.loads((out / "kvprobe-baseline.json").read_text())
    assert baseline["totals"]["requests"] == 5 and list(baseline["tasks"]) == ["ci"]
    (repo / "ci").mkdir()
    shutil.copy(out / "kvprobe-baseline.json", repo / "ci" / "kvprobe-baseline.json")  # as the summary says
    trace = repo / "ci" / "first-run.jsonl"
    shutil.copy(out / "trace.jsonl", trace)
    assert len(trace.read_text().splitlines()) == 5  # the agent's five requests

    # a passing run against the baseline
    job, summary, suite = run(adopter, **via())
    assert job.code == 0, job.log
    assert "PASS min_hit_ratio" in job.log and "PASS regression:cost_usd" in job.log
    assert "PASS regression:tasks: every baseline task is in the trace (1 task)" in job.log
    assert summary.startswith("### kvprobe gate: ✅ passed") and "| ✅ |" not in job.log  # the log stays plain
    assert set(cases(suite).values()) == {"passed"}
    assert {"failed_requests", "min_hit_ratio", "regression:token_hit_ratio"} <= set(cases(suite))
    assert json.loads((out / "kvprobe.sarif").read_text())["version"] == "2.1.0"
    assert "✅ passed" in _comment()

    # a regression: a timestamp at the top of the system prompt. Under -m slow the agent really runs with it;
    # by default its trace is written by hand from the first run (every later prefix changes, nothing is read),
    # since five uncached prefills on the CPU engine would double this test's time
    if serving == "action":
        adopter["env"]["AGENT_BUG"] = "timestamp"
        job, summary, suite = run(adopter, **via())
        del adopter["env"]["AGENT_BUG"]
    else:
        job, summary, suite = run(adopter, serve="", command="", traces=str(_timestamped(trace, repo / "ci" / "bug.jsonl")))
    assert job.code == 1, job.log
    assert "FAIL min_hit_ratio" in job.log and "New since the baseline:" in job.log
    assert "::error file=pyproject.toml,line=6,title=kvprobe gate%3A min_hit_ratio::" in job.log
    assert "::error file=pyproject.toml,line=8,title=kvprobe gate%3A regression%3Acost_usd::" in job.log
    assert summary.count("### kvprobe gate") == 1 and "❌ failed" in summary and "**New since the baseline**" in summary
    assert "| prefix_changed at system[0]:" in summary and "Current time" not in summary
    outcome = cases(suite)
    assert outcome["min_hit_ratio"] == "failure" and outcome["regression:input_equivalent_tokens"] == "failure"
    sarif = json.loads((out / "kvprobe.sarif").read_text())
    assert {r["ruleId"] for r in sarif["runs"][0]["results"]} >= {"KV101", "KV102"}
    assert "❌ failed" in _comment() and FakeGitHub.comments[0]["body"] == "LGTM"
    assert not (out / "kvprobe-baseline.json").exists()  # a failed run's figures are no baseline

    # an empty capture: the command made no request. Bad input (exit 2), said in every CI format
    job, summary, suite = run(adopter, serve="", upstream=_shared_server(adopter), command="true")
    assert job.code == 2, job.log
    assert summary.startswith("### kvprobe gate: ❗ error: the gate could not run")
    assert "no requests found: nothing to gate (an empty capture?" in summary
    assert cases(suite) == {"gate": "error"}
    assert "::error title=kvprobe gate%3A error::" in job.log  # the capture is outside the checkout: no file=
    assert "❗ error" in _comment() and "❌ failed" not in _comment()

    # a dead upstream: nothing listens where the requests go
    job, summary, suite = run(adopter, serve="", upstream=f"http://127.0.0.1:{_free_port()}")
    assert job.code == 1, job.log
    assert "FAIL failed_requests: 1 of 1 request failed: could not connect to 127.0.0.1:" in job.log
    assert "PASS" not in job.log and "::error title=kvprobe capture::the command exited with 1" in job.log
    assert cases(suite) == {"failed_requests": "failure", "gate": "error"} and "❌ failed" in summary
    assert "❌ failed" in _comment()

    # an empty baseline (what an older kvprobe wrote from an empty trace) is refused, not passed against; the
    # refusal is the summary, the JUnit error and the comment
    kvprobe = adopter["kvprobe"]
    empty = repo / "empty.jsonl"
    empty.write_text("")
    refused = subprocess.run([str(kvprobe), "baseline", str(empty), "-o", str(repo / "ci" / "empty.json")],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and not (repo / "ci" / "empty.json").exists()
    (repo / "ci" / "kvprobe-baseline.json").write_text(json.dumps({
        "kvprobe_baseline": 1, "created": "2026-11-01T00:00:00+00:00", "tasks": {},
        "totals": {"requests": 0, "token_hit_ratio": 0.0, "input_equivalent_tokens": 0.0, "cost_usd": 0.0}}))
    job, summary, suite = run(adopter, serve="", command="", traces=str(trace))
    assert job.code == 2, job.log
    said = "ci/kvprobe-baseline.json field 'totals.requests': the baseline holds no requests"
    assert said in job.log and said in summary and said in _comment()
    assert "::error file=ci/kvprobe-baseline.json,title=kvprobe gate%3A error::" in job.log
    assert cases(suite) == {"gate": "error"}


class Forbidden(FakeGitHub):
    def do_POST(self):  # noqa: N802
        self._reply(403, {"message": "Resource not accessible by integration"})


@pytest.mark.parametrize("handler", [FakeGitHub, Forbidden])
def test_pr_comment_is_edited_in_place_and_never_fails_the_job(tmp_path, capsys, handler):
    from kvprobe.gate.github import comment

    FakeGitHub.comments = [{"id": 1, "body": "LGTM"}]
    api = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    event, summary = tmp_path / "event.json", tmp_path / "summary.md"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    env = {"GITHUB_EVENT_PATH": str(event), "GITHUB_TOKEN": "t0ken", "GITHUB_REPOSITORY": "acme/agent",
           "GITHUB_API_URL": f"http://127.0.0.1:{api.server_port}"}
    try:
        for text in ("first", "second"):
            summary.write_text(f"### kvprobe gate: {text}\n")
            assert comment(summary, env) == 0
    finally:
        api.shutdown()
    captured = capsys.readouterr()
    if handler is Forbidden:
        assert FakeGitHub.comments == [{"id": 1, "body": "LGTM"}]
        assert "::warning title=kvprobe gate%3A PR comment::cannot comment on #7: HTTP 403 (a token from a " \
               "fork's pull request may not write" in captured.err
    else:
        assert [c["id"] for c in FakeGitHub.comments] == [1, 101] and "created" in captured.out
        assert FakeGitHub.comments[1]["body"] == "<!-- kvprobe-gate -->\n### kvprobe gate: second\n"
    event.write_text(json.dumps({"push": {}}))
    assert comment(summary, env) == 0 and "not a pull request" in capsys.readouterr().out
