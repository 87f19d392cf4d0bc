"""The one output convention, through the CLI: -o/--output on every writer, never an input, never an
existing file without --force, written atomically, no temp file left on any exit path."""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import ROOT

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
NOTES = ROOT / "examples" / "public_notes.txt"


@pytest.fixture
def trace(tmp_path) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_bytes(SAMPLE.read_bytes())
    return path


# command line for each writer: (name of the output file, args before -o)
WRITERS = {
    "fix": ("fixed.jsonl", lambda t: ["fix", t]),
    "baseline": ("baseline.json", lambda t: ["baseline", t]),
    "html": ("report.html", lambda t: ["html", t, "--no-fixes"]),
    "plot": ("timeline.svg", lambda t: ["plot", t]),
    "import": ("imported.jsonl", lambda t: ["import", t]),
    "lint": ("lint.sarif", lambda t: ["lint", t, "--format", "sarif", "--fail-on", "never"]),
}


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_writer_never_overwrites_its_input(cli, trace, writer):
    _, args = WRITERS[writer]
    before = trace.read_bytes()
    res = cli(*args(trace), "-o", trace)
    assert res.exit_code == 2 and "is also an input" in res.output, res.output
    res = cli(*args(trace), "-o", trace, "--force")  # not even when forced
    assert res.exit_code == 2 and "is also an input" in res.output
    assert trace.read_bytes() == before


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_writer_replaces_an_existing_file_only_with_force(cli, trace, tmp_path, writer):
    name, args = WRITERS[writer]
    target = tmp_path / name
    target.write_text("precious")
    res = cli(*args(trace), "--output", target)
    assert res.exit_code == 2 and "already exists; pass --force" in res.output and "--output" in res.output
    assert target.read_text() == "precious"
    res = cli(*args(trace), "--output", target, "--force")
    assert res.exit_code == 0, res.output
    assert target.read_text() != "precious" and target.stat().st_size > 200
    assert _leftovers(tmp_path) == []  # no temp file left behind


def test_the_old_output_spellings_still_work_but_are_not_advertised(cli, trace, tmp_path):
    res = cli("import", trace, "--out", tmp_path / "a.jsonl")
    assert res.exit_code == 0 and (tmp_path / "a.jsonl").exists()
    help_text = cli("import", "--help").output
    assert "--output" in help_text and "--out " not in help_text
    for command in ("import", "capture", "run-probe", "serve"):
        assert "--output" in cli(command, "--help").output, command
    assert "--force" in cli("fix", "--help").output


