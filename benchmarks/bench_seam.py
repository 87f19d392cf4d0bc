"""The executor seam against the machinery it replaces, and on a local Dask cluster: `report --json --what-if`
on gen_fleet fleets, interleaved runs, medians of wall, CPU (this process's children, pool workers included)
and peak RSS.

Tools: "seam" is this checkout (policy sets priced on kvprobe.run's local pool); "before" is another checkout
given with --before (e.g. `git archive <commit> kvprobe providers | tar -x -C DIR`), run with the same
interpreter; "one process" is this checkout with processes off ($KVPROBE_FORK_MIN_REQUESTS); "cluster N" starts
a scheduler and N workers on 127.0.0.1 (`dask scheduler` / `dask worker`, one thread each) and passes
--cluster. Every tool's output is compared with the first's, byte for byte.
Usage: uv run --extra cluster python benchmarks/bench_seam.py [--requests 1000 3000] [--runs 3]
       [--before DIR] [--cluster 1 2] [--work DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_peers import measure  # noqa: E402
from gen_fleet import generate  # noqa: E402

ONE_PROCESS = {"KVPROBE_FORK_MIN_REQUESTS": str(10**12)}


def start_cluster(workers: int, folder: Path) -> tuple[str, list[subprocess.Popen]]:
    dask = Path(sys.executable).with_name("dask")
    info = folder / f"scheduler-{workers}.json"
    info.unlink(missing_ok=True)
    procs = [subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(info)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    while not info.exists():
        time.sleep(0.1)
    time.sleep(0.2)  # written, then filled
    procs += [subprocess.Popen([str(dask), "worker", "--scheduler-file", str(info), "--nthreads", "1", "--no-nanny",
                                "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for _ in range(workers)]
    address = json.loads(info.read_text())["address"]
    from distributed import Client

    with Client(address) as client:
        client.wait_for_workers(workers, timeout=120)
    return address, procs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="a checkout of the code to compare with")
    parser.add_argument("--cluster", type=int, nargs="*", default=[], help="local Dask clusters of N workers")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kvprobe-seam-"))
    work.mkdir(parents=True, exist_ok=True)
    kv = [sys.executable, "-m", "kvprobe", "report"]
    clusters, procs = {}, []
    try:
        for n in args.cluster:
            clusters[n], started = start_cluster(n, work)
            procs += started
        tools: dict[str, tuple[list[str], dict[str, str]]] = {"seam": ([], {}), "one process": ([], ONE_PROCESS)}
        if args.before:
            tools["before"] = ([], {"PYTHONPATH": str(args.before.resolve())})
        for n, address in clusters.items():
            tools[f"cluster {n}"] = (["--cluster", address], {})
        paths = {n: work / f"fleet_{n}.jsonl" for n in args.requests}
        for n, path in paths.items():
            if not path.exists():
                generate(path, n)
        runs: dict[tuple[int, str], list] = {(n, t): [] for n in paths for t in tools}
        digests: dict[tuple[int, str], set[str]] = {key: set() for key in runs}
        print(f"machine: {os.cpu_count()} cores; load average before: {os.getloadavg()}")
        for _ in range(args.runs):
            for n, path in paths.items():
                for tool, (extra, env) in tools.items():
                    out = work / "out.json"
                    cmd = ["sh", "-c", '"$@" > "$0"', str(out), *kv, str(path), "--json", "--what-if", *extra]
                    # from the work folder: a checkout's own kvprobe/ would come before --before's
                    runs[(n, tool)].append(_measure_in(work, cmd, env))
                    digests[(n, tool)].add(hashlib.sha256(out.read_bytes()).hexdigest())
        print(f"load average after: {os.getloadavg()}")
        for n in paths:
            print(f"\n## fleet of {n:,} main-agent requests ({paths[n].stat().st_size / 1e6:,.0f} MB)")
            base = statistics.median(r.wall for r in runs[(n, "seam")])
            first = digests[(n, "seam")]
            for tool in tools:
                found = runs[(n, tool)]
                wall, cpu = statistics.median(r.wall for r in found), statistics.median(r.cpu for r in found)
                rss = statistics.median(r.rss_mb for r in found)
                same = "same output" if digests[(n, tool)] == first and len(first) == 1 else "OUTPUT DIFFERS"
                ok = "" if all(r.ok for r in found) else f"  (failed: {found[-1].out.strip()[-200:]})"
                print(f"  {tool:12} wall {wall:6.2f} s ({wall / base:4.2f}x seam)  CPU {cpu:6.2f} s  "
                      f"peak RSS {rss:5.0f} MB  {same}{ok}")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


def _measure_in(folder: Path, cmd: list[str], env: dict[str, str]):
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return measure(cmd, env)
    finally:
        os.chdir(cwd)


if __name__ == "__main__":
    main()
