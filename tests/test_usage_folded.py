"""`usage` read by several processes, each child summing its own rows (`load_any`'s `fold`): the sums are what
one process makes, duplicates within a child's run and across runs included, and subagent calls known only
from progress lines. The transcripts are written here; every figure is worked out by hand below."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.importers import loading

SONNET = "claude-sonnet-4-5"
PAD = "x" * 6000  # makes s1 the larger part of the bytes: it alone is this process's run, s2-s4 the child's


def _cc(kind: str, ts: str, uuid: str, parent: str | None = None, **more) -> dict:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/home/me/web",
            "sessionId": "s1", "version": "2.0.14", "type": kind, "uuid": uuid, "timestamp": ts, **more}


def _assistant(ts: str, uuid: str, parent: str, req: int, fresh: int, read: int, out: int) -> dict:
    message = {"id": f"msg_0{req}", "type": "message", "role": "assistant", "model": SONNET,
               "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
               "usage": {"input_tokens": fresh, "cache_creation_input_tokens": 0, "cache_read_input_tokens": read,
                         "output_tokens": out}}
    return _cc("assistant", ts, uuid, parent, requestId=f"req_{req}", message=message)


def _progress(ts: str, uuid: str, nested: dict) -> dict:
    return _cc("progress", ts, uuid, "u1", data={"type": "agent_progress", "agentId": "x1", "message": nested})


def _write(path: Path, lines: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


# requests (fresh input, cache read, output): 1 (10, 1000, 5), 2 (20, 2000, 6), 3 (30, 3000, 7),
# 4 (40, 4000, 8), 5 (50, 5000, 9)
R = {1: (10, 1000, 5), 2: (20, 2000, 6), 3: (30, 3000, 7), 4: (40, 4000, 8), 5: (50, 5000, 9)}


def _logs(root: Path, across: bool) -> Path:
    """s1 (this process): requests 1, 2. s2: request 3 (and request 2 again when `across`: a resumed session's
    copy of an earlier run's request). s3: request 3 again (a duplicate inside the child's run, which its reader
    finds) and 4. s4: a
    progress line with request 5 (no transcript of its own: counted from there) and one with request 1 (the
    transcript has it: dropped)."""
    project = root / "projects" / "-home-me-web"
    user = {"role": "user", "content": PAD}
    _write(project / "s1.jsonl", [_cc("user", "2026-09-07T10:00:00.000Z", "u1", message=user),
                                  _assistant("2026-09-07T10:00:02.000Z", "a1", "u1", 1, *R[1]),
                                  _assistant("2026-09-07T10:00:04.000Z", "a2", "a1", 2, *R[2])])
    s2 = [_assistant("2026-09-07T11:00:02.000Z", "b3", "b0", 3, *R[3])]
    if across:
        s2.insert(0, _assistant("2026-09-07T10:00:04.000Z", "a2", "a1", 2, *R[2]))
    _write(project / "s2.jsonl", s2)
    _write(project / "s3.jsonl", [_assistant("2026-09-07T11:00:02.000Z", "b3", "b0", 3, *R[3]),
                                  _assistant("2026-09-08T09:00:02.000Z", "c4", "c0", 4, *R[4])])
    nested = {n: {"type": "assistant", "timestamp": ts, "requestId": f"req_{n}", "uuid": f"n{n}",
                  "message": _assistant(ts, f"n{n}", "u1", n, *R[n])["message"]}
              for n, ts in ((5, "2026-09-08T12:00:00.000Z"), (1, "2026-09-07T10:00:02.000Z"))}
    _write(project / "s4.jsonl", [_progress("2026-09-08T12:00:01.000Z", "p5", nested[5]),
                                  _progress("2026-09-07T10:00:03.000Z", "p1", nested[1])])
    return root / "projects"


def _usage(cli, folder: Path, workers: str) -> dict:
    res = cli("usage", folder, "--json", "--workers", workers, "--no-cache")  # (read: no rows kept from before)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("across", [False, True], ids=["sum-travels", "rows-travel"])
def test_a_child_s_sum_is_what_one_process_adds_up(cli, tmp_path, monkeypatch, across):
    folder = _logs(tmp_path, across)
    taken = []
    real = loading._take_folded
    monkeypatch.setattr(loading, "_take_folded", lambda *a: taken.append(a[0]) or real(*a))
    one = _usage(cli, folder, "1")
    totals = one["totals"]
    assert totals["requests"] == 5 and one["import"]["from_agent_progress"] == 1
    # request 3's copy and the progress line of request 1; request 2's copy too when `across`
    assert one["import"]["duplicates"] == (3 if across else 2)
    assert totals["fresh_input_tokens"] == 10 + 20 + 30 + 40 + 50
    assert totals["cache_read_tokens"] == 1000 + 2000 + 3000 + 4000 + 5000
    assert totals["output_tokens"] == 5 + 6 + 7 + 8 + 9
    assert {r["day"]: r["requests"] for r in one["by_day"]} == {"2026-09-07": 3, "2026-09-08": 2}
    for workers in ("2", "3"):
        assert _usage(cli, folder, workers) == one, workers
    # each unit's sum stood in for its rows, unless one of them was a request of an earlier unit: s1 is a
    # unit alone (the larger part of the bytes), whose request 2 s2 repeats when `across`
    summed = {Path(s.path).name for f in taken for s in f.stats}
    assert "s1.jsonl" in summed
    assert ({"s2.jsonl", "s3.jsonl"} <= summed) is not across
    assert "s2.jsonl" not in summed or not across


def test_the_units_are_contiguous_runs_of_about_equal_size():
    """A parallel read's units: runs of files in order, of about equal bytes; as many as UNITS_PER_PROCESS
    per process where there are files enough, none under UNIT_BYTES where the files allow."""
    files = [(Path(f"/nonexistent/{k}"), "claude_code") for k in range(10)]
    sizes = {f"/nonexistent/{k}": size for k, size in enumerate([100, 100, 100, 100, 100, 300, 50, 50, 50, 50])}

    class Sized:
        def __init__(self, size: int) -> None:
            self.st_size = size

    original = Path.stat
    try:
        Path.stat = lambda self, **kw: Sized(sizes[str(self)])  # type: ignore[method-assign]
        # 1,000 bytes in 4 parts of 250: each file goes where its middle byte is (50, 150 | 250, 350, 450 |
        # 650 | 825, 875, 925, 975)
        assert [[int(Path(p).name) for p, _ in run] for run in loading._batches(files, 4)] == \
            [[0, 1], [2, 3, 4], [5], [6, 7, 8, 9]]
        assert [len(r) for r in loading._batches(files, 2)] == [5, 5]
        # a file larger than a part is a run alone, the small files before it not taken along: 1,009 bytes in
        # parts of 252.25, the small ones' middles at 0.5-3.5 (part 0), the large one's at 504 (part 1), the
        # ones after it from 1,004.5 (part 3)
        sizes.update({f"/nonexistent/{k}": 1 for k in range(10)}, **{"/nonexistent/4": 1_000})
        assert [[int(Path(p).name) for p, _ in run] for run in loading._batches(files, 4)] == \
            [[0, 1, 2, 3], [4], [5, 6, 7, 8, 9]]
        assert loading._unit_count(files, 2) == 2  # 1,000 bytes: under UNIT_BYTES a unit, one per process
        sizes.update((name, 10 * loading.UNIT_BYTES) for name in sizes)
        assert loading._unit_count(files, 2) == 10  # one unit a file: no unit of half a file
        sizes.update((name, 10 * loading.UNIT_BYTES) for name in sizes)
        assert loading._unit_count(files * 10, 2) == 2 * loading.UNITS_PER_PROCESS
    finally:
        Path.stat = original  # type: ignore[method-assign]


def test_a_child_s_own_duplicates_are_counted_as_when_its_rows_travel(tmp_path):
    """Two lines with one request id under two message ids, both in the child's run: the reader keeps both
    (its key is the pair), and the request is counted once, as the parent counts rows that travel."""
    from kvprobe.importers import ImportReport, load_any
    from kvprobe.importers.summary import UsageSums, summarize, usage_row
    from kvprobe.pricing import PriceBook

    folder = _logs(tmp_path, across=False)
    twin = _assistant("2026-09-07T11:00:02.000Z", "b3", "b0", 3, *R[3])
    twin["message"]["id"] = "msg_03-retry"
    _write(folder / "-home-me-web" / "s3.jsonl", [twin, _assistant("2026-09-08T09:00:02.000Z", "c4", "c0", 4, *R[4])])

    def read(fold: bool) -> tuple[dict, dict]:
        book, report = PriceBook(), ImportReport()
        rows = load_any([folder], report=report, workers=2, reduce=usage_row, history=False,
                        fold=(lambda: UsageSums(book)) if fold else None)
        return summarize(rows, book=book).to_json(), report.to_json()
    summed, summed_report = read(fold=True)
    assert summed["totals"]["requests"] == 5  # 1, 2, 3 once, 4, and 5 from its progress line
    assert summed["totals"]["fresh_input_tokens"] == 10 + 20 + 30 + 40 + 50
    s3 = next(s for s in summed_report["sources"] if s["path"].endswith("s3.jsonl"))
    assert (s3["records"], s3["duplicates"]) == (1, 1)
    assert (summed, summed_report) == read(fold=False)


@pytest.mark.parametrize("fold", [True, False], ids=["sums", "rows"])
def test_every_byte_read_in_parallel_is_said_to_the_progress_once(tmp_path, fold):
    """The bar of a parallel read reaches the folder's size, not more: a unit this process reads says its bytes
    as it reads them, a worker's when its answer arrives (each file once, whichever process read it)."""
    from kvprobe.importers import ImportReport, load_any
    from kvprobe.importers.summary import UsageSums, summarize, usage_row
    from kvprobe.pricing import PriceBook

    folder = _logs(tmp_path, across=False)
    for k in range(8):  # more files: several units for each process
        _write(folder / "-home-me-web" / f"t{k}.jsonl",
               [_assistant(f"2026-09-09T0{k}:00:02.000Z", f"t{k}", "u0", 10 + k, *R[1])])
    total = sum(p.stat().st_size for p in folder.rglob("*.jsonl"))
    said: list[int] = []
    book = PriceBook()
    rows = load_any([folder], report=ImportReport(), workers=3, reduce=usage_row, history=False,
                    progress=said.append, fold=(lambda: UsageSums(book)) if fold else None)
    totals = summarize(rows, book=book).to_json()["totals"]
    assert totals["requests"] == 5 + 8
    assert sum(said) == total
