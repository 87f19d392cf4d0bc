"""lint over many files, as pre-commit and CI run it in a repository of their own (outside this checkout):
a file that is not a request is named as skipped and the others' findings and exit code stand; files are named
relative to the repository from any working directory, in the table and in the SARIF; SARIF holds no location
outside the checkout. The real `pre-commit` (PyPI) runs the hook of .pre-commit-hooks.yaml."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import ROOT

PACKAGE_JSON = '{"name": "web", "version": "1.0.0", "scripts": {"test": "vitest"}}\n'


def repo_with_prompts(tmp_path: Path) -> Path:
    repo = tmp_path / "agent-repo"
    (repo / "prompts").mkdir(parents=True)
    (repo / "app" / "requests").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    shutil.copy(ROOT / "examples" / "request_a.json", repo / "prompts" / "system.json")  # a timestamp: KV101
    (repo / "prompts" / "package.json").write_text(PACKAGE_JSON)  # matched by the hook's pattern, no request
    shutil.copy(ROOT / "traces" / "sample_session.jsonl", repo / "app" / "requests" / "turns.jsonl")  # KV102
    return repo


def lint(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    return subprocess.run([sys.executable, "-m", "kvprobe", "lint", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**clean, **(env or {}), "COLUMNS": "200"})


def test_a_file_that_is_no_request_is_skipped_and_the_others_findings_stand(tmp_path):
    repo = repo_with_prompts(tmp_path)
    done = lint("prompts/system.json", "prompts/package.json", "app/requests/turns.jsonl", cwd=repo)
    assert done.returncode == 1, done.stderr  # KV102 (an error) in the trace
    assert "prompts/package.json: skipped, not linted: not a known request format" in done.stdout
    assert "prompts/system.json:93:30" in done.stdout and "app/requests/turns.jsonl:3:" in done.stdout
    # from a sub-folder, the same names: relative to the repository, not to the working directory
    sub = lint("../prompts/system.json", "../prompts/package.json", "../app/requests/turns.jsonl",
               "--json", cwd=repo / "app")
    data = json.loads(sub.stdout)
    assert sub.returncode == 1
    assert [i["skipped"] for i in data["inputs"]] == [None, data["inputs"][1]["skipped"], None]
    assert data["inputs"][1]["skipped"].startswith("not a known request format")
    assert {f["rule"] for f in data["findings"]} >= {"KV101", "KV102"}
    assert "warning: prompts/package.json: skipped, not linted" in sub.stderr
    # without the trace, the warnings alone pass at --fail-on error; a lone bad file is bad input (exit 2)
    assert lint("prompts/system.json", "prompts/package.json", cwd=repo).returncode == 0
    alone = lint("prompts/package.json", cwd=repo)
    assert alone.returncode == 2 and "prompts/package.json: not a known request format" in alone.stderr
    assert lint("prompts/package.json", "--skip-non-requests", cwd=repo).returncode == 0


def test_sarif_locations_are_files_of_the_checkout_from_any_folder(tmp_path):
    repo = repo_with_prompts(tmp_path)
    outside = tmp_path / "runner-temp" / "trace.jsonl"  # a capture under the runner's temp folder
    outside.parent.mkdir()
    records = [json.loads(line) for line in (ROOT / "traces" / "sample_session.jsonl").read_text().splitlines()]
    outside.write_text("".join(json.dumps({**r, "session": "captured"}) + "\n" for r in records))
    done = lint("../../prompts/system.json", "../../app/requests/turns.jsonl", str(outside), "--format", "sarif",
                "--fail-on", "never", cwd=repo / "app" / "requests", env={"GITHUB_WORKSPACE": str(repo)})
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)["runs"][0]
    places = [(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
               r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in run["results"]]
    assert ("prompts/system.json", 93) in places and ("app/requests/turns.jsonl", 3) in places
    assert all(not uri.startswith(("/", "file:", "..")) for uri, _ in places)
    assert run["properties"]["outside_repository"] == 3  # the outside trace's KV101, KV102 and KV108
    assert "3 findings in files outside the repository" in done.stderr


def test_the_pre_commit_hook_under_the_real_pre_commit(tmp_path):
    """pre-commit 4 runs the hook as .pre-commit-hooks.yaml defines it (its entry, files and types), with the
    kvprobe installed here (language: system instead of building a venv from the repository), and passes it
    the matched files in batches: a batch of only package.json must not fail the commit."""
    repo = repo_with_prompts(tmp_path)
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    entry = hook["entry"].replace("kvprobe", f"{sys.executable} -m kvprobe", 1)
    config = {"repos": [{"repo": "local", "hooks": [{**hook, "language": "system", "entry": entry}]}]}
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    (repo / "package.json").write_text(PACKAGE_JSON)  # not matched by the hook's pattern: never passed
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")},
           "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "COLUMNS": "200"}
    pre_commit = [sys.executable, "-m", "pre_commit", "run", "--all-files", "--color", "never"]
    done = subprocess.run(pre_commit, cwd=repo, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 1, done.stdout + done.stderr  # the trace's KV102 error fails the hook
    assert "prompt-cache breakers" in done.stdout and "Failed" in done.stdout
    assert "app/requests/turns.jsonl:3:" in done.stdout and "prompts/system.json:93:30" in done.stdout
    assert "skipped, not linted" in done.stdout and "prompts/package.json" in done.stdout
    assert "error: " not in done.stdout  # no batch stopped on the file that is not a request
    # the trace gone, the warning alone lets the commit through (the hook fails on errors only)
    subprocess.run(["git", "rm", "-q", "-f", "app/requests/turns.jsonl"], cwd=repo, check=True)
    done = subprocess.run(pre_commit, cwd=repo, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Passed" in done.stdout
