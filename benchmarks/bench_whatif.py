"""`report` with and without what-if fixes on fleets of 300 / 3,000 / 30,000 requests, and cacheeconomics on
the same files: time per request, peak memory, ratios in one interleaved run. "fixes, one process" is the same
run with the what-if kept off the second core ($KVPROBE_FORK_MIN_REQUESTS): what the fork saves.

The fleets come from benchmarks/gen_fleet.py: sessions of one agent product sharing 12 tools and a system
prompt, each with the breakers teams hit (a volatile clock inside the system line, a 6-7 minute pause, a
tool_choice flip, a tool inserted mid-list in every third session, three concurrent subagents in every fourth),
usage from the generator's own cache model. Targets (issue 28): fixes within 4x of --no-fixes at 3,000 requests
and faster than cacheeconomics there; time per request flat (within 1.5x) from 300 to 30,000; peak RSS <= 250 MB
at 3,000.
Usage: uv run python benchmarks/bench_whatif.py [--requests 300 3000 30000] [--runs 3] [--work DIR]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_peers import compile_kvprobe, install_python_peers, kvprobe_cmd, measure  # noqa: E402
from gen_fleet import generate  # noqa: E402

HMAC = {"CACHEECONOMICS_HMAC_KEY": "kvprobe-benchmark-key-0123456789abcdef"}
ONE_PROCESS = {"KVPROBE_FORK_MIN_REQUESTS": str(10**12)}  # the what-if without its second core (kvprobe.forked)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, nargs="+", default=[300, 3000, 30000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None, help="keep the fleets and the peers here")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kvprobe-whatif-"))
    work.mkdir(parents=True, exist_ok=True)
    peers, why = install_python_peers(work / "peers")
    if why:
        print(f"cacheeconomics skipped: {why}")
    compile_kvprobe()
    kv = kvprobe_cmd()
    paths = {n: work / f"fleet_{n}.jsonl" for n in args.requests}
    for n, path in paths.items():
        if not path.exists():
            generate(path, n)
    tools = {}
    for n, path in paths.items():
        tools[(n, "fixes")] = [*kv, "report", str(path), "--json", "--what-if"]
        tools[(n, "fixes, one process")] = tools[(n, "fixes")]  # run with ONE_PROCESS: no forked what-if
        tools[(n, "no fixes")] = [*kv, "report", str(path), "--json", "--no-fixes"]
        if peers:
            tools[(n, "cacheeconomics")] = [str(peers / "cacheeconomics"), "analyze", str(path), "--from", "bodies",
                                            "--format", "json"]
    runs: dict[tuple, list] = {key: [] for key in tools}
    print(f"machine: {os.cpu_count()} cores; load average before: {os.getloadavg()}")
    for _ in range(args.runs):  # interleaved: load changes hit every size and tool alike
        for key, cmd in tools.items():
            env = HMAC if key[1] == "cacheeconomics" else ONE_PROCESS if key[1] == "fixes, one process" else None
            runs[key].append(measure(cmd, env))
    first = args.requests[0]
    per_first = statistics.median(r.cpu for r in runs[(first, "fixes")]) / first
    for n, path in paths.items():
        requests = sum(1 for _ in path.open("rb"))
        mb = path.stat().st_size / 1e6
        print(f"\n## fleet of {n:,} main-agent requests ({requests:,} with subagents, {mb:,.0f} MB)")
        base = statistics.median(r.wall for r in runs[(n, "fixes")])
        for tool in ("fixes", "fixes, one process", "no fixes", "cacheeconomics"):
            found = runs.get((n, tool))
            if not found:
                continue
            wall, cpu = statistics.median(r.wall for r in found), statistics.median(r.cpu for r in found)
            rss = statistics.median(r.rss_mb for r in found)
            bad = "" if all(r.ok for r in found) else f"  (failed: {found[-1].out.strip()[-120:]})"
            name = f"kvprobe report ({tool})" if tool != "cacheeconomics" else "cacheeconomics analyze"
            print(f"  {name:37} wall {wall:7.2f} s  CPU {cpu:7.2f} s  peak RSS {rss:6.0f} MB  "
                  f"{wall / base:5.2f}x the fixes run{bad}")
        cpu = statistics.median(r.cpu for r in runs[(n, "fixes")])
        print(f"  fixes: {1000 * cpu / n:.2f} ms CPU per request ({cpu / n / per_first:.2f}x the {first}-request "
              "rate); "
              f"fixes / no fixes {base / statistics.median(r.wall for r in runs[(n, 'no fixes')]):.2f}x")
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
