"""`kvprobe db load` on a full disk and under SIGTERM: one clean error line (exit 2), never a table-less
`.duckdb` nor a temp file left behind, an existing database as it was, and a re-run that works.

Seen before: `TransactionException … cannot rollback - no transaction is active` (the failed COMMIT had ended
the transaction, and the ROLLBACK's refusal hid the disk's error), a 12 KB file with no tables left where the
database should be, and the same on every re-run; a load killed by SIGTERM left one too.

The disk fills two ways: RLIMIT_FSIZE in the loading process (any user, any filesystem: a write past the
limit fails with EFBIG, as a full disk fails with ENOSPC), and a real 8 MB tmpfs filled with a file, where
`mount -t tmpfs` is allowed (root), else that case is skipped.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import duckdb
import pytest

from conftest import ROOT

SAMPLE = ROOT / "traces" / "sample_session.jsonl"  # 6 requests
EXTRA = {"kvprobe": 1, "id": "one-more", "provider": "anthropic",
         "request": {"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
         "response": {"usage": {"input_tokens": 3, "output_tokens": 1}}}


def _load(folder: Path, trace: Path, *, fsize: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death, past the limit
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return subprocess.run([sys.executable, "-m", "kvprobe", "db", "load", str(trace), "--db", "k.duckdb"],
                          cwd=folder, capture_output=True, text=True, timeout=300, preexec_fn=limit)


def _load_here(folder: Path, trace: Path) -> None:
    """A load in this process (the ones that need no fault: a subprocess costs seconds of start-up)."""
    from kvprobe.db import load_traces

    load_traces(folder / "k.duckdb", [trace])


def _requests(db: Path) -> int:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT count(*) FROM requests").fetchone()[0]


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.suffix in (".duckdb", ".wal"))


def _one_clean_line(done: subprocess.CompletedProcess, state: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "cannot rollback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: k.duckdb field '--db': cannot write the database (") and line.endswith(state)


class _Tmpfs:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fill(self, leave: int) -> None:
        """Leave about `leave` bytes free."""
        free = shutil.disk_usage(self.path).free
        with open(self.path / "filler", "wb") as fh:
            fh.write(b"\0" * max(free - leave, 0))

    def empty(self) -> None:
        (self.path / "filler").unlink(missing_ok=True)


@pytest.fixture
def tmpfs(tmp_path):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("mount -t tmpfs is not allowed here (the RLIMIT_FSIZE case covers a full disk)")
    yield _Tmpfs(mount)
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_new_database_on_a_full_disk_leaves_no_file_and_a_rerun_works(tmp_path):
    shutil.copy(SAMPLE, tmp_path / "t.jsonl")
    done = _load(tmp_path, tmp_path / "t.jsonl", fsize=100_000)
    _one_clean_line(done, "; no database file was made")
    assert "File too large" in done.stderr and _left(tmp_path) == []
    _load_here(tmp_path, tmp_path / "t.jsonl")  # the disk has room again: the re-run starts afresh
    assert _requests(tmp_path / "k.duckdb") == 6


def test_an_existing_database_on_a_full_disk_is_as_it_was(tmp_path):
    shutil.copy(SAMPLE, tmp_path / "t.jsonl")
    _load_here(tmp_path, tmp_path / "t.jsonl")
    grown = tmp_path / "grown.jsonl"
    grown.write_text(SAMPLE.read_text() + json.dumps(EXTRA) + "\n")
    done = _load(tmp_path, grown, fsize=20_000)  # the commit's write-ahead log cannot be written
    _one_clean_line(done, "; it is as it was before this load")
    assert _requests(tmp_path / "k.duckdb") == 6
    _load_here(tmp_path, grown)
    assert _requests(tmp_path / "k.duckdb") == 6 + 7


def test_a_full_tmpfs(tmpfs, cli):
    """A real ENOSPC, in this process: the same clean error (the CLI's, exit 2) in both cases."""
    shutil.copy(SAMPLE, tmpfs.path / "t.jsonl")
    tmpfs.fill(leave=30_000)
    db = tmpfs.path / "k.duckdb"
    done = cli("db", "load", tmpfs.path / "t.jsonl", "--db", db)
    assert done.exit_code == 2 and "No space left on device" in done.output and "no database file was made" in done.output
    assert _left(tmpfs.path) == []
    tmpfs.empty()
    assert cli("db", "load", tmpfs.path / "t.jsonl", "--db", db).exit_code == 0
    (tmpfs.path / "grown.jsonl").write_text(SAMPLE.read_text() + json.dumps(EXTRA) + "\n")
    tmpfs.fill(leave=4_000)
    done = cli("db", "load", tmpfs.path / "grown.jsonl", "--db", db)
    assert done.exit_code == 2 and "it is as it was before this load" in done.output
    tmpfs.empty()
    assert _requests(db) == 6
    assert cli("db", "load", tmpfs.path / "grown.jsonl", "--db", db).exit_code == 0 and _requests(db) == 13


def _sigterm_mid_write(folder: Path, trace: Path, writing) -> subprocess.Popen | None:
    """Start a load, stop it (SIGSTOP) the moment `writing()` says it is writing the database, then SIGTERM
    it; None when the load finished before it could be caught."""
    proc = subprocess.Popen([sys.executable, "-m", "kvprobe", "db", "load", str(trace), "--db", "k.duckdb"],
                            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None:
        if writing():
            proc.send_signal(signal.SIGSTOP)
            if writing():  # still mid-write while frozen: the SIGTERM lands there
                proc.send_signal(signal.SIGTERM)
                proc.send_signal(signal.SIGCONT)
                proc.communicate(timeout=120)
                return proc
            proc.send_signal(signal.SIGCONT)
        time.sleep(0.001)
    proc.communicate()
    return None


def _big_trace(path: Path, n: int = 150) -> Path:
    """`n` requests of one growing conversation (enough rows that writing them takes a moment)."""
    lines, messages = [], []
    for i in range(n):
        messages = messages + [{"role": "user", "content": f"step {i}: " + "tokens " * 40}]
        lines.append(json.dumps({"kvprobe": 1, "id": f"r{i}", "provider": "anthropic", "session": "s",
                                 "started_at": f"2026-09-10T10:{i // 60:02d}:{i % 60:02d}Z",
                                 "request": {"model": "claude-sonnet-4-5", "max_tokens": 8,
                                             "system": [{"type": "text", "text": "You help. " * 300,
                                                         "cache_control": {"type": "ephemeral"}}],
                                             "messages": messages[-20:]},
                                 "response": {"usage": {"input_tokens": 10, "cache_read_input_tokens": 2000,
                                                        "cache_creation_input_tokens": 50, "output_tokens": 3}}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_sigterm_while_a_new_database_is_written_leaves_no_file(tmp_path):
    """Either no database at all or a complete one, never one without its tables."""
    trace = _big_trace(tmp_path / "big.jsonl")
    for attempt in range(5):
        folder = tmp_path / f"try{attempt}"
        folder.mkdir()

        def writing() -> bool:  # kvprobe's temp database, or (as kvprobe once did) the database itself
            return any(p.name.startswith((".k.duckdb.kvprobe-", "k.duckdb")) for p in folder.iterdir())
        proc = _sigterm_mid_write(folder, trace, writing)
        if proc is None:
            continue
        assert proc.returncode in (128 + signal.SIGTERM, -signal.SIGTERM)
        if (folder / "k.duckdb").exists():  # caught after it was put in place: complete
            assert _left(folder) == ["k.duckdb"] and _requests(folder / "k.duckdb") == 150
        else:
            assert proc.returncode == 128 + signal.SIGTERM and _left(folder) == []  # no temp file, no .wal
        _load_here(folder, trace)
        assert _requests(folder / "k.duckdb") == 150
        return
    pytest.fail("no load was caught while writing in 5 tries")


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.5, 1.0, 2.0, 3.0])
def test_sigterm_during_a_load_into_an_existing_database_keeps_it_whole(tmp_path, delay):
    """SIGTERM at some moment of the load: the database holds the old rows or all the new ones."""
    shutil.copy(SAMPLE, tmp_path / "t.jsonl")
    _load_here(tmp_path, tmp_path / "t.jsonl")
    trace = _big_trace(tmp_path / "big.jsonl")
    proc = subprocess.Popen([sys.executable, "-m", "kvprobe", "db", "load", str(trace), "--db", "k.duckdb"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err
    assert _requests(tmp_path / "k.duckdb") in (6, 156)
    _load_here(tmp_path, trace)
    assert _requests(tmp_path / "k.duckdb") == 156


def test_a_killed_loads_temp_database_is_removed_by_the_next_load(tmp_path):
    """SIGKILL cannot be caught: its temp file (named with the dead pid) goes at the next load."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".k.duckdb.kvprobe-{dead.stdout.strip()}-{uuid.uuid4().hex[:8]}.tmp"
    stale.write_bytes(b"partial")
    Path(str(stale) + ".wal").write_bytes(b"partial")
    shutil.copy(SAMPLE, tmp_path / "t.jsonl")
    _load_here(tmp_path, tmp_path / "t.jsonl")
    assert _left(tmp_path) == ["k.duckdb"] and os.path.getsize(tmp_path / "k.duckdb") > 0
