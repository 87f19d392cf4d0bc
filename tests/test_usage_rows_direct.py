"""`usage` reads Claude Code transcripts straight into its rows (`claude_code.usage_rows`), without building the
records `import` and `report` read. A user would see any difference between the two as `usage` disagreeing with
`report` on the same folder: every case where a row is made, merged, timed, skipped or scrubbed is written here,
and the rows and per-file counts of both readings compared, with the figures worked out by hand."""
from __future__ import annotations

import json
from pathlib import Path

from kvprobe.importers import ImportReport, load_any
from kvprobe.importers.summary import UsageRow, usage_row

SONNET = "claude-sonnet-4-5-20250929"
SECRET = "sk-ant-api03-" + "Ab1" * 30  # a credential shape: scrubbed wherever it is read
CWD = f"/home/me/{SECRET}/web"


def _line(kind: str, uuid: str, parent: str | None, ts: str | None, **more) -> dict:
    line = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": CWD, "sessionId": "s1",
            "version": "2.1.0", "gitBranch": "main", "type": kind, "uuid": uuid, **more}
    if ts is not None:
        line["timestamp"] = ts
    return line


def _said(uuid: str, parent: str | None, ts: str | None, mid: str, rid: str | None, usage, model=SONNET,
          **more) -> dict:
    message = {"id": mid, "type": "message", "role": "assistant", "model": model, "stop_reason": None,
               "content": [{"type": "text", "text": "ok"}], "usage": usage}
    extra = {"requestId": rid} if rid is not None else {}
    return _line("assistant", uuid, parent, ts, message=message, **extra, **more)


def _usage(fresh: int, read: int, written: int, out: int, w1h: int = 0) -> dict:
    return {"input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": written,
            "cache_creation": {"ephemeral_5m_input_tokens": written - w1h, "ephemeral_1h_input_tokens": w1h},
            "output_tokens": out, "service_tier": "standard"}


