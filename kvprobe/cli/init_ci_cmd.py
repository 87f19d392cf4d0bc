"""`kvprobe init-ci`: write the CI gate (workflow, settings, baseline) for the repository it runs in."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from kvprobe.cli.common import Force, err, out, print_json, user_errors
from kvprobe.errors import InputError
from kvprobe.gate.init_ci import Plan, Settings, apply, plan_init, repo_path_in

SERVE_WAIT_S = 600  # the engine's first load (model file, torch) can take minutes on a small machine


def init_ci(
    command: Annotated[str, typer.Option("--command", metavar="CMD", help="How your agent runs (a shell "
                                         "command, run under `kvprobe capture`)")] = "python agent.py",
    serve: Annotated[str, typer.Option("--serve", metavar="PROVIDER/MODEL", help="The model your agent asks "
                                       "for: CI serves the local engine in its emulation")] = "anthropic/claude-opus-5",
    session: Annotated[str, typer.Option("--session", help="The task id the baseline is matched by")] = "ci",
    min_hit_ratio: Annotated[str, typer.Option("--min-hit-ratio", metavar="RATIO", help="The hit-ratio floor "
                                               "written to the settings")] = "50%",
    max_regression: Annotated[str, typer.Option("--max-regression", metavar="RATIO", help="The regression "
                                                "allowed against the baseline")] = "10%",
    baseline: Annotated[str, typer.Option("--baseline", metavar="PATH", help="Where the baseline is kept, "
                                          "relative to the settings file")] = "ci/kvprobe-baseline.json",
    ref: Annotated[str, typer.Option("--ref", help="The kvprobe release tag or commit the workflow uses")] = "main",
    branch: Annotated[str, typer.Option("--branch", help="The branch whose pushes are gated")] = "main",
    baseline_from: Annotated[Path | None, typer.Option("--baseline-from", metavar="TRACE",
                                                       help="Write the baseline from this trace of a run that "
                                                            "worked (e.g. the `kvprobe` artifact's trace.jsonl)")] = None,
    run: Annotated[bool, typer.Option("--run", help="Run the agent once now, under capture against the local "
                                      "engine (or --upstream), and write the baseline from that run")] = False,
    upstream: Annotated[str | None, typer.Option("--upstream", metavar="URL", help="With --run: a server "
                                                 "already running (e.g. `kvprobe serve --emulate`) instead of "
                                                 "starting one")] = None,
    force: Force = False,
    json_out: Annotated[bool, typer.Option("--json", help="What was written, as JSON")] = False,
) -> None:
    """Set up the CI gate for this repository: its workflow, gate settings and (from a run) the baseline.

    Writes .github/workflows/kvprobe.yml at the repository's root and the gate settings beside the agent
    ([tool.kvprobe.gate] in its pyproject.toml, else kvprobe.toml); settings already there are kept. The
    baseline comes from --baseline-from TRACE or --run; without one, the first CI run stops undecided
    (exit 3) and says which file of its artifact to commit. Nothing is written when anything is refused.

    Example: kvprobe init-ci --command "python agent.py" --serve anthropic/claude-opus-5 --run
    """
    if baseline_from is not None and run:
        with user_errors():
            raise InputError("give one of them: a trace to make the baseline from, or a run to make it",
                             field="--baseline-from/--run")
    settings = Settings(command, serve, session, ref, branch, min_hit_ratio, max_regression, baseline)
    with user_errors():
        from kvprobe.gate.config import parse_ratio

        parse_ratio(min_hit_ratio, "--min-hit-ratio")
        parse_ratio(max_regression, "--max-regression", up_to_1=False)
        plan = plan_init(Path.cwd(), settings, force)
        if baseline_from is not None and not baseline_from.is_file():
            raise InputError("does not exist" if not baseline_from.exists() else "is not a file",
                             file=str(baseline_from), field="--baseline-from")
        if plan.baseline is not None and plan.baseline.exists() and (baseline_from or run) and not force:
            raise InputError("already exists; pass --force to replace it", file=repo_path_in(plan.baseline, plan.root))
        baseline_bytes = _baseline(baseline_from, plan) if baseline_from else (_run(plan, settings, upstream)
                                                                                 if run else None)
        apply(plan)
        if baseline_bytes is not None and plan.baseline is not None:
            from kvprobe.trace.writer import write_atomic

            plan.baseline.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(plan.baseline, baseline_bytes)
    if json_out:
        print_json(plan.to_json())
    else:
        _render(plan)


def _baseline(trace: Path, plan: Plan) -> bytes:
    """The baseline of a trace, refused when it has no request or any request failed."""
    from kvprobe.gate.causes import baseline_bytes
    from kvprobe.report import build_report

    report = build_report([trace], fixes=False, top=0)
    if not report.results:
        raise InputError("no request that succeeded: a baseline of it would let every later run pass",
                         file=str(trace))
    if report.failed:
        raise InputError(f"{len(report.failed)} of its requests failed ({report.failed[0][1][:120]}): make the "
                         "baseline from a run that worked", file=str(trace))
    return baseline_bytes(report)


def _run(plan: Plan, s: Settings, upstream: str | None) -> bytes:
    """The agent, once, under `kvprobe capture` against `upstream` or a `kvprobe serve --emulate` started
    here; the baseline of that trace."""
    with tempfile.TemporaryDirectory(prefix="kvprobe-init-ci-") as tmp:
        trace = Path(tmp) / "trace.jsonl"
        server = None if upstream else _start_server(s.serve, Path(tmp) / "serve.log")
        url = upstream or server[1]  # type: ignore[index]
        try:
            err.print(Text(f"running `{s.command}` under capture against {url} …", style="dim"))
            done = subprocess.run([sys.executable, "-m", "kvprobe", "capture", "-o", str(trace), "--session",
                                   s.session, "--anthropic-upstream", url, "--openai-upstream", f"{url}/v1", "--",
                                   "bash", "-c", s.command], cwd=plan.here, stdin=subprocess.DEVNULL)
        finally:
            if server is not None:
                server[0].terminate()
                server[0].wait(30)
        if done.returncode != 0:
            raise InputError(f"the agent's run exited with {done.returncode}: no baseline written", field="--run")
        if not trace.is_file():
            raise InputError("the agent's run made no request under capture: no baseline written", field="--run")
        return _baseline(trace, plan)


def _start_server(serve: str, log: Path) -> tuple[subprocess.Popen, str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fh = open(log, "w")  # noqa: SIM115 - the server's log while it runs
    proc = subprocess.Popen([sys.executable, "-m", "kvprobe", "serve", "--emulate", serve, "--port", str(port)],
                            stdout=fh, stderr=fh, stdin=subprocess.DEVNULL, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    err.print(Text(f"starting kvprobe serve --emulate {serve} …", style="dim"))
    deadline = time.monotonic() + SERVE_WAIT_S
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return proc, url
        except OSError:
            if proc.poll() is not None:
                raise InputError(f"kvprobe serve exited before it answered: {log.read_text()[-400:]}",
                                 field="--run") from None
            time.sleep(0.5)
    proc.terminate()
    raise InputError(f"kvprobe serve did not answer within {SERVE_WAIT_S}s", field="--run")


def _render(plan: Plan) -> None:
    data = plan.to_json()
    for path in data["written"]:
        out.print(f"wrote {path}", markup=False, highlight=False)
    for path in data["appended"]:
        out.print(f"added the gate settings to {path}", markup=False, highlight=False)
    for kept in data["kept"]:
        out.print(f"kept {kept}", markup=False, highlight=False)
    if data["baseline_exists"]:
        out.print(f"baseline: {data['baseline']}", markup=False, highlight=False)
    else:
        out.print(Text(f"no baseline yet at {data['baseline']}: the first CI run stops undecided (exit 3) and "
                       "names the file of its `kvprobe` artifact to commit there; or make it now with "
                       "`kvprobe init-ci --run --force` (runs the agent on the local engine) or "
                       "`--baseline-from TRACE`", style="yellow"), soft_wrap=True)
    out.print("commit them: git add " + " ".join(data["commit"]), markup=False, highlight=False, soft_wrap=True)
