"""`kvprobe capture` when the trace's disk fills up (issue #39 item 6). Before: a traceback per request, a torn
line that the next record was glued to (so `report` refused the whole file), "51 requests recorded" when 30
were, and exit 0. Now: only whole lines, the lost records counted and named, exit 2, the trace still valid.

The disk is a 64 KiB tmpfs where one can be mounted (root), else a file size limit (RLIMIT_FSIZE): the same
failed write(2) either way (ENOSPC or EFBIG)."""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
from kvprobe.trace import read_trace

REQUESTS = 40
DISK_BYTES = 64 * 1024
CHILD = textwrap.dedent(f"""
    import sys, warnings
    warnings.simplefilter("ignore")
    import anthropic
    client = anthropic.Anthropic(api_key="sk-ant-api03-FULLDISK-0123456789", max_retries=0)
    for i in range({REQUESTS}):
        client.messages.create(model="claude-sonnet-4-5", max_tokens=5,
                               messages=[{{"role": "user", "content": f"request {{i}} " + "x" * 2000}}])
""")


@pytest.fixture
def small_disk(tmp_path):
    """(a folder on a nearly full disk, the preexec function that makes it so)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs",
                                             str(mount)], capture_output=True).returncode == 0:
        yield mount, None
        subprocess.run(["umount", str(mount)], capture_output=True)
        return

    def limit() -> None:  # the child may write this many bytes to any file; past it write(2) fails
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (DISK_BYTES, DISK_BYTES))
    yield mount, limit


def test_a_full_disk_loses_named_records_but_never_the_trace(fake, small_disk, tmp_path, cli):
    folder, preexec = small_disk
    out, script = folder / "trace.jsonl", tmp_path / "agent.py"
    script.write_text(CHILD)
    done = subprocess.run([sys.executable, "-m", "kvprobe", "capture", "-o", str(out), "--json",
                           "--anthropic-upstream", fake.url, "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, preexec_fn=preexec)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    summary = json.loads(done.stdout)
    data = out.read_bytes()
    assert data.endswith(b"\n")  # no partial line
    records = list(read_trace(out))  # strict: a torn or glued line would raise
    assert summary["recorded"] == len(records) > 0 and summary["exit_code"] == 0
    assert summary["lost"] == REQUESTS - len(records) > 0
    assert set(summary["lost_ids"]).isdisjoint(r.id for r in records)
    assert len(fake.requests) == REQUESTS  # every request still reached the provider
    report = cli("report", out, "--json")
    assert report.exit_code == 0 and json.loads(report.stdout)["totals"]["requests"] == len(records)
    assert "could not be written" in done.stderr or "cannot write" in done.stderr
