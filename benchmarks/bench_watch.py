"""`watch`: what one appended request costs once the backlog is read, against re-analysing the whole trace.

Usage: uv run python benchmarks/bench_watch.py [--mb 50]
Generates a trace (gen_trace.py), feeds all but its last session to a Watch, then appends that session's
requests one at a time and times each poll; the reference is `report` (no what-if) over the whole file,
which is what re-simulating on every new line would cost.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvprobe.report import build_report
from kvprobe.watch import Watch

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        full = Path(tmp) / "full.jsonl"
        subprocess.run([sys.executable, str(HERE / "gen_trace.py"), str(full), "--mb", str(args.mb)], check=True)
        lines = full.read_bytes().splitlines(keepends=True)
        tail = lines[-14:]  # the last session
        live = Path(tmp) / "live.jsonl"
        live.write_bytes(b"".join(lines[:-14]))
        t0 = time.perf_counter()
        build_report([full], fixes=False)  # first, so that it pays the one-off imports (prices), not the watch
        t_report = time.perf_counter() - t0
        w = Watch([live])
        t0 = time.perf_counter()
        backlog = len(w.step().events)
        t_backlog = time.perf_counter() - t0
        per_request = []
        for line in tail:
            with live.open("ab") as fh:
                fh.write(line)
            t0 = time.perf_counter()
            assert len(w.step().events) == 1
            per_request.append(time.perf_counter() - t0)
    mean = sum(per_request) / len(per_request)
    print(f"trace {args.mb:.0f} MB, backlog {backlog} requests read in {t_backlog:.2f} s")
    print(f"appended request: mean {mean * 1000:.1f} ms, max {max(per_request) * 1000:.1f} ms per poll")
    print(f"re-analysing the whole trace (report, no what-if): {t_report:.2f} s "
          f"= {t_report / mean:,.0f}x one incremental poll")


if __name__ == "__main__":
    main()
