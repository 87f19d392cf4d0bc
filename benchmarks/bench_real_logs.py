"""kvprobe next to ccusage on a real Claude Code log folder nobody here wrote (usage-only: no request bodies).

The generators' traces say nothing about real logs' shape (subagents, compactions, interrupts, a model
switch), so this runs on a folder you point it at — for instance the transcripts marot/spotter commits as
test fixtures (test/fixtures/transcripts/, Feb 2026), laid out as `DIR/projects/<project>/…` the way Claude
Code writes them. Nothing is copied into this repository. It prints medians of interleaved runs (`usage` reading
every file, and with the rows its warm-up run kept) and checks that
kvprobe's total cost equals ccusage's to the cent.
Usage: uv run python benchmarks/bench_real_logs.py CLAUDE_CONFIG_DIR [--runs 5] [--work DIR]
"""
from __future__ import annotations

import argparse
import os
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_peers import cache_byte_code, install_ccusage, kvprobe_cmd, measure  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config_dir", type=Path, help="a folder holding projects/<project>/*.jsonl")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--work", type=Path, default=None, help="keep ccusage's install here")
    args = parser.parse_args()
    projects = args.config_dir / "projects"
    if not projects.is_dir():
        raise SystemExit(f"{projects} is not a folder: expected CLAUDE_CONFIG_DIR/projects/<project>/*.jsonl")
    work = args.work or Path(tempfile.mkdtemp(prefix="kvprobe-real-"))
    ccusage, why = install_ccusage(work / "peers")
    cache_byte_code(work / "pycache")
    kv = kvprobe_cmd()
    env = {"CLAUDE_CONFIG_DIR": str(args.config_dir)}
    # `usage` reading every file (a first run) and with the rows its warm-up run kept (a later run)
    tools = {"kvprobe usage --json": ([*kv, "usage", str(projects), "--json", "--no-cache"], None),
             "kvprobe usage, rows kept": ([*kv, "usage", str(projects), "--json"], None),
             "kvprobe report --json": ([*kv, "report", str(projects), "--json"], None)}
    if ccusage:
        tools["ccusage daily --json"] = ([*ccusage, "daily", "--json"], env)
    else:
        print(f"ccusage skipped: {why}")
    runs: dict[str, list] = {name: [] for name in tools}
    for cmd, extra in tools.values():  # the warm-up: byte code written, files in the page cache
        measure(cmd, extra)
    for _ in range(args.runs):  # interleaved: load changes hit every tool alike
        for name, (cmd, extra) in tools.items():
            runs[name].append(measure(cmd, extra))
    files = sum(1 for _ in projects.rglob("*.jsonl"))
    size = sum(p.stat().st_size for p in projects.rglob("*.jsonl")) / 1e6
    print(f"## {projects}: {files} files, {size:,.1f} MB")
    usage_wall = statistics.median(r.wall for r in runs["kvprobe usage --json"])
    for name, found in runs.items():
        wall = statistics.median(r.wall for r in found)
        cpu = statistics.median(r.cpu for r in found)
        rss = statistics.median(r.rss_mb for r in found)
        bad = "" if all(r.ok for r in found) else "  (failed)"
        print(f"  {name:24} wall {wall:6.3f} s ({wall / usage_wall:4.2f}x kvprobe usage)  CPU {cpu:6.3f} s  "
              f"peak RSS {rss:5.0f} MB{bad}")
    ours = json.loads(subprocess.run(tools["kvprobe usage --json"][0], capture_output=True, text=True,
                                     check=True).stdout)["totals"]
    print(f"  kvprobe: {ours['requests']:,} requests, ${ours['cost_usd']:.6f}")
    if ccusage:
        theirs = json.loads(subprocess.run([*ccusage, "daily", "--json"], capture_output=True, text=True,
                                           env={**os.environ, **env}, check=True).stdout)["totals"]
        same = round(ours["cost_usd"], 2) == round(theirs["totalCost"], 2)
        print(f"  ccusage: ${theirs['totalCost']:.6f} — {'the same total' if same else 'TOTALS DIFFER'}")


if __name__ == "__main__":
    main()
