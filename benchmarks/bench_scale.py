"""`kvprobe report --json` with fixes on (the default) on gen_fleet fleets of 3k, 30k, 300k and 1M requests:
wall time, CPU (user + system of every process), peak memory of all its processes together, per request.

Memory is sampled every 50 ms over the process and every descendant (the parse helper, the forked what-if
children): the peak of their summed RSS (pages a fork shares are counted in each process, so this is an upper
bound) and of their summed PSS (each shared page split between the processes that map it: what they take
from the machine together). Peak RSS of the largest process (getrusage) is given beside them.

The fleets are generated into --work (gen_fleet: 38 KB a request, so 1M requests is ~38 GB of disk) and kept
there for the next run; nothing is committed. A size whose fleet cannot be written (disk), or whose run does
not finish within --timeout, is reported as not run, with the reason.
Usage: uv run python benchmarks/bench_scale.py --work DIR [--requests 3000 30000 300000 1000000]
       [--timeout 3600] [--no-fixes-too]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_peers import compile_kvprobe, kvprobe_cmd  # noqa: E402
from gen_fleet import generate  # noqa: E402

BYTES_PER_REQUEST = 38_500  # gen_fleet's output, for the disk check before generating
PAGE = os.sysconf("SC_PAGE_SIZE")
SAMPLE_S = 0.05
# The sampler's own time, at most this share of a core: reading smaps_rollup walks every page table of each
# process, ~10 ms per GB resident; every 0.05 s at a million requests (7 GB) it kept two thirds of the other
# core busy in the kernel (535 s over a 770 s run) beside the run it measured. A peak at that size lasts
# seconds (a stage), so a sample every few tenths of a second still finds it.
SAMPLER_SHARE = 0.1


@dataclass
class Run:
    wall: float
    cpu: float
    rss_sum_mb: float  # peak of the summed RSS of the process tree
    pss_sum_mb: float  # peak of the summed PSS of the process tree
    rss_max_mb: float  # peak RSS of the largest single process (getrusage of the waited children)
    processes: int  # the most processes alive at once
    ok: bool
    tail: str


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:  # ended between two reads
            continue
    return out


def _memory(pids: list[int]) -> tuple[int, int]:
    """Summed RSS and PSS in bytes."""
    rss = pss = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
        except OSError:
            continue
    return rss, pss


def measure(cmd: list[str], timeout: float) -> Run:
    start = time.perf_counter()
    peak_rss = peak_pss = most = 0
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout:
                for p in reversed(_descendants(proc.pid)):  # this run's processes only, children first
                    try:
                        os.kill(p, 9)
                    except OSError:
                        pass
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            sampled = time.perf_counter()
            pids = _descendants(proc.pid)
            rss, pss = _memory(pids)
            peak_rss, peak_pss, most = max(peak_rss, rss), max(peak_pss, pss), max(most, len(pids))
            took = time.perf_counter() - sampled
            time.sleep(max(SAMPLE_S, took / SAMPLER_SHARE - took))
        wall = time.perf_counter() - start
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - 2000))  # the end only: a 1M-request report's JSON is gigabytes
        tail = out.read().decode("utf-8", "replace")
    code = os.waitstatus_to_exitcode(status)
    # CPU of the process and of every descendant it waited for (the helper, the forked children)
    return Run(wall, usage.ru_utime + usage.ru_stime, peak_rss / 1e6, peak_pss / 1e6, usage.ru_maxrss / 1024,
               most, code == 0, tail)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, default=None, help="where the fleets are generated and kept")
    parser.add_argument("--requests", type=int, nargs="+", default=[3000, 30000, 300000, 1000000])
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds one run may take")
    parser.add_argument("--no-fixes-too", action="store_true", help="also run --no-fixes (the what-if's factor)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kvprobe-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    compile_kvprobe()
    kv = kvprobe_cmd()
    print(f"machine: {os.cpu_count()} cores, {os.sysconf('SC_PHYS_PAGES') * PAGE / 2**30:.0f} GiB; "
          f"load average before: {os.getloadavg()}")
    results: dict[int, dict[str, Run]] = {}
    skipped: dict[int, str] = {}
    for n in args.requests:
        path = work / f"fleet_{n}.jsonl"
        if not path.exists():
            free = shutil.disk_usage(work).free
            if free < 1.2 * BYTES_PER_REQUEST * n:
                skipped[n] = f"not run: its fleet needs ~{BYTES_PER_REQUEST * n / 1e9:.0f} GB, {free / 1e9:.0f} GB free"
                continue
            made = time.perf_counter()
            generate(path, n)
            print(f"generated {path.name} in {time.perf_counter() - made:.0f} s", flush=True)
        modes = {"fixes": [*kv, "report", str(path), "--json"]}
        if args.no_fixes_too:
            modes["no fixes"] = [*kv, "report", str(path), "--json", "--no-fixes"]
        results[n] = {}
        for mode, cmd in modes.items():
            run = measure(cmd, args.timeout)
            results[n][mode] = run
            print(f"{n:>9,} requests, {mode}: wall {run.wall:.1f} s, CPU {run.cpu:.1f} s, "
                  f"peak PSS {run.pss_sum_mb:,.0f} MB, RSS {run.rss_sum_mb:,.0f} MB (all processes), "
                  f"largest {run.rss_max_mb:,.0f} MB, {run.processes} processes at most" + ("" if run.ok else f"  FAILED: {run.tail[-300:]}"),
                  flush=True)
            if not run.ok:
                skipped.setdefault(n, f"not finished: {run.tail.strip()[-200:]}")
    print("\n| requests (MB) | wall | CPU | CPU per request | peak PSS, all processes | peak RSS, all processes "
          "| largest process | PSS per request | fixes / no fixes (wall) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, runs in results.items():
        run = runs["fixes"]
        if not run.ok:
            continue
        lines = sum(1 for _ in (work / f"fleet_{n}.jsonl").open("rb"))
        mb = (work / f"fleet_{n}.jsonl").stat().st_size / 1e6
        ratio = f"{run.wall / runs['no fixes'].wall:.2f}x" if "no fixes" in runs and runs["no fixes"].ok else "-"
        print(f"| {lines:,} ({mb:,.0f}) | {run.wall:.1f} s | {run.cpu:.1f} s | {1000 * run.cpu / lines:.2f} ms "
              f"| {run.pss_sum_mb:,.0f} MB | {run.rss_sum_mb:,.0f} MB | {run.rss_max_mb:,.0f} MB "
              f"| {run.pss_sum_mb * 1e6 / lines / 1e3:.1f} KB | {ratio} |")
    for n, why in skipped.items():
        print(f"{n:,} requests: {why}")
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
