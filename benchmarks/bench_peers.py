"""kvprobe against its peers on the same inputs, in one interleaved run: time, CPU and peak memory as ratios.

Peers are installed at benchmark time into a throwaway folder (never vendored): cacheeconomics and cachelint
from PyPI (into their own virtual environment), ccusage from npm (with its native binary for this
platform). A peer that cannot be installed is skipped with the reason. Inputs are generated here, never
committed: ~100 MB and ~1 GB agent traces (gen_trace), fleets of 3,000 and of 300 requests (gen_fleet: sessions of one
product sharing tools + system, with breakers in each; reported with fixes on and off), and a Claude Code projects folder of real-shaped transcripts with fresh ids (bench_usage:
subagents with and without their own transcripts, progress lines, crash-cut lines). The JSON-parse floor is
the standard library's `json.loads` over every line, in its own process. The start-up job times what users
type most, where start-up is the whole cost: `diff` of two small requests (cachelint's `diff` beside it),
`--help`, and `usage` of a 1.8 MB Claude Code folder (ccusage beside it: its JSON, and its table as people
type it); `usage` is also timed on 20 MB.
`usage` is timed twice: reading every file (`--no-cache`, a first run) and with the rows its warm-up round
kept (a later run over the same folder, whose unchanged files are not read again).

Every job runs its commands round-robin `--repeat` times (kvprobe, each peer, the floor, then again), and
reports medians: on a shared machine only ratios taken in the same run mean anything; the load average
is printed before and after.

Usage: uv run python benchmarks/bench_peers.py [--quick] [--repeat 3] [--work DIR] [--only report usage ...]
                                              [--baseline DIR]
  --quick: 200 MB instead of 1 GB for the large trace and the Claude Code folder.
  --baseline DIR: an earlier kvprobe's sources, timed next to this one in the start-up job.
  --work DIR: keep the generated inputs and installed peers there (reused by the next run).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import bench_usage  # noqa: E402
from gen_fleet import generate as generate_fleet  # noqa: E402
from gen_trace import generate  # noqa: E402

FLOOR = ("import json, sys\n"
         "for name in sys.argv[1:]:\n"
         "    paths = [name] if not __import__('os').path.isdir(name) else "
         "[str(p) for p in __import__('pathlib').Path(name).rglob('*.jsonl')]\n"
         "    for path in paths:\n"
         "        with open(path, 'rb') as fh:\n"
         "            for line in fh:\n"
         "                try:\n"
         "                    json.loads(line)\n"
         "                except ValueError:\n"
         "                    pass\n")


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mb: float
    ok: bool
    out: str = ""


@dataclass
class Tool:
    name: str
    cmd: list[str]
    env: dict[str, str] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    versus: str | None = None  # the kvprobe tool its ratio is taken to (None: the job's first)

    def median(self, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.runs)


KEEP_OUTPUT_BYTES = 8 << 20  # more than any JSON a comparison reads (usage on the 1 GB folder: ~2 MB)


def measure(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 1800) -> Run:
    """Wall time, user+system CPU and peak RSS of one command and the processes it waited for."""
    fd, out_path = tempfile.mkstemp(prefix="bench-out-")
    os.close(fd)
    try:
        wall, cpu, rss_kb, code = _Spawner.run(cmd, {**os.environ, **(env or {})}, timeout, out_path)
        # only the end of a large output (a failure's message is there): a whole 1 GB report's JSON read into
        # this process would only make it larger (see _Spawner)
        with open(out_path, "rb") as out:
            size = out.seek(0, os.SEEK_END)
            out.seek(max(0, size - KEEP_OUTPUT_BYTES))
            text = out.read().decode("utf-8", "replace")
    finally:
        os.unlink(out_path)
    return Run(wall, cpu, rss_kb / 1024, code == 0, text)


# What starts and times each command: a small process of its own. A process's peak RSS as wait4 reports it
# starts from the peak of the process that forked it (Linux carries the old memory's high-water mark across
# exec, and subprocess forks with vfork, which lends the parent's memory), so commands started from this one
# reported this process's own peak once it had held the outputs it compares (~104 MB: every tool and the JSON
# floor alike, in every job after the report jobs). Started from a process that only waits, they report their own.
SPAWNER = """
import json, os, subprocess, sys, threading, time
for line in sys.stdin:
    cmd, env, timeout, out_path = json.loads(line)
    with open(out_path, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        # a blocking wait, the timeout a timer's kill: polling every 5 ms rounded each run of the start-up
        # job (~50 ms) up to the next poll, so two tools a few milliseconds apart measured the same
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
    print(json.dumps([wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, code]), flush=True)
"""


class _Spawner:
    proc: subprocess.Popen | None = None

    @classmethod
    def run(cls, cmd: list[str], env: dict[str, str], timeout: float, out_path: str) -> tuple[float, float, int, int]:
        if cls.proc is None or cls.proc.poll() is not None:
            cls.proc = subprocess.Popen([sys.executable, "-I", "-c", SPAWNER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert cls.proc.stdin is not None and cls.proc.stdout is not None
        cls.proc.stdin.write(json.dumps([cmd, env, timeout, out_path]) + "\n")
        cls.proc.stdin.flush()
        wall, cpu, rss_kb, code = json.loads(cls.proc.stdout.readline())
        return wall, cpu, rss_kb, code


# ---------------------------------------------------------------- peers


def install_python_peers(folder: Path) -> tuple[Path | None, str]:
    venv = folder / "py"
    python = venv / "bin" / "python"
    if not python.exists():
        uv = shutil.which("uv")
        steps = ([[uv, "venv", "-q", str(venv)], [uv, "pip", "install", "-q", "--python", str(python),
                                                     "cacheeconomics", "cachelint"]] if uv else
                 [[sys.executable, "-m", "venv", str(venv)],
                  [str(python), "-m", "pip", "install", "-q", "cacheeconomics", "cachelint"]])
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                return None, f"pip install failed: {done.stderr.strip()[-200:]}"
    return venv / "bin", ""


def install_ccusage(folder: Path) -> tuple[list[str] | None, str]:
    """ccusage ships a native binary per platform as an optional npm dependency; when the newest ccusage has
    none for this platform yet, the newest version that has one is installed."""
    npm = shutil.which("npm")
    if not npm:
        return None, "npm not found"
    prefix = folder / "npm"
    cli = prefix / "node_modules" / ".bin" / "ccusage"
    probe = lambda: subprocess.run([str(cli), "--version"], capture_output=True, text=True)  # noqa: E731
    if cli.exists() and probe().returncode == 0:
        return [str(cli)], ""
    arch = {"x86_64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())
    native = f"@ccusage/ccusage-{sys.platform}-{arch}"
    view = subprocess.run([npm, "view", native, "version"], capture_output=True, text=True)
    version = view.stdout.strip()
    if view.returncode != 0 or not version:
        return None, f"no {native} package on the registry"
    done = subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix),
                           f"ccusage@{version}", f"{native}@{version}"], capture_output=True, text=True)
    if done.returncode != 0 or probe().returncode != 0:
        return None, f"npm install failed: {(done.stderr or probe().stderr).strip()[-200:]}"
    return [str(cli)], ""


# ---------------------------------------------------------------- inputs


def bodies_file(trace: Path, out: Path) -> Path:
    """The request bodies of a trace, one per line: the input cachelint analyses."""
    if not out.exists():
        with trace.open("rb") as src, out.open("wb") as dst:
            for line in src:
                dst.write(json.dumps(json.loads(line)["request"]).encode() + b"\n")
    return out


def inputs(work: Path, quick: bool) -> dict[str, Path]:
    big = 200 if quick else 1000
    made = {"t100": work / "trace_100mb.jsonl", "tbig": work / f"trace_{big}mb.jsonl",
            "t3000": work / "fleet_3000req.jsonl", "t300": work / "fleet_300req.jsonl",
            "claude": work / f"claude_{big}mb" / "projects",
            "claude_1": work / "claude_1mb" / "projects", "claude_20": work / "claude_20mb" / "projects"}
    if not made["t100"].exists():
        generate(made["t100"], 100)
    if not made["tbig"].exists():
        generate(made["tbig"], big)
    for key, requests in (("t3000", 3000), ("t300", 300)):  # fleets: sessions of one product, with breakers
        if not made[key].exists():
            generate_fleet(made[key], requests)
    for key, megabytes in (("claude", big), ("claude_1", 1), ("claude_20", 20)):
        if not made[key].exists():
            bench_usage.generate(made[key], megabytes * 1_000_000)
    return made


# ---------------------------------------------------------------- jobs


def kvprobe_cmd() -> list[str]:
    script = Path(sys.executable).with_name("kvprobe")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kvprobe"]


def jobs(made: dict[str, Path], work: Path, py_bin: Path | None, ccusage: list[str] | None,
         skipped: dict[str, str], baseline: Path | None = None) -> dict[str, list[Tool]]:
    kv, floor = kvprobe_cmd(), [sys.executable, "-c", FLOOR]
    hmac = {"CACHEECONOMICS_HMAC_KEY": "kvprobe-benchmark-key-0123456789abcdef"}
    out: dict[str, list[Tool]] = {}
    size = lambda p: f"{p.stat().st_size / 1e6:,.0f} MB"  # noqa: E731
    t100, tbig, t3000 = made["t100"], made["tbig"], made["t3000"]
    report_100 = [Tool("kvprobe report --json (fixes on)", [*kv, "report", str(t100), "--json", "--what-if"])]
    if py_bin:
        report_100.append(Tool("cacheeconomics analyze", [str(py_bin / "cacheeconomics"), "analyze", str(t100),
                                                          "--from", "bodies", "--format", "json"], hmac))
        report_100.append(Tool("cachelint analyze", [str(py_bin / "cachelint"), "analyze",
                                                     str(bodies_file(t100, work / "bodies_100mb.jsonl"))]))
    out[f"report, {size(t100)} trace"] = report_100 + [Tool("json parse floor", [*floor, str(t100)])]
    report_big = [Tool("kvprobe report --json", [*kv, "report", str(tbig), "--json"])]
    if py_bin:
        report_big.append(Tool("cacheeconomics analyze", [str(py_bin / "cacheeconomics"), "analyze", str(tbig),
                                                          "--from", "bodies", "--format", "json"], hmac))
    out[f"report, {size(tbig)} trace"] = report_big + [Tool("json parse floor", [*floor, str(tbig)])]
    fleet = [Tool("kvprobe report --json (fixes on)", [*kv, "report", str(t3000), "--json", "--what-if"]),
             Tool("kvprobe report --json --no-fixes", [*kv, "report", str(t3000), "--json", "--no-fixes"])]
    if py_bin:
        fleet.append(Tool("cacheeconomics analyze", [str(py_bin / "cacheeconomics"), "analyze", str(t3000),
                                                     "--from", "bodies", "--format", "json"], hmac))
    out[f"report with fixes, fleet of 3,000 requests ({size(t3000)})"] = fleet + [
        Tool("json parse floor", [*floor, str(t3000)])]
    # a few hundred requests: where a report's fixed cost (start-up, the tokenizer's load) is most of it
    t300 = made["t300"]
    small = [Tool("kvprobe report --json (fixes on)", [*kv, "report", str(t300), "--json"])]
    if py_bin:
        small.append(Tool("cacheeconomics analyze", [str(py_bin / "cacheeconomics"), "analyze", str(t300),
                                                     "--from", "bodies", "--format", "json"], hmac))
    out[f"report with fixes, fleet of 300 requests ({size(t300)})"] = small + [
        Tool("json parse floor", [*floor, str(t300)])]
    for claude in (made["claude_20"], made["claude"]):
        out[f"usage, Claude Code folder ({folder_mb(claude):,.0f} MB)"] = usage_tools(kv, ccusage, claude) + [
            Tool("json parse floor", [*floor, str(claude)])]
    a, b = ROOT / "examples" / "request_a.json", ROOT / "examples" / "request_b.json"
    small = [Tool("kvprobe diff", [*kv, "diff", str(a), str(b)]), Tool("kvprobe --help", [*kv, "--help"])]
    if py_bin:
        small.append(Tool("cachelint diff", [str(py_bin / "cachelint"), "diff", str(a), str(b)]))
    tiny = made["claude_1"]
    if baseline is not None:  # the same commands from an earlier kvprobe's sources, in the same rounds
        then = {"PYTHONPATH": str(baseline)}
        base_kv = [sys.executable, "-P", "-m", "kvprobe"]  # -P: not the current folder's kvprobe
        small += [Tool("baseline kvprobe diff", [*base_kv, "diff", str(a), str(b)], then, versus="kvprobe diff"),
                  Tool("baseline kvprobe usage --json --no-cache", [*base_kv, "usage", str(tiny), "--json",
                                                                 "--no-cache"], then,
                       versus="kvprobe usage --json --no-cache")]
    out[f"start-up: diff of two small requests, --help, usage of a {folder_mb(tiny):,.1f} MB folder"] = \
        small + usage_tools(kv, ccusage, tiny, table=True)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}")
    return out


def folder_mb(claude: Path) -> float:
    return sum(p.stat().st_size for p in claude.rglob("*.jsonl")) / 1e6


def usage_tools(kv: list[str], ccusage: list[str] | None, claude: Path, table: bool = False) -> list[Tool]:
    """`kvprobe usage` and ccusage's `daily` over one Claude Code projects folder: kvprobe reading every file
    (`--no-cache`, what a first run does) and with the rows its warm-up run kept (what a run over a folder it
    has read before does: unchanged files are not read again); `table`: the table too, beside ccusage's."""
    tools = [Tool("kvprobe usage --json --no-cache", [*kv, "usage", str(claude), "--json", "--no-cache"]),
             Tool("kvprobe usage --json (rows kept)", [*kv, "usage", str(claude), "--json"])]
    if ccusage:
        tools.append(Tool("ccusage daily --json", [*ccusage, "daily", "--json", "--offline"],
                          {"CLAUDE_CONFIG_DIR": str(claude.parent)}, versus=tools[0].name))
    if table:  # what people type: the table (stdout a pipe here, as in a script or a status line)
        tools.append(Tool("kvprobe usage (table, rows kept)", [*kv, "usage", str(claude)]))
        if ccusage:
            tools.append(Tool("ccusage daily (table)", [*ccusage, "daily", "--offline"],
                              {"CLAUDE_CONFIG_DIR": str(claude.parent)}, versus=tools[-1].name))
    return tools


def same_usage_totals(tools: list[Tool]) -> str:
    """kvprobe usage and ccusage daily agree on every token class?"""
    kv = next((t for t in tools if t.name.startswith("kvprobe usage")), None)
    cc = next((t for t in tools if t.name.startswith("ccusage")), None)
    if not kv or not cc or not kv.runs or not cc.runs or not kv.runs[-1].ok or not cc.runs[-1].ok:
        return ""
    k = json.loads(kv.runs[-1].out[kv.runs[-1].out.index("{"):])["totals"]
    c = json.loads(cc.runs[-1].out[cc.runs[-1].out.index("{"):])["totals"]
    pairs = [("fresh input", k["fresh_input_tokens"], c["inputTokens"]),
             ("cache write", k["cache_write_tokens"], c["cacheCreationTokens"]),
             ("cache read", k["cache_read_tokens"], c["cacheReadTokens"]),
             ("output", k["output_tokens"], c["outputTokens"])]
    verdict = "same token totals" if all(x == y for _, x, y in pairs) else "token totals DIFFER: " + ", ".join(
        f"{n} {x:,} vs {y:,}" for n, x, y in pairs if x != y)
    return (f"  {verdict} ({k['requests']:,} requests); USD ${k['cost_usd']:,.2f} (genai-prices) vs "
            f"${c['totalCost']:,.2f} (ccusage's LiteLLM prices)")


def print_job(title: str, tools: list[Tool]) -> None:
    base = tools[0]
    floor = next((t for t in tools if t.name == "json parse floor"), None)
    print(f"\n## {title}")
    print(f"  {'tool':36} {'wall s':>8} {'CPU s':>8} {'peak RSS MB':>12} {'wall vs kvprobe':>16}")
    for t in tools:
        if not t.runs:
            continue
        bad = "" if all(r.ok for r in t.runs) else "  (failed: " + t.runs[-1].out.strip()[-120:] + ")"
        ref = next((r for r in tools if r.name == t.versus), base)
        ratio = t.median("wall") / ref.median("wall") if ref.runs else float("nan")
        versus = f" ({t.versus})" if t.versus and ref is not base else ""
        print(f"  {t.name:36} {t.median('wall'):8.3f} {t.median('cpu'):8.3f} {t.median('rss_mb'):12.0f} "
              f"{ratio:15.2f}x{versus}{bad}")
    if floor and floor.runs and base.runs:
        print(f"  kvprobe / parse floor: {base.median('wall') / floor.median('wall'):.2f}x wall, "
              f"{base.median('cpu') / floor.median('cpu'):.2f}x CPU")
    if note := same_usage_totals(tools):
        print(note)


def cache_byte_code(folder: Path) -> None:
    """Let every Python tool measured here (kvprobe, typer, rich, the Python peers) keep its byte code, as an
    installed program does after its first run: this project's machines set PYTHONDONTWRITEBYTECODE, and uv
    installs without byte code, so each start-up otherwise recompiled every module it imported (~0.1 s of
    kvprobe's and typer's). The byte code goes to `folder` (PYTHONPYCACHEPREFIX), never into a checkout or a
    virtual environment; each job's first round is then a warm-up, not timed."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder)


def compile_kvprobe() -> None:
    """Byte-compile kvprobe's sources, as installing its wheel does (the peers are measured installed): in an
    editable checkout under PYTHONDONTWRITEBYTECODE (set on this project's machines) every run would
    otherwise recompile the modules it imports, 40-60 ms of each start-up here."""
    import compileall

    import kvprobe

    compileall.compile_dir(str(Path(kvprobe.__file__).parent), quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--baseline", type=Path, default=None,
                        help="an earlier kvprobe's sources (a folder holding kvprobe/ and providers/, e.g. from "
                             "`git archive REV kvprobe providers | tar -x -C DIR`), timed in the start-up job")
    args = parser.parse_args()
    keep = args.work is not None
    work = args.work or Path(tempfile.mkdtemp(prefix="kvprobe-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        skipped: dict[str, str] = {}
        py_bin, why = install_python_peers(work / "peers")
        if why:
            skipped["cacheeconomics, cachelint"] = why
        ccusage, why = install_ccusage(work / "peers")
        if why:
            skipped["ccusage"] = why
        cache_byte_code(work / "pycache")
        t0 = time.perf_counter()
        made = inputs(work, args.quick)
        print(f"inputs ready in {time.perf_counter() - t0:.0f} s under {work}")
        print(f"machine: {os.cpu_count()} cores; load average before: {os.getloadavg()}")
        for title, tools in jobs(made, work, py_bin, ccusage, skipped, args.baseline).items():
            if args.only and not any(o in title for o in args.only):
                continue
            for tool in tools:  # the warm-up: byte code written, files in the page cache
                measure(tool.cmd, tool.env)
            for _ in range(args.repeat):
                for tool in tools:
                    tool.runs.append(measure(tool.cmd, tool.env))
            print_job(title, tools)
        print(f"\nload average after: {os.getloadavg()}")
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