def test_import_of_a_folder_with_no_logs_writes_nothing(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("trace.jsonl").write_bytes(SAMPLE.read_bytes())
    logs = tmp_path / "logs"
    logs.mkdir()
    res = cli("import", "logs", "--force")
    assert res.exit_code == 2 and "no records found" in res.output
    (logs / "notes.txt").write_text("not a log")  # a file no importer knows (and not even .jsonl)
    (logs / "junk.jsonl").write_text("{\"hello\": 1}\n")
    res = cli("import", "logs", "--force")
    assert res.exit_code == 2 and "no records found" in res.output
    assert Path("trace.jsonl").read_bytes() == SAMPLE.read_bytes()
    assert _leftovers(tmp_path) == []


def test_capture_refuses_an_existing_trace_unless_told_to_append_or_replace(cli, trace, tmp_path):
    res = cli("capture", "-o", trace, "--", "true")
    assert res.exit_code == 2 and "--append" in res.output and "--force" in res.output
    half = tmp_path / "half.jsonl"
    half.write_bytes(SAMPLE.read_bytes()[:-20])  # cut mid-line: appending would glue two records
    res = cli("capture", "-o", half, "--append", "--", "true")
    assert res.exit_code == 2 and "whole line" in res.output


def test_capture_append_adds_to_the_trace_and_force_replaces_it(cli, trace, tmp_path):
    from kvprobe.capture.testing import FakeProvider
    from kvprobe.trace import read_trace

    script = tmp_path / "agent.py"  # one Messages call with the standard library, through the proxy
    script.write_text(textwrap.dedent("""
        import json, os, urllib.request
        body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5,
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        url = os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages"
        urllib.request.urlopen(urllib.request.Request(url, data=body, headers={"x-api-key": "k"})).read()
    """))
    before = len(SAMPLE.read_text().splitlines())
    fake = FakeProvider()
    fake.start()
    try:
        for flag, expected in (("--append", before + 1), ("--force", 1)):
            res = cli("capture", "-o", trace, flag, "--anthropic-upstream", fake.url, "--", sys.executable, script)
            assert res.exit_code == 0, res.output
            assert len(list(read_trace(trace))) == expected, flag
    finally:
        fake.stop()


def test_run_probe_and_serve_check_the_output_before_any_work(cli, tmp_path):
    existing = tmp_path / "probe.jsonl"
    existing.write_text("keep")
    res = cli("run-probe", NOTES, "--provider", "anthropic", "-o", existing)
    assert res.exit_code == 2 and "already exists" in res.output and existing.read_text() == "keep"
    res = cli("run-probe", NOTES, "-o", NOTES, "--force")
    assert res.exit_code == 2 and "is also an input" in res.output
    res = cli("serve", "--model", "no-such-model", "-o", existing)  # refused before the model would load
    assert res.exit_code == 2 and "already exists" in res.output and "loading" not in res.output


WRITE_THEN_WAIT = textwrap.dedent("""
    import sys
    from kvprobe.output import atomic_output
    with atomic_output(sys.argv[1]) as fh:
        fh.write(b"half of a new file")
        fh.flush()
        print("writing", flush=True)
        sys.stdin.readline()  # killed here
        fh.write(b" and the rest")
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path, sig):
    target = tmp_path / "out.jsonl"
    target.write_text("old content\n")
    proc = subprocess.Popen([sys.executable, "-c", WRITE_THEN_WAIT, str(target)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, cwd=ROOT, text=True)
    assert proc.stdout.readline() == "writing\n"
    temps = _leftovers(tmp_path)
    assert len(temps) == 1 and temps[0].startswith(".out.jsonl.")  # the write really was under way
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert target.read_text() == "old content\n"
    if sig == signal.SIGKILL:  # nothing runs in a killed process: the next write to the target cleans up
        from kvprobe.output import write_bytes_atomic
        write_bytes_atomic(target, b"new\n")
        assert target.read_text() == "new\n"
    assert _leftovers(tmp_path) == []


def test_a_failed_write_removes_its_temp_file_and_keeps_the_old_one(tmp_path):
    from kvprobe.output import atomic_output

    target = tmp_path / "baseline.json"
    target.write_text("{}")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as fh:
            fh.write(b"partial")
            raise RuntimeError("disk full")
    assert target.read_text() == "{}" and _leftovers(tmp_path) == []


def test_fix_writes_a_trace_that_reports(cli, trace, tmp_path):
    out = tmp_path / "fixed.jsonl"
    res = cli("fix", trace, "-o", out, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["output"] == str(out)
    assert cli("report", out, "--json").exit_code == 0
    assert _leftovers(tmp_path) == []


def _fifo_reader(fifo: Path) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as fh:  # blocks until the writer opens it
            got.append(fh.read())
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_named_pipe_is_written_in_place_never_replaced(cli, trace, tmp_path, writer):
    """`-o FIFO --force` streams into the pipe (a reader waits there); renaming a file over it left a regular
    file and a reader waiting for ever."""
    fifo = tmp_path / WRITERS[writer][0]
    os.mkfifo(fifo)
    thread, got = _fifo_reader(fifo)
    args = WRITERS[writer][1](trace)
    res = cli(*args, "-o", fifo, "--force")
    thread.join(timeout=10)
    assert res.exit_code in (0, 1), res.output  # lint exits 0 with --fail-on never; the others 0
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the pipe was replaced by a regular file"
    assert got and got[0], "nothing reached the reader"
    if writer in ("fix", "import"):
        assert got[0].count(b"\n") >= 6 and json.loads(got[0].splitlines()[0])["kvprobe"] == 1
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("writer", ["fix", "import", "html", "baseline", "lint"])
def test_a_character_device_is_written_in_place_never_replaced(cli, trace, tmp_path, writer):
    """As root, `-o /dev/null --force` would have replaced the system's /dev/null; a null device made here
    stands in for it (where this machine lets us make one)."""
    null = tmp_path / WRITERS[writer][0]
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        null.open("wb").close()
    except OSError as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    args = WRITERS[writer][1](trace)
    res = cli(*args, "-o", null)  # nothing is replaced: no --force needed
    assert res.exit_code == 0, res.output
    assert stat.S_ISCHR(os.stat(null).st_mode) and os.stat(null).st_rdev == os.makedev(1, 3)


def test_a_socket_is_refused_before_any_work(cli, trace, tmp_path):
    import socket

    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        res = cli("fix", trace, "-o", path, "--force")
    assert res.exit_code == 2 and "is a socket" in res.output and stat.S_ISSOCK(os.stat(path).st_mode)


def test_a_database_must_be_a_file(cli, trace, tmp_path):
    fifo = tmp_path / "pipe.duckdb"
    os.mkfifo(fifo)
    res = cli("db", "load", trace, "--db", fifo)
    assert res.exit_code == 2 and "a database is a file" in res.output


def test_an_input_that_is_a_named_pipe_is_named_as_one(cli, tmp_path):
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    for args in (["report", fifo], ["usage", fifo], ["import", fifo, "-o", tmp_path / "o.jsonl"],
                 ["lint", fifo], ["diff", fifo, fifo], ["db", "load", fifo, "--db", tmp_path / "k.duckdb"]):
        res = cli(*args)
        assert res.exit_code == 2, (args, res.output)
        assert "named pipe (FIFO)" in res.output and "does not exist" not in res.output, (args, res.output)
