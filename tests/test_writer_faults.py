"""The trace writer on a full disk: a record is appended whole or not at all, so the trace stays valid.

Seen before: `capture` and `serve -o` on a full disk left a torn line, the next record was glued to it and
`report` refused the whole file. Here the disk fills through RLIMIT_FSIZE in a child process (a write past
the limit fails with EFBIG, after a short write of what fits: the torn line a full disk makes).
"""
from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys

from kvprobe.trace import read_trace

CHILD = r"""
import json, sys
from kvprobe.trace import TraceWriter
from kvprobe.trace.record import TraceRecord

written, lost = 0, 0
with TraceWriter(sys.argv[1], replace=True) as w:
    for i in range(40):
        rec = TraceRecord(id=f"r{i}", provider="anthropic", started_at=1757498400.0 + i,
                          request={"model": "claude-sonnet-4-5", "max_tokens": 8,
                                   "messages": [{"role": "user", "content": "x" * 300}]},
                          response={"usage": {"input_tokens": 90, "output_tokens": 1}})
        try:
            w.append(rec)
            written += 1
        except OSError as exc:
            lost += 1
            err = exc.strerror
print(json.dumps({"written": written, "lost": lost, "error": err}))
"""


def _limited(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_never_leaves_a_torn_line(tmp_path):
    trace = tmp_path / "t.jsonl"
    done = subprocess.run([sys.executable, "-c", CHILD, str(trace)], capture_output=True, text=True, timeout=120,
                          preexec_fn=_limited(5_000))
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert counts["error"] == "File too large" and counts["written"] + counts["lost"] == 40 and counts["lost"]
    data = trace.read_bytes()
    assert data.endswith(b"\n") and len(data) <= 5_000
    records = list(read_trace(trace))  # strict: a torn line would be an error here
    assert [r.id for r in records] == [f"r{i}" for i in range(counts["written"])]


def test_appending_into_a_pipe_works(tmp_path):
    """`capture -o /dev/stdout | …` and a FIFO: a pipe cannot seek (lseek is ESPIPE), so where a line
    begins is read with fstat, which a pipe answers; every line arrives."""
    import os
    import threading

    from kvprobe.trace import TraceWriter

    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    with TraceWriter(fifo) as w:
        w.append_line(b'{"a": 1}\n')
        w.append_line(b'{"b": 2}\n')
    reader.join(10)
    assert got == [b'{"a": 1}\n{"b": 2}\n']
