"""What scrubbing credentials costs where every record passes: the trace reader's identity scrub (one
search of the lower-cased id, session, agent, endpoint, error and extra for a record with no credential), and
redact_text on identity strings and on a 100 KB response text.

    flock /work/bench.lock uv run python benchmarks/bench_scrub.py

Prints the reader's MB/s with the scrub and with it replaced by a no-op (the difference is its cost), and
microseconds per redact_text call.
"""
from __future__ import annotations

import sys
import tempfile
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gen_trace import generate  # noqa: E402

import kvprobe.trace.reader as reader  # noqa: E402
from kvprobe.secrets import redact_text  # noqa: E402
from kvprobe.trace import read_trace  # noqa: E402


def _read_mb_s(path: Path, size: int) -> float:
    t0 = time.perf_counter()
    for _ in read_trace(path):
        pass
    return size / 1e6 / (time.perf_counter() - t0)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        size = generate(path, 40, result_words=(5, 30))  # small records: the per-record cost shows
        _read_mb_s(path, size)  # warm the page cache and the compiled shapes
        with_scrub = max(_read_mb_s(path, size) for _ in range(3))
        real = reader.scrub_identity
        reader.scrub_identity = lambda record: record
        try:
            without = max(_read_mb_s(path, size) for _ in range(3))
        finally:
            reader.scrub_identity = real
    print(f"trace read: {with_scrub:.0f} MB/s with the identity scrub, {without:.0f} MB/s without "
          f"({(without - with_scrub) / without:+.1%} of the read)")
    for label, text in (("session id", "3f0c2a9e-8d4b-4f1a-9c7e-2b5d6a8e1f03"), ("endpoint", "/v1/messages"),
                        ("error with a key", "HTTP 401: invalid x-api-key: sk-ant-api03-" + "x1" * 46 + "AA"),
                        ("100 KB response text", "The function returns the cached prefix. " * 2500)):
        n = 2000 if len(text) < 1000 else 50
        us = timeit.timeit(lambda t=text: redact_text(t), number=n) / n * 1e6
        print(f"redact_text, {label} ({len(text):,} chars): {us:,.1f} us")


if __name__ == "__main__":
    main()
