"""The what-if's pricing stage alone, in one process: each policy priced alone (`evaluate._price_each`) on the
same pricer, by this checkout's executor seam (a local pool, the caller taking units from the end), by another
checkout's `whatif/parallel.py` (--before: the forked child and its one-byte pipe queue), and in this process
only. Interleaved rounds, medians of wall and of CPU (this process and its children); the summaries of every
tool are checked equal.
Usage: uv run python benchmarks/bench_pricing_stage.py FLEET.jsonl --before DIR [--rounds 7]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import sys
import time
from pathlib import Path

from kvprobe import forked
from kvprobe.report import build_report
from kvprobe.whatif import evaluate


def _load_before(folder: Path):
    spec = importlib.util.spec_from_file_location("before_parallel", folder / "kvprobe" / "whatif" / "parallel.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("fleet", type=Path)
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    caught = {}
    real_each = evaluate._price_each

    def catch(pricer, proposed, required):
        caught.update(pricer=pricer, proposed=proposed, required=required)
        return real_each(pricer, proposed, required)
    evaluate._price_each = catch
    build_report([args.fleet], fixes=True)
    evaluate._price_each = real_each
    pricer, proposed, required = caught["pricer"], caught["proposed"], caught["required"]
    before, seam = _load_before(args.before), evaluate.price_sets
    tools = {"seam (pool)": seam, "before (fork + queue)": before.price_sets, "one process": seam}
    times: dict[str, list[tuple[float, float]]] = {t: [] for t in tools}
    answers: dict[str, object] = {}
    print(f"{len(pricer.base_sks):,} requests, {len(proposed)} policies; load before {os.getloadavg()}")
    for _ in range(args.rounds):
        for name, fn in tools.items():
            evaluate.price_sets = fn
            forked.MIN_REQUESTS = 10**12 if name == "one process" else 1_000
            pricer.kept.clear()
            wall, cpu = time.perf_counter(), _cpu()
            out = real_each(pricer, proposed, required)
            times[name].append((time.perf_counter() - wall, _cpu() - cpu))
            answers.setdefault(name, repr(sorted((k, v.saving_ie, v.saving_usd) for k, v in
                                                 ((proposed.index(p), out[id(p)]) for p in proposed))))
    evaluate.price_sets, forked.MIN_REQUESTS = seam, 1_000
    print(f"load after {os.getloadavg()}")
    base = statistics.median(w for w, _ in times["seam (pool)"])
    for name, runs in times.items():
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        same = "same summaries" if answers[name] == answers["seam (pool)"] else "SUMMARIES DIFFER"
        print(f"  {name:22} wall {wall:6.3f} s ({wall / base:4.2f}x seam)  CPU {cpu:6.3f} s  {same}")


if __name__ == "__main__":
    sys.exit(main())
