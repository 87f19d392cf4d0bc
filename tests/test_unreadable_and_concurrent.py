"""An unreadable sub-folder is counted and named like an unreadable file (it was skipped silently, while an
unreadable file aborted the whole read); two `db load`s at once keep both traces (the trace id is chosen
inside the write transaction; one of two loads of traces sharing a first line was lost 7 runs in 8).

Root reads every folder, so the denial is made where the operating system gives it: os.scandir (what
os.walk lists a folder with) and opening the file raise PermissionError for the paths chosen here.
"""
from __future__ import annotations

import builtins
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from conftest import ROOT

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
LINES = SAMPLE.read_text().splitlines(keepends=True)


def _deny(monkeypatch, *denied: Path) -> None:
    denied_paths = {str(p) for p in denied}
    real_scandir, real_open, real_io_open = os.scandir, builtins.open, io.open

    def scandir(path="."):
        if str(path) in denied_paths:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    def opener(real):
        def open_(file, *args, **kwargs):
            if str(file) in denied_paths:
                raise PermissionError(13, "Permission denied", str(file))
            return real(file, *args, **kwargs)
        return open_
    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(builtins, "open", opener(real_open))
    monkeypatch.setattr(io, "open", opener(real_io_open))


@pytest.fixture
def logs(tmp_path) -> Path:
    root = tmp_path / "logs"
    for name in ("a", "locked", "b"):
        (root / name).mkdir(parents=True)
    (root / "a" / "one.jsonl").write_text("".join(LINES[:3]))
    (root / "locked" / "two.jsonl").write_text("".join(LINES[3:]))
    (root / "b" / "three.jsonl").write_text("".join(LINES[3:]))
    return root


@pytest.mark.parametrize("what", ["folder", "file"])
def test_an_unreadable_part_of_a_folder_is_counted_and_named(cli, logs, monkeypatch, what):
    denied = logs / "locked" if what == "folder" else logs / "b" / "three.jsonl"
    _deny(monkeypatch, denied)
    res = cli("usage", logs, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    reason = f"{what} cannot be read (Permission denied)"
    assert data["import"]["skipped_reasons"] == {reason: 1}
    assert any(s["path"] == str(denied) and s["skipped"] == 1 for s in data["import"]["sources"])
    assert data["totals"]["requests"] == 6  # the other files: 3 + 3 requests
    human = cli("import", logs, "-o", logs.parent / "t.jsonl")
    assert human.exit_code == 0 and f"skipped 1: {reason}" in human.output


def test_an_unreadable_file_named_on_the_command_line_is_an_error(cli, logs, monkeypatch):
    denied = logs / "a" / "one.jsonl"
    _deny(monkeypatch, denied)
    res = cli("usage", denied)
    assert res.exit_code == 2 and str(denied) in res.output and "Permission denied" in res.output


def _trace(path: Path, rest: list[str]) -> Path:
    path.write_text(LINES[0] + "".join(rest))  # the same first line: the same provisional trace id
    return path


def test_a_load_committed_meanwhile_is_never_overwritten(tmp_path, monkeypatch):
    """Load A reads the database, then analyses; load B commits in between (another process); A then
    writes. A's id must be chosen against what B wrote, inside A's own transaction."""
    from kvprobe.db import store

    db = tmp_path / "k.duckdb"
    a = _trace(tmp_path / "a.jsonl", LINES[1:3])
    b = _trace(tmp_path / "b.jsonl", LINES[3:6])
    real_analyse = store.analyse
    state = {"b_loaded": False}

    def analyse_while_b_loads(tf, prices=None, fixes=None):
        result = real_analyse(tf, prices, fixes)
        if tf.path == a.resolve() and not state["b_loaded"]:
            state["b_loaded"] = True
            store.load_traces(db, [b], fixes=False)  # B runs to its commit while A is analysing
        return result
    monkeypatch.setattr(store, "analyse", analyse_while_b_loads)
    (result,) = store.load_traces(db, [a], fixes=False)
    assert state["b_loaded"] and result.status == "loaded"
    with duckdb.connect(str(db), read_only=True) as con:
        traces = dict(con.execute("SELECT path, records FROM traces").fetchall())
        requests = con.execute("SELECT trace_id, count(*) FROM requests GROUP BY 1").fetchall()
    assert traces == {str(a.resolve()): 3, str(b.resolve()): 4}
    assert sorted(n for _, n in requests) == [3, 4] and len({t for t, _ in requests}) == 2


@pytest.mark.slow
@pytest.mark.parametrize("run", range(8))
def test_two_processes_loading_at_once_keep_both(tmp_path, run):
    db = tmp_path / "k.duckdb"
    a = _trace(tmp_path / "a.jsonl", LINES[1:3])
    b = _trace(tmp_path / "b.jsonl", LINES[3:6])
    procs = [subprocess.Popen([sys.executable, "-m", "kvprobe", "db", "load", str(t), "--db", str(db), "--no-fixes"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for t in (a, b)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM traces").fetchone()[0] == 2
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 7
