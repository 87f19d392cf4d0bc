"""Trace loading: streaming read + validation throughput, and memory that stays flat with file size."""
from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gen_trace import generate  # noqa: E402

from kvprobe.trace import read_trace  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        size = generate(path, 200)
        base = rss_mb()
        samples = []
        t0 = time.perf_counter()
        for i, _ in enumerate(read_trace(path)):
            if i % 100 == 0:
                samples.append(rss_mb())
        elapsed = time.perf_counter() - t0
    mb = size / 1e6
    print(f"trace load: {mb:.0f} MB in {elapsed:.2f} s = {mb / elapsed:.0f} MB/s (target >= 100 MB/s)")
    first, last = samples[len(samples) // 4], samples[-1]
    print(f"  RSS before {base:.0f} MB; at 25% {first:.0f} MB; at end {last:.0f} MB "
          f"(growth after 25%: {last - first:+.0f} MB: flat means streaming)")


if __name__ == "__main__":
    main()
