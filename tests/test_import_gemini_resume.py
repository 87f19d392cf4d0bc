"""Gemini CLI's JSON Lines session, resumed (`gemini --resume latest`): the resumed process lists the whole
history again in a `$set`, every message stamped with the resume's time, as Gemini CLI 0.61.0 wrote it when
run against `kvprobe serve` (line shapes as it wrote them; ids and token counts written here)."""
from __future__ import annotations

import json
from pathlib import Path

from kvprobe.importers import load_any

META = {"sessionId": "3ee30d9f", "projectHash": "ab" * 32, "startTime": "2026-12-07T08:41:50.847Z",
        "lastUpdated": "2026-12-07T08:41:56.405Z", "kind": "main"}


def _gemini(mid: str, at: str, read: int, total: int) -> dict:
    return {"id": mid, "type": "gemini", "timestamp": at, "content": "ok", "model": "gemini-2.5-pro",
            "tokens": {"input": total, "output": 24, "cached": read, "thoughts": 0, "tool": 0, "total": total + 24}}


def test_a_resume_does_not_move_the_requests_it_lists_again(tmp_path: Path):
    user1 = {"id": "u1", "type": "user", "timestamp": "2026-12-07T08:41:51.713Z", "content": "read README.md"}
    first = _gemini("g1", "2026-12-07T08:41:52.575Z", 0, 9_110)
    # the next day's resume: the history again, every message stamped 09:00:00
    again = [{**m, "timestamp": "2026-12-08T09:00:00.000Z"} for m in (user1, first)]
    user2 = {"id": "u2", "type": "user", "timestamp": "2026-12-08T09:00:01.000Z", "content": "now say goodbye"}
    lines = [META, user1, first, {**META, "lastUpdated": "2026-12-08T09:00:00.000Z"}, {"$set": {"messages": again}},
             user2, _gemini("g2", "2026-12-08T09:00:02.000Z", 8_192, 9_300)]
    chats = tmp_path / "tmp" / "work" / "chats"
    chats.mkdir(parents=True)
    (chats / "session-2026-12-07T08-41-3ee30d9f.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    records = {r.id.split(":")[-1]: r for r in load_any(tmp_path / "tmp")}
    # g1 was answered on the 7th (its first writing), g2 on the 8th
    assert records["g1"].finished_at == 1_796_632_912.575
    assert records["g2"].finished_at == 1_796_720_402.0


def test_the_gemini_home_folder_reads_clean_and_says_what_the_log_leaves_out(tmp_path: Path, cli):
    """Named at ~/.gemini, the settings beside tmp/ are Gemini CLI's own files (not "no known format"); the
    import says the log holds the main model's calls only (the router's are not written: found by capture)."""
    home = tmp_path / ".gemini"
    chats = home / "tmp" / "work" / "chats"
    chats.mkdir(parents=True)
    lines = [META, {"id": "u1", "type": "user", "timestamp": "2026-12-07T08:41:51.713Z", "content": "hi"},
             _gemini("g1", "2026-12-07T08:41:52.575Z", 0, 9_110)]
    (chats / "session-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (home / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    (home / "projects.json").write_text(json.dumps({"projects": {}}))
    out = cli("usage", home).output
    assert "no known format" not in out
    assert "Gemini CLI logs its main model's calls only" in out
