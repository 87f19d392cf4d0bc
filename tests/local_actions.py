"""Run a GitHub Actions workflow's job and composite actions here, as the runner would (for the CI end-to-end test).

Enough of the runner for kvprobe's action.yml and examples/github-actions.yml, and strict about the rest (an
expression it cannot evaluate is an error, not an empty string): `${{ }}` over `inputs`, `steps.ID.outputs`,
`github`, `env` and `runner`, with `==`, `!=`, `&&`, `||`, `!` and parentheses; `run` steps through `bash
--noprofile --norc -eo pipefail` (GitHub's bash) with `env`, `working-directory`, `continue-on-error`,
`$GITHUB_OUTPUT` (`name=value` and heredocs), `$GITHUB_ENV`, `$GITHUB_PATH` and one `$GITHUB_STEP_SUMMARY`;
`uses:` of a local action runs its steps; other `uses:` steps (hosted actions) are listed as skipped.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
_TOKEN = re.compile(r"\s*('(?:[^']|'')*'|&&|\|\||==|!=|!|\(|\)|[A-Za-z_][\w.-]*)")


@dataclass
class StepRun:
    name: str
    status: str  # "ran", "skipped (if)", "skipped (uses ...)", "skipped (failed before)"
    code: int = 0
    log: str = ""
    seconds: float = 0.0


@dataclass
class JobRun:
    steps: list[StepRun] = field(default_factory=list)
    code: int = 0
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def log(self) -> str:
        return "\n".join(s.log for s in self.steps)


class Runner:
    def __init__(self, workspace: Path, temp: Path, env: dict[str, str], actions: dict[str, Path]) -> None:
        self.workspace, self.temp, self.actions = workspace, temp, actions
        self.env = dict(env)  # the job's environment; $GITHUB_ENV and $GITHUB_PATH add to it
        self.failed = False  # a step of the job (or of the composite action running) has failed
        self.groups: list[int] = []  # process groups of the steps run
        temp.mkdir(parents=True, exist_ok=True)
        self.summary = temp / "step_summary.md"
        self.summary.unlink(missing_ok=True)  # one job, one summary
        self.env.update(GITHUB_STEP_SUMMARY=str(self.summary), RUNNER_TEMP=str(temp),
                        GITHUB_WORKSPACE=str(workspace), GITHUB_ACTIONS="true", CI="true")
        self._files = 0

    # expressions
    def evaluate(self, expr: str, ctx: dict[str, Any]) -> Any:
        pos, parts = 0, []
        while pos < len(expr):
            m = _TOKEN.match(expr, pos)
            if not m:
                raise ValueError(f"cannot evaluate {expr!r} at {expr[pos:]!r}")
            tok, pos = m.group(1), m.end()
            if tok.startswith("'"):
                parts.append(repr(tok[1:-1].replace("''", "'")))
            elif tok in ("&&", "||", "!"):
                parts.append({"&&": " and ", "||": " or ", "!": " not "}[tok])
            elif tok in ("==", "!=", "(", ")"):
                parts.append(tok)
            elif tok in ("true", "false"):
                parts.append(repr(tok == "true"))
            elif tok in ("always", "success", "failure", "cancelled") and expr[pos:pos + 2] == "()":
                pos += 2  # the job's status functions, as GitHub evaluates them
                parts.append(repr({"always": True, "success": not self.failed, "failure": self.failed,
                                   "cancelled": False}[tok]))
            else:
                parts.append(repr(self._lookup(tok, ctx)))
        return eval("".join(parts), {"__builtins__": {}}, {})  # noqa: S307 - our own tokens only

    @staticmethod
    def _lookup(name: str, ctx: dict[str, Any]) -> Any:
        value: Any = ctx
        for part in name.split("."):
            if not isinstance(value, dict):
                raise ValueError(f"unknown context {name}")
            if part not in value:
                if name.split(".")[0] in ("steps", "env") or ".outputs." in name:
                    return ""  # an output or variable nobody set is empty, as on GitHub
                raise ValueError(f"unknown context {name}")
            value = value[part]
        return value

    def interpolate(self, text: Any, ctx: dict[str, Any]) -> str:
        if isinstance(text, bool):
            return "true" if text else "false"
        return _EXPR.sub(lambda m: self._str(self.evaluate(m.group(1), ctx)), str(text))

    @staticmethod
    def _str(value: Any) -> str:
        return ("true" if value else "false") if isinstance(value, bool) else str(value)

    def condition(self, cond: Any, ctx: dict[str, Any]) -> bool:
        """A step's `if:`; as on GitHub, one that names no status function runs only while nothing failed."""
        if cond is None:
            return not self.failed
        text = str(cond).strip()
        text = text[3:-2].strip() if text.startswith("${{") else text
        if not re.search(r"\b(always|success|failure|cancelled)\(\)", text) and self.failed:
            return False
        return bool(self.evaluate(text, ctx))

    # steps
    def _file(self, name: str) -> Path:
        self._files += 1
        path = self.temp / f"_{name}_{self._files}"
        path.write_text("")
        return path

    def _run(self, step: dict[str, Any], ctx: dict[str, Any], cwd: Path) -> tuple[int, str, dict[str, str]]:
        script = self._file("script")
        script.write_text(self.interpolate(step["run"], ctx))
        outputs, env_file, path_file = self._file("output"), self._file("env"), self._file("path")
        env = {**self.env, **{k: self.interpolate(v, ctx) for k, v in (step.get("env") or {}).items()},
               "GITHUB_OUTPUT": str(outputs), "GITHUB_ENV": str(env_file), "GITHUB_PATH": str(path_file)}
        where = cwd / self.interpolate(step.get("working-directory", "."), ctx)
        if not where.is_dir():  # GitHub's runner fails the step: it cannot start bash there
            return 1, f"##[error]the working directory {str(where)!r} does not exist", {}
        # each step in a process group of its own: what it leaves running (a server started with `&`) is stopped
        # when the job ends, as a runner does
        proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=where,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.groups.append(proc.pid)
        stdout, stderr = proc.communicate(timeout=900)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        self.env.update(_key_values(env_file.read_text()))
        for line in path_file.read_text().splitlines():
            if line.strip():
                self.env["PATH"] = line.strip() + os.pathsep + self.env["PATH"]
        return done.returncode, done.stdout + done.stderr, _key_values(outputs.read_text())

    def run_steps(self, steps: list[dict[str, Any]], ctx: dict[str, Any], cwd: Path) -> JobRun:
        job = JobRun()
        ctx.setdefault("steps", {})
        outer = self.failed
        self.failed = False  # a composite action's steps see its own failures (and the job's, through `outer`)
        for i, step in enumerate(steps):
            name = step.get("name") or step.get("uses") or f"step {i + 1}"
            self.failed = outer or bool(job.code)
            if not self.condition(step.get("if"), ctx):
                job.steps.append(StepRun(name, "skipped (failed before)" if self.failed else "skipped (if)"))
                continue
            started = time.monotonic()
            if "run" in step:
                code, log, outputs = self._run(step, ctx, cwd)
            else:
                inner = self._uses(step, ctx, cwd)
                if inner is None:
                    job.steps.append(StepRun(name, f"skipped (uses {step['uses']})"))
                    continue
                job.steps += [StepRun(f"{name} / {s.name}", s.status, s.code, "", s.seconds) for s in inner.steps]
                code, log, outputs = inner.code, inner.log, inner.outputs
            if "id" in step:
                ctx["steps"][step["id"]] = {"outputs": outputs, "outcome": "failure" if code else "success"}
            job.steps.append(StepRun(name, "ran", code, log, time.monotonic() - started))
            if code and not step.get("continue-on-error"):
                job.code = job.code or code
        self.failed = outer
        return job

    def _uses(self, step: dict[str, Any], ctx: dict[str, Any], cwd: Path) -> JobRun | None:
        ref = step["uses"].split("@", 1)[0]
        if ref not in self.actions:
            return None
        given = {k: self.interpolate(v, ctx) for k, v in (step.get("with") or {}).items()}
        return self.run_action(self.actions[ref], given)

    def run_action(self, action_dir: Path, given: dict[str, str]) -> JobRun:
        """A composite action's steps with these inputs (the others at their defaults)."""
        action = yaml.safe_load((action_dir / "action.yml").read_text())
        assert action["runs"]["using"] == "composite"
        github = {"action_path": str(action_dir), "token": self.env.get("GITHUB_TOKEN", ""),
                  "workspace": str(self.workspace)}
        base = {"github": github, "env": self.env, "runner": {"temp": str(self.temp)}}
        unknown = set(given) - set(action.get("inputs", {}))
        assert not unknown, f"inputs the action does not declare: {unknown}"
        inputs = {name: given[name] if name in given else self.interpolate(spec.get("default", ""), base)
                  for name, spec in action.get("inputs", {}).items()}
        ctx = {**base, "inputs": inputs, "steps": {}}
        run = self.run_steps(action["runs"]["steps"], ctx, self.workspace)
        run.outputs = {name: self.interpolate(spec["value"], ctx) for name, spec in action.get("outputs", {}).items()}
        return run

    def run_job(self, workflow: Path, job: str, overrides: dict[str, dict[str, str]] | None = None) -> JobRun:
        """A workflow job's steps; `overrides` maps a `uses:` reference to inputs replacing its `with:`."""
        spec = yaml.safe_load(workflow.read_text())["jobs"][job]
        steps = []
        for step in spec["steps"]:
            step = dict(step)
            ref = step.get("uses", "").split("@", 1)[0]
            if overrides and ref in overrides:
                step["with"] = {**(step.get("with") or {}), **overrides[ref]}
            steps.append(step)
        ctx = {"github": {"token": self.env.get("GITHUB_TOKEN", ""), "workspace": str(self.workspace)},
               "env": self.env, "runner": {"temp": str(self.temp)}}
        try:
            return self.run_steps(steps, ctx, self.workspace)
        finally:
            self.stop_left_running()

    def stop_left_running(self) -> None:
        """Stop what the job's steps left running (GitHub's runner does so when a job ends)."""
        for group in self.groups:
            try:
                os.killpg(group, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        self.groups.clear()


def _key_values(text: str) -> dict[str, str]:
    """`name=value` lines and `name<<DELIMITER` heredocs, as $GITHUB_OUTPUT and $GITHUB_ENV hold them."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            body = []
            i += 1
            while lines[i] != delimiter:
                body.append(lines[i])
                i += 1
            out[name] = "\n".join(body)
        elif "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out
