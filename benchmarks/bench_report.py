"""`kvprobe report --json` end to end on generated agent traces: throughput and peak memory.

Targets: issue 3 — 1 GB in < 30 s with < 2 GB; team target — >= 400 MB/s and <= 200 MB on ~109 MB.
Usage: uv run python benchmarks/bench_report.py [--mb 109 1000]
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gen_trace import generate  # noqa: E402


def measure(path: Path, extra: list[str]) -> tuple[float, float]:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "kvprobe", "report", str(path), "--json", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", proc.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    h, m, s = wall.groups()  # type: ignore[union-attr]
    seconds = int(h or 0) * 3600 + int(m) * 60 + float(s)
    return seconds, int(rss.group(1)) / 1024  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, nargs="+", default=[109, 1000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for mb in args.mb:
            path = Path(tmp) / f"trace_{int(mb)}.jsonl"
            size = generate(path, mb) / 1e6
            seconds, peak = measure(path, [])
            print(f"report --json on {size:,.0f} MB: {seconds:.2f} s = {size / seconds:.0f} MB/s, "
                  f"peak RSS {peak:.0f} MB")
            path.unlink()


if __name__ == "__main__":
    main()
