"""`kvprobe init-ci`: the CI gate for the repository it runs in — its workflow, its settings and its baseline.

What it writes, all checked before anything is written (an existing workflow is kept unless `force`):
- `.github/workflows/kvprobe.yml` at the repository's root: the workflow of examples/github-actions.yml
  for this agent (its command, the model to emulate, the session id its baseline is matched by; a
  `working-directory` when the agent lives in a sub-folder);
- the gate settings beside the agent: a `[tool.kvprobe.gate]` table appended to its pyproject.toml, or a
  kvprobe.toml with `[gate]` when it has none. Settings already there are kept, and their `baseline` used;
- the baseline, from a trace of a run that worked (`baseline_from`, e.g. the `kvprobe` artifact's
  trace.jsonl, or the run `kvprobe init-ci --run` makes): the file the first CI run compares with.
Without a baseline the first CI run says which file to commit (the gate's regression:baseline check).
"""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.errors import InputError
from kvprobe.gate.config import find_config
from kvprobe.gate.wording import repo_path

WORKFLOW = Path(".github/workflows/kvprobe.yml")
DEFAULT_BASELINE = "ci/kvprobe-baseline.json"

_HEAD = """\
# Gate an agent's prompt-caching cost on every pull request, with no API key and no spend: the agent runs
# against kvprobe's local engine in Anthropic emulation, under kvprobe's recording proxy, and the trace is
# checked against the thresholds and the baseline your repository keeps (docs/ci.md explains each part).
# `kvprobe init-ci` writes this file, the thresholds ({config}) and, from a run that worked, the baseline.
# With no baseline committed yet, the run says which file to commit: kvprobe-baseline.json from its
# `kvprobe` artifact, as {baseline}.
# The agent must read its API base URL from ANTHROPIC_BASE_URL (or OPENAI_BASE_URL), as the official SDKs do.
name: kvprobe cost gate
on:
  pull_request:
  push:
    branches: [{branch}]

permissions:
  contents: read
  pull-requests: write    # the one summary comment the gate keeps up to date
  security-events: write  # lint's findings in code scanning (SARIF)

jobs:
  cache-cost:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
"""
_INSTALL = """\
      - name: Install the agent's dependencies
        run: python -m pip install -r {requirements}
"""
_GATE = """\
      - name: kvprobe cost gate
        uses: kvprobe/kvprobe@{ref}  # pin a release tag or a commit SHA of kvprobe
        with:
          serve: {serve}  # the model your agent asks for: usage by its cache rules
          command: {command}  # your agent; its requests are captured and gated
          session: {session}  # the task id the baseline's figures are matched by
"""


@dataclass(slots=True)
class Settings:
    command: str = "python agent.py"
    serve: str = "anthropic/claude-opus-5"
    session: str = "ci"
    ref: str = "main"
    branch: str = "main"
    min_hit_ratio: str = "50%"
    max_regression: str = "10%"
    baseline: str = DEFAULT_BASELINE


@dataclass(slots=True)
class Plan:
    """What init-ci writes (path -> text), appends, and keeps, and what to commit afterwards."""

    root: Path
    here: Path
    writes: dict[Path, str] = field(default_factory=dict)
    appends: dict[Path, str] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)  # what was there and stays (with why)
    baseline: Path | None = None  # the baseline the gate reads (absolute)

    def to_json(self) -> dict[str, Any]:
        return {"repository": str(self.root), "written": [repo_path_in(p, self.root) for p in self.writes],
                "appended": [repo_path_in(p, self.root) for p in self.appends], "kept": self.kept,
                "baseline": repo_path_in(self.baseline, self.root) if self.baseline else None,
                "baseline_exists": bool(self.baseline and self.baseline.exists()), "commit": self.commit}

    @property
    def commit(self) -> list[str]:
        files = [*self.writes, *self.appends]
        if self.baseline is not None and self.baseline.exists() and self.baseline not in files:
            files.append(self.baseline)
        return [repo_path_in(p, self.root) for p in files]


