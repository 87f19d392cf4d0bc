"""`usage` keeps each Claude Code transcript's rows between runs (importers.row_cache): a file unchanged since
is not read again, one that grew or was replaced is, and the answer is the one reading every file gives —
the same request in two files counted once, in the first file that holds it. The transcripts are written
here; every figure is worked out by hand below."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agent_logs import ClaudeTranscript
from kvprobe.cli.usage_data import collect, zone_of
from kvprobe.importers import ImportReport
from kvprobe.importers import row_cache


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("KVPROBE_CACHE_DIR", str(folder))
    monkeypatch.delenv(row_cache.OFF, raising=False)
    return folder


def _folder(tmp_path: Path) -> Path:
    """Session a (two requests) and session b, resumed from a: b's file copies a's second request (req_a2),
    then adds one of its own."""
    root = tmp_path / "projects" / "-home-me-shop"
    a = ClaudeTranscript("a")
    a.turn(0, "req_a1", read=0, write=1_000, fresh=10, output=5)
    a.turn(60, "req_a2", read=1_000, write=200, fresh=20, output=6)
    a.write(root / "a.jsonl")
    b = ClaudeTranscript("b")
    b.turn(60, "req_a2", read=1_000, write=200, fresh=20, output=6)  # the copy a resumed session carries
    b.turn(600, "req_b1", read=0, write=3_000, fresh=30, output=7)
    b.write(root / "b.jsonl")
    return tmp_path / "projects"


def _usage(folder: Path, keep: bool = True) -> tuple[dict, ImportReport]:
    report = ImportReport()
    summary = collect([str(folder)], report, fmt=None, price_file=None, workers=1, zone=zone_of("UTC"),
                      since=None, until=None, keep_rows=keep)
    return {**summary.to_json(), "import": report.to_json()}, report


def _sessions(data: dict) -> dict[str, int]:
    return {row["session"]: row["requests"] for row in data["by_session"]}


def test_a_second_run_reads_no_unchanged_file_and_answers_the_same(cache, tmp_path):
    folder = _folder(tmp_path)
    first, report = _usage(folder)
    assert report.kept == 0
    # req_a1, req_a2 (in a: the first file to hold it), req_b1; b's copy of req_a2 a duplicate
    assert first["totals"]["requests"] == 3 and first["import"]["duplicates"] == 1
    assert first["totals"]["fresh_input_tokens"] == 10 + 20 + 30
    assert _sessions(first) == {"a": 2, "b": 1}
    second, report = _usage(folder)
    assert report.kept == 2
    assert second == first
    unkept, report = _usage(folder, keep=False)
    assert report.kept == 0 and unkept == first


def _usage_on(folder: Path, workers: int) -> tuple[dict, ImportReport]:
    report = ImportReport()
    summary = collect([str(folder)], report, fmt=None, price_file=None, workers=workers, zone=zone_of("UTC"),
                      since=None, until=None, keep_rows=True)
    return {**summary.to_json(), "import": report.to_json()}, report


def test_read_on_two_processes_the_rows_are_kept_as_one_pack_and_kept_files_meet_those_read_again(
        cache, tmp_path, monkeypatch):
    """The files are read in units by a forked worker and this process; the rows the worker read travel back
    with its answer and the run keeps them all in one pack. Touched later, two of them are read again on two
    processes (what the cache lacks, `_read_missing`) and meet the one kept: the answer stays the one-process
    answer (3 requests; b's copy of req_a2 a duplicate)."""
    from kvprobe.importers import loading

    folder = _folder(tmp_path)
    c = ClaudeTranscript("c")
    c.turn(900, "req_c1", read=3_000, write=0, fresh=40, output=8)
    c.write(folder / "-home-me-shop" / "c.jsonl")
    alone, _ = _usage(folder, keep=False)
    assert alone["totals"]["requests"] == 4 and alone["totals"]["fresh_input_tokens"] == 10 + 20 + 30 + 40
    first, report = _usage_on(folder, workers=2)
    assert report.kept == 0 and first == alone
    assert len(list(cache.rglob("*.pack"))) == 1
    again, report = _usage_on(folder, workers=2)
    assert report.kept == 3 and again == alone  # every file's rows kept, the worker's included
    for name in ("b.jsonl", "c.jsonl"):
        os.utime(folder / "-home-me-shop" / name, ns=(10**18, 10**18))
    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES_REDUCED", 0)  # (these few bytes read on two processes)
    touched, report = _usage_on(folder, workers=2)
    assert report.kept == 1 and touched == alone
    last, report = _usage_on(folder, workers=2)
    assert report.kept == 3 and last == alone


def test_a_file_that_grew_is_read_again_and_the_others_are_not(cache, tmp_path):
    folder = _folder(tmp_path)
    _usage(folder)
    b = folder / "-home-me-shop" / "b.jsonl"
    more = ClaudeTranscript("b")
    more.turn(900, "req_b2", read=3_000, write=100, fresh=40, output=8)
    with b.open("a") as fh:  # the session goes on: lines appended
        fh.write("".join(json.dumps(line) + "\n" for line in more.lines))
    data, report = _usage(folder)
    assert report.kept == 1  # a.jsonl
    assert data["totals"]["requests"] == 4
    assert data["totals"]["fresh_input_tokens"] == 10 + 20 + 30 + 40
    assert _sessions(data) == {"a": 2, "b": 2}


def test_the_copy_counts_once_the_file_that_held_it_first_is_gone(cache, tmp_path):
    """Files are read alone and met in file order: with a.jsonl deleted, b's copy of req_a2 is the one."""
    folder = _folder(tmp_path)
    _usage(folder)
    (folder / "-home-me-shop" / "a.jsonl").unlink()
    data, report = _usage(folder)
    assert report.kept == 1  # b.jsonl, unchanged
    assert data["totals"]["requests"] == 2 and data["import"]["duplicates"] == 0
    assert _sessions(data) == {"b": 2}
    assert data["totals"]["fresh_input_tokens"] == 20 + 30


def test_a_damaged_cache_costs_the_reading_only(cache, tmp_path):
    folder = _folder(tmp_path)
    first, _ = _usage(folder)
    packs = list(cache.rglob("*.pack"))
    assert packs
    for pack in packs:
        pack.write_bytes(b"\x00not a pack")
    again, report = _usage(folder)
    assert report.kept == 0 and again == first


def test_switched_off_nothing_is_kept(cache, tmp_path, monkeypatch):
    monkeypatch.setenv(row_cache.OFF, "0")
    folder = _folder(tmp_path)
    _usage(folder)
    _, report = _usage(folder)
    assert report.kept == 0 and not list(cache.rglob("*.pack"))


def test_packs_do_not_pile_up(cache, tmp_path):
    """Each run that reads a file writes a pack; from PACKS on, the run writes what it used as one."""
    folder = _folder(tmp_path)
    b = folder / "-home-me-shop" / "b.jsonl"
    for k in range(3 * row_cache.PACKS):
        os.utime(b, ns=(10**18 + k, 10**18 + k))  # touched: read again, a new pack
        _, report = _usage(folder)
        assert len(list(cache.rglob("*.pack"))) <= row_cache.PACKS
    assert report.kept == 1


def test_the_terminal_says_what_was_not_read_again(cache, tmp_path, cli):
    folder = _folder(tmp_path)
    cli("usage", folder)
    res = cli("usage", folder)
    assert res.exit_code == 0, res.output
    assert "2 of the files unchanged since an earlier run" in " ".join(res.output.split())


def test_what_other_code_versions_and_other_folders_kept_goes_once_untouched_for_a_week(cache, tmp_path):
    folder = _folder(tmp_path)
    _usage(folder)
    [mine] = [p.parent for p in cache.rglob("*.pack")]  # usage-rows/<code>/<paths given>
    root = mine.parent.parent
    week_ago = time.time() - row_cache.STALE_S - 60
    made = []
    for other in (root / "0123456789abcdef" / "paths", root / "fedcba9876543210" / "paths",
                  mine.parent / "0123456789abcdef", mine.parent / "fedcba9876543210"):
        other.mkdir(parents=True)
        (other / "1-1.pack").write_bytes(b"kept by another version, or for other paths")
        made.append(other)
    for old in (made[0].parent, made[2]):
        os.utime(old, (week_ago, week_ago))
    (tmp_path / "projects2").mkdir()
    os.rename(folder, tmp_path / "projects2" / "projects")  # other paths given: a first pack there
    _usage(tmp_path / "projects2")
    assert not made[0].exists() and made[1].exists() and not made[2].exists() and made[3].exists()
    assert mine.exists()  # used a minute ago


def test_a_file_appended_to_while_it_is_read_is_read_again_next_run(cache, tmp_path, monkeypatch):
    """The agent writes while usage reads: the rows read are not kept under the file's later stat."""
    from kvprobe.importers import loading

    folder = _folder(tmp_path)
    b = folder / "-home-me-shop" / "b.jsonl"
    more = ClaudeTranscript("b")
    more.turn(900, "req_b2", read=3_000, write=100, fresh=40, output=8)
    real = loading._rows_of

    def read_then_append(path, *args, **kw):
        yield from real(path, *args, **kw)
        if path == b and more.lines:  # the agent appends as the reading ends
            with b.open("a") as fh:
                fh.write("".join(json.dumps(line) + "\n" for line in more.lines))
            more.lines.clear()
    monkeypatch.setattr(loading, "_rows_of", read_then_append)
    first, _ = _usage(folder)
    assert first["totals"]["requests"] == 3  # read before the append
    again, report = _usage(folder)
    assert report.kept == 1  # a.jsonl; b.jsonl read again, with its new request
    assert again["totals"]["requests"] == 4 and again["totals"]["fresh_input_tokens"] == 10 + 20 + 30 + 40


def test_a_cache_file_that_cannot_be_made_costs_the_reading_only(cache, tmp_path, monkeypatch):
    """A read-only or full cache folder: the temp file of each write cannot be made."""
    from kvprobe import output

    monkeypatch.setattr(output, "temp_name", lambda path: tmp_path / "no such folder" / "x.tmp")
    folder = _folder(tmp_path)
    first, _ = _usage(folder)
    again, report = _usage(folder)
    assert report.kept == 0 and again == first and first["totals"]["requests"] == 3
    assert not list(cache.rglob("*.pack"))


def test_a_cache_folder_that_cannot_be_written_costs_the_reading_only(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("KVPROBE_CACHE_DIR", str(blocked))
    folder = _folder(tmp_path)
    first, _ = _usage(folder)
    again, report = _usage(folder)
    assert report.kept == 0 and again == first and first["totals"]["requests"] == 3


@pytest.mark.parametrize("workers, keep", [(1, False), (2, False), (1, True), (2, True)])
def test_one_request_id_in_two_files_counts_once_however_they_are_read(cache, tmp_path, workers, keep):
    """A request id names one API call: logged under two message ids in two files (a copy rewritten), it
    counts once, in the first file, whether one process reads both, two processes read one each, or rows
    kept from an earlier run meet."""
    root = tmp_path / "projects" / "-home-me-shop"
    for name, prefix, fresh in (("a", "msg_01", 10), ("b", "msg_02", 99)):
        s = ClaudeTranscript(name, id_prefix=prefix)
        s.turn(0, "req_same", read=0, write=1_000, fresh=fresh, output=5)
        s.write(root / f"{name}.jsonl")
    report = ImportReport()
    for _ in range(2 if keep else 1):  # (kept: the second run meets the rows the first kept)
        report = ImportReport()
        summary = collect([str(tmp_path / "projects")], report, fmt=None, price_file=None, workers=workers,
                          zone=zone_of("UTC"), since=None, until=None, keep_rows=keep)
    data = summary.to_json()
    assert data["totals"]["requests"] == 1 and data["totals"]["fresh_input_tokens"] == 10
    assert report.duplicates == 1 and report.kept == (2 if keep else 0)


def test_a_pack_damaged_since_it_was_written_is_not_read(cache, tmp_path):
    """One flipped bit in a kept request id would split it from its copy in the other file: the pack's
    checksum differs, so both files are read again."""
    folder = _folder(tmp_path)
    first, _ = _usage(folder)
    [pack] = cache.rglob("*.pack")
    data = bytearray(pack.read_bytes())
    at = data.index(b"req_a2")
    data[at + 3] ^= 0x20  # req_a2 -> req\x7fa2
    pack.write_bytes(bytes(data))
    again, report = _usage(folder)
    assert report.kept == 0 and again == first and again["totals"]["requests"] == 3


def test_a_file_whose_reading_depends_on_another_is_not_kept(cache, tmp_path):
    """A subagent's `.meta.json` is read as nothing while its transcript sits beside it, as lines otherwise:
    its rows depend on another file, so it is read every run."""
    sub = tmp_path / "projects" / "-home-me-shop" / "s" / "subagents"
    for name, request in (("agent-a.jsonl", "req_A"), ("agent-b.meta.json", "req_B")):
        t = ClaudeTranscript("s")
        t.assistant(0, request, read=0, write=1_000, fresh=10, output=5)
        t.write(sub / name)
    first, _ = _usage(tmp_path / "projects")
    assert first["totals"]["requests"] == 2
    (sub / "agent-b.jsonl").write_bytes((sub / "agent-a.jsonl").read_bytes())  # b's transcript appears
    again, report = _usage(tmp_path / "projects")
    unkept, _ = _usage(tmp_path / "projects", keep=False)
    assert again == unkept and again["totals"]["requests"] == 1 and report.kept == 1  # agent-a.jsonl


def test_what_was_kept_elsewhere_goes_on_any_later_run(cache, tmp_path):
    folder = _folder(tmp_path)
    _usage(folder)
    [mine] = [p.parent for p in cache.rglob("*.pack")]
    old = mine.parent.parent / "0123456789abcdef" / "paths"
    old.mkdir(parents=True)
    (old / "1-1.pack").write_bytes(b"kept by another version")
    month_ago = time.time() - 30 * 86400
    os.utime(old.parent, (month_ago, month_ago))
    _usage(folder)  # nothing read: every file kept
    assert not old.parent.exists() and mine.exists()


def test_codex_rollouts_and_their_forks_are_kept_as_read(cache, tmp_path):
    """A Codex fork replays its parent's history in its own file (skipped, counted as replayed): read alone,
    its rows are its own turns, so rollouts are kept like transcripts (figures by hand in
    test_import_codex_forks: 6 requests, 6 replayed)."""
    from test_import_codex_forks import FORK_A, FORK_A_CALLS, FORK_B, FORK_B_CALLS, PARENT, _fork, _parent

    root = tmp_path / "sessions"
    _parent().write(root, PARENT)
    _fork(FORK_A, 100, restamp=True, spawn_only=False, own=FORK_A_CALLS, started_at=True).write(root, FORK_A)
    _fork(FORK_B, 200, restamp=False, spawn_only=True, own=FORK_B_CALLS, started_at=False).write(root, FORK_B)
    first, _ = _usage(root)
    again, report = _usage(root)
    unkept, _ = _usage(root, keep=False)
    assert report.kept == 3 and again == first == unkept
    assert first["totals"]["requests"] == 6 and first["import"]["replayed_from_parent"] == 6
    assert round(first["totals"]["cost_usd"], 4) == 0.1427