def _write(path: Path, lines: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


def _folder(root: Path) -> Path:
    """s1: a prompt, then
    r1 answered over three lines (output 3, then 40, then 12: the largest count, 40, stays; its time is its
       prompt's, 10:00:00, not a line's), costUSD 0.25;
    r2 whose parent line is not in the file and whose first line has no time: its time is its later line's
       (10:05:09); costUSD true (no cost);
    a `<synthetic>` line, a line without usage, one with neither id (three counted skips);
    r3 with a part larger than the whole (1h 900 of 500 written, so 5m -400: an invalid usage, a counted skip);
    a route line to Vertex, then r4 (served by Vertex: the route names it) whose request id holds a key;
    a malformed line; progress lines carrying subagent request r5 (known only from there), r1, and r7 with a
    negative output count (an invalid usage: skipped, and never counted as a request);
    agent-x.jsonl (a subagent's own file): r6 by Bedrock (its message id says so), no cwd."""
    project = root / "projects" / "-home-me-web"
    prompt = _line("user", "u1", None, "2026-10-01T10:00:00.000Z", message={"role": "user", "content": "hi"})
    r1 = [_said(f"a1{k}", "u1", f"2026-10-01T10:00:0{3 + k}.000Z", "msg_01", "req_1", _usage(5, 100, 20, out),
                costUSD=0.25) for k, out in enumerate((3, 40, 12))]
    r2 = [_said("b1", "gone", None, "msg_02", "req_2", _usage(7, 0, 300, 2), costUSD=True),
          _said("b2", "b1", "2026-10-01T10:05:09.000Z", "msg_02", "req_2", _usage(7, 0, 300, 9), costUSD=True)]
    skipped = [_said("c1", "u1", "2026-10-01T10:06:00.000Z", "msg_x", "req_x", _usage(0, 0, 0, 0),
                     model="<synthetic>"),
               _line("assistant", "c2", "u1", "2026-10-01T10:06:01.000Z", requestId="req_y",
                     message={"id": "msg_y", "model": SONNET, "content": []}),
               _said("c3", "u1", "2026-10-01T10:06:02.000Z", "", None, _usage(1, 0, 0, 1))]
    r3 = _said("d1", "u1", "2026-10-01T10:07:00.000Z", "msg_03", "req_3", _usage(1, 0, 500, 1, w1h=900))
    route = {"type": "api-request-route", "provider": "vertex", "credential": "key", "sessionId": "s1"}
    r4 = _said("e1", "u1", "2026-10-01T10:08:00.000Z", "msg_04", f"req_4_{SECRET}", _usage(2, 2000, 0, 5, 0))
    nested = {n: {"type": "assistant", "timestamp": ts, "requestId": f"req_{n}", "uuid": f"n{n}",
                  "message": _said(f"n{n}", "u1", ts, f"msg_0{n}", f"req_{n}", usage)["message"]}
              for n, ts, usage in ((5, "2026-10-01T10:09:00.000Z", _usage(3, 50, 0, 4)),
                                   (1, "2026-10-01T10:00:03.000Z", _usage(5, 100, 20, 3)),
                                   (7, "2026-10-01T10:09:10.000Z", _usage(3, 0, 0, -4)))}
    progress = [_line("progress", f"p{n}", "u1", "2026-10-01T10:09:30.000Z",
                      data={"type": "agent_progress", "agentId": "x5", "message": nested[n]}) for n in (5, 1, 7)]
    _write(project / "s1.jsonl", [prompt, *r1, *r2, *skipped, r3, route, r4, '{"type": "user", broken',
                                  *progress])
    r6 = _said("f1", "u9", "2026-10-01T11:00:00.000Z", "msg_bdrk_06", "req_6", _usage(4, 0, 0, 6),
               isSidechain=True, agentId="x")
    del r6["cwd"]
    _write(project / "s1" / "subagents" / "agent-x.jsonl", [r6])
    return root / "projects"


def _direct(folder: Path) -> tuple[list, dict]:
    report = ImportReport()
    rows = list(load_any([folder], report=report, reduce=usage_row, history=False))
    return rows, report.to_json()


def _through_records(folder: Path) -> tuple[list, dict]:
    report = ImportReport()
    rows = [usage_row(r) for r in load_any([folder], report=report, history=False)]
    return rows, report.to_json()


def test_usage_rows_are_the_rows_of_the_records(tmp_path, monkeypatch):
    folder = _folder(tmp_path)
    from kvprobe.importers import claude_code

    made = []
    real = claude_code.usage_rows
    monkeypatch.setattr(claude_code, "usage_rows", lambda *a: made.append(a[0]) or real(*a))
    rows, report = _direct(folder)
    assert len(made) == 2  # (both files read straight into rows)
    assert (rows, report) == _through_records(folder)


def test_the_rows_by_hand(tmp_path):
    rows, report = _direct(_folder(tmp_path))
    project = "/home/me/[REDACTED:anthropic#"
    by_id = {r.id.split("[")[0] if "[" in r.id else r.id: r for r in rows}
    assert sorted(by_id) == ["req_1", "req_2", "req_4_", "req_5", "req_6"]
    r1, r2, r4, r5, r6 = (by_id[k] for k in ("req_1", "req_2", "req_4_", "req_5", "req_6"))
    # r1: three lines, one request: the largest output count; its prompt's time; the cost it logged
    assert r1.usage == (5, 100, 20, 0, 40, 0) and r1.logged == 0.25
    assert r1.when == 1790848800.0  # 2026-10-01T10:00:00Z
    # r2: no parent in the file, no time on its first line: its last line's time; `true` is no cost
    assert r2.when == 1790848800.0 + 5 * 60 + 9 and r2.logged == 0.0 and r2.usage[4] == 9
    # r4: the route's platform, its id scrubbed; r6: the platform its message id names, a subagent's file
    assert (r4.platform, r6.platform, r1.platform) == ("vertex", "bedrock", None)
    assert SECRET not in r4.id and r4.id.startswith("req_4_[REDACTED:anthropic#")
    assert (r6.session, r6.agent, r6.project) == ("s1", "agent-x", "-home-me-web")
    # the working directory scrubbed where it names the project
    assert all(r.project.startswith(project) and SECRET not in r.project for r in (r1, r2, r4, r5))
    # r5 is known from a progress line only; r1's progress copy is dropped (its transcript line was read)
    assert r5.via == "agent_progress" and r1.via is None
    (s1,) = [s for s in report["sources"] if s["path"].endswith("s1.jsonl")]
    assert report["from_agent_progress"] == 1
    assert s1["skipped_reasons"] == {"synthetic message written by Claude Code (no API call)": 1,
                                     "assistant message without usage": 1,
                                     "no message.id or requestId to identify the request": 1,
                                     "invalid usage": 2, "truncated JSON line": 1}  # r3, r7; the malformed line
    assert (s1["lines"], s1["records"], s1["ignored"]) == (16, 4, 2)  # r1, r2, r4, r5; the prompt, the route
    # r1's two later lines and its progress copy; r2's later line
    assert s1["duplicates"] == 4
    assert isinstance(rows[0], UsageRow)


def _old_reading(folder: Path) -> tuple[list, dict]:
    """What `usage` read before its rows were made straight from the lines: each record checked, scrubbed and
    reduced (a `reduce` other than `usage_row` itself takes that path), merged across files by `_dedupe`."""
    report = ImportReport()
    rows = list(load_any([folder], report=report, reduce=lambda record: usage_row(record), history=False))
    return rows, report.to_json()


HUGE = 10 ** 400  # an integer past any float: only a joined line (two objects, read by json) carries one


def _random_folder(root: Path, seed: int) -> Path:
    """Transcripts of random lines, odd values among them, from small pools of ids (so that lines merge, copies
    repeat across files and progress lines, and parents point anywhere)."""
    import random

    rnd = random.Random(seed)
    pick = rnd.choice
    uuids: list[str] = []

    def usage() -> object:
        good = {"input_tokens": rnd.randint(0, 50), "cache_read_input_tokens": rnd.randint(0, 5000),
                "cache_creation_input_tokens": 100, "output_tokens": rnd.randint(0, 40),
                "cache_creation": {"ephemeral_5m_input_tokens": 60, "ephemeral_1h_input_tokens": 40}}
        odd = [{**good, "output_tokens": -1}, {**good, "input_tokens": 1.5}, {"input_tokens": 3},
               {**good, "cache_creation": {"ephemeral_5m_input_tokens": 900, "ephemeral_1h_input_tokens": 0}},
               "none", None, {**good, "output_tokens": "7"}]
        return good if rnd.random() < 0.7 else pick(odd)

    def line(kind: str) -> dict:
        uuid = f"u{rnd.randint(0, 10 ** 6)}"
        out = {"type": kind, "uuid": uuid,
               "parentUuid": pick([None, f"u{rnd.randint(0, 10 ** 6)}", *uuids[-3:], *uuids[-3:]]),
               "sessionId": pick(["s1", "s1", "s2", "", 7, f"s-{SECRET}"]),
               "cwd": pick([CWD, "/home/me/web", "/home/me/web", "", 5, None]),
               "timestamp": pick(["2026-10-01T10:00:0%dZ" % rnd.randint(0, 9)] * 4 +
                                 [1790848800123, None, "soon", " 2026-10-01T10:00:00Z"]),
               "isSidechain": pick([False, False, True]), "version": "2.1.0"}
        if rnd.random() < 0.2:
            out["agentId"] = pick(["x", "y", ""])
        uuids.append(uuid)
        return {k: v for k, v in out.items() if v is not None or rnd.random() < 0.5}

    def said() -> dict:
        out = line("assistant")
        out["requestId"] = pick(["req_1", "req_2", "req_3", f"req_4_{SECRET}", "", None])
        out["message"] = {"id": pick(["msg_01", "msg_02", "msg_bdrk_03", "msg_vrtx_04", "", None]),
                          "model": pick([SONNET, SONNET, "<synthetic>", "claude-haiku-4-5", None, 5]),
                          "usage": usage(), "stop_reason": pick([None, "end_turn"])}
        if rnd.random() < 0.3:
            out["costUSD"] = pick([0.25, -1, True, "0.5", 0, 2 ** 70])
        return out

    def any_line() -> str:
        roll = rnd.random()
        if roll < 0.45:
            obj: dict = said()
        elif roll < 0.6:
            obj = {**line("progress"), "data": {"type": "agent_progress", "agentId": "x5", "message": said()}}
        elif roll < 0.62:
            obj = {"type": "api-request-route", "provider": pick(["vertex", "bedrock", "anthropic", "other"]),
                   "credential": pick(["login", "key"])}
        elif roll < 0.65:
            return '{"type": "user", broken'
        else:
            obj = {**line(pick(["user", "system"])), "message": {"role": "user", "content": "hi"}}
        text = json.dumps(obj)
        if rnd.random() < 0.08:  # a line cut short of its break, joined to the next object
            if obj.get("type") == "assistant" and rnd.random() < 0.5:  # what only JSON's own parser reads
                text = text[:-1] + f', "{pick(["costUSD", "timestamp"])}": {HUGE}}}'
            text += json.dumps({"type": "summary", "summary": "s"})
        return text

    project = root / "projects" / "-home-me-web"
    for name in ("a.jsonl", "b.jsonl", "s1/subagents/agent-x.jsonl"):
        _write(project / name, [any_line() for _ in range(rnd.randint(5, 40))])
    return root / "projects"


def test_random_transcripts_read_the_same_both_ways(tmp_path):
    """Every figure `usage` shows comes out the same as through whole records, on odd and broken input too."""
    for seed in range(40):
        folder = _random_folder(tmp_path / str(seed), seed)
        assert _direct(folder) == _old_reading(folder), seed


def test_a_cost_or_time_past_any_float_is_no_cost_or_time(tmp_path):
    """A costUSD or timestamp no float holds (a joined line, read by JSON's own parser) is none: the request is
    read (or skipped for its usage) as without it, where it stopped the whole run before."""
    good = _usage(5, 100, 20, 3)
    first = _said("a1", None, "2026-10-01T10:00:00.000Z", "msg_01", "req_1", good)
    later = _said("a2", "a1", None, "msg_01", "req_1", {**good, "output_tokens": 9})
    bad = _said("b1", None, "2026-10-01T10:00:00.000Z", "msg_02", "req_2", {**good, "output_tokens": -1})
    summary = json.dumps({"type": "summary", "summary": "s"})
    lines = [json.dumps(first), json.dumps(later)[:-1] + f', "timestamp": {HUGE}}}' + summary,
             json.dumps(bad)[:-1] + f', "costUSD": {HUGE}}}' + summary]
    _write(tmp_path / "projects" / "p" / "s.jsonl", lines)
    rows, report = _direct(tmp_path / "projects")
    assert (rows, report) == _old_reading(tmp_path / "projects")
    (row,) = rows
    assert (row.id, row.usage[4], row.when, row.logged) == ("req_1", 9, 1790848800.0, 0.0)
    assert report["skipped_reasons"] == {"invalid usage": 1}


def test_a_copy_skipped_for_its_usage_hides_no_later_one(cli, tmp_path, monkeypatch):
    """A resumed session's copy of a request with a broken usage (a.jsonl) and the request itself (b.jsonl):
    the request counts once, whether the files are read in one pass, in two processes or one by one for the
    rows kept between runs; before, the one pass took b's copy for a duplicate of the skipped one."""
    monkeypatch.setenv("KVPROBE_CACHE_DIR", str(tmp_path / "cache"))
    project = tmp_path / "projects" / "-home-me-web"
    usage = _usage(5, 100, 20, 7)
    _write(project / "a.jsonl", [_said("a1", None, "2026-10-01T10:00:00.000Z", "msg_01", "req_1",
                                       {**usage, "output_tokens": -7})])
    _write(project / "b.jsonl", [_said("b1", None, "2026-10-01T10:00:00.000Z", "msg_01", "req_1", usage)])
    answers = []
    for args in (["--no-cache", "--workers", "1"], ["--no-cache", "--workers", "2"], [], []):
        res = cli("usage", tmp_path / "projects", "--json", *args)
        assert res.exit_code == 0, res.output
        answers.append(json.loads(res.stdout))
    totals = answers[0]["totals"]
    assert (totals["requests"], totals["output_tokens"], totals["cache_read_tokens"]) == (1, 7, 100)
    assert all(a["totals"] == totals for a in answers[1:])
    assert answers[0]["import"]["skipped_reasons"] == {"invalid usage": 1}