def repo_path_in(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return repo_path(str(path))


def repository_root(start: Path) -> Path:
    """The git work tree `start` is in (its top level), else `start` itself."""
    try:
        done = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=start, capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return start
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else start


_PLAIN = re.compile(r"[A-Za-z_./][A-Za-z0-9_./ =+-]*")
_NOT_STRINGS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def _yaml_scalar(value: str) -> str:
    """A plain YAML scalar where it surely reads back as this string, else a double-quoted one (JSON's
    escapes are YAML's)."""
    plain = _PLAIN.fullmatch(value) and value == value.strip() and value.lower() not in _NOT_STRINGS
    return value if plain else json.dumps(value)


def workflow_text(s: Settings, requirements: str | None, working_directory: str | None, config: str) -> str:
    text = _HEAD.format(branch=s.branch, config=config, baseline=s.baseline)
    if requirements:
        text += _INSTALL.format(requirements=_yaml_scalar(requirements))
    text += _GATE.format(ref=s.ref, serve=_yaml_scalar(s.serve), command=_yaml_scalar(s.command),
                         session=_yaml_scalar(s.session))
    if working_directory:
        text += f"          working-directory: {_yaml_scalar(working_directory)}  # where the agent lives\n"
    return text


def gate_table(s: Settings, header: str) -> str:
    return (f"\n{header}  # `kvprobe schema gate-config` lists every key\n"
            f"min_hit_ratio = {json.dumps(s.min_hit_ratio)}\n"
            f"baseline = {json.dumps(s.baseline)}  # relative to this file; commit it\n"
            f"max_regression = {json.dumps(s.max_regression)}  # cost and input-equivalents against the baseline\n")


def _config(plan: Plan, s: Settings) -> str:
    """Plan the gate settings beside the agent; the config file's path relative to the repository."""
    found = find_config(plan.here)
    if found.path is not None:
        plan.kept.append(f"{repo_path_in(Path(found.path), plan.root)} {found.table} (its settings stay)")
        if found.thresholds.baseline:
            plan.baseline = Path(found.thresholds.baseline)
        return repo_path_in(Path(found.path), plan.root)
    pyproject = plan.here / "pyproject.toml"
    if pyproject.is_file():
        text = pyproject.read_text(encoding="utf-8")
        plan.appends[pyproject] = ("" if text.endswith("\n") or not text else "\n") + gate_table(s, "[tool.kvprobe.gate]")
        target = pyproject
    else:
        target = plan.here / "kvprobe.toml"
        plan.writes[target] = gate_table(s, "[gate]").lstrip("\n")
    plan.baseline = target.parent / s.baseline
    return repo_path_in(target, plan.root)


def plan_init(here: Path, s: Settings, force: bool = False) -> Plan:
    """Everything init-ci would write in the repository `here` is in; InputError when it cannot."""
    here = here.resolve()
    root = repository_root(here).resolve()
    plan = Plan(root, here)
    config = _config(plan, s)
    workflow = root / WORKFLOW
    if workflow.exists() and not force:
        raise InputError("already exists; pass --force to replace it (or edit it: docs/ci.md)",
                         file=repo_path_in(workflow, root))
    requirements = next((p for p in ("requirements.txt", "requirements-dev.txt") if (here / p).is_file()), None)
    rel = here.relative_to(root).as_posix() if here != root else None
    req = f"{rel}/{requirements}" if rel and requirements else requirements
    plan.writes[workflow] = workflow_text(s, req, rel, config)
    return plan


def apply(plan: Plan) -> None:
    """Write the planned files (each whole or not at all) and append the gate tables."""
    from kvprobe.trace.writer import write_atomic

    for path, text in plan.writes.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text.encode())
    for path, text in plan.appends.items():
        write_atomic(path, path.read_bytes() + text.encode())
