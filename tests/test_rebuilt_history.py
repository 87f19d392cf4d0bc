"""Causes from the messages a transcript holds (issue #38 items 1-2): each request's message list rebuilt from
Claude Code, Codex and Gemini CLI logs, a change inside the history named at its message with its token
position, reads of an earlier request's entry (stale replica, branch) and reads of nothing on a platform that
routes between caches.

Every message written here is exactly 400 bytes of JSON content, so the rebuilt estimate (bytes / 4) is 100
tokens a message; every figure below is worked out by hand from that and from the usage each line logs.
"""
from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import kvprobe
from kvprobe.importers import load_any

T0 = dt.datetime(2026, 11, 20, 9, 0, 0, tzinfo=dt.timezone.utc)


def at(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def user_text(n: int) -> str:
    """A user prompt whose JSON content is 400 bytes: the two quotes and 398 characters."""
    return f"prompt {n} ".ljust(398, "p")


def tool_result(n: int, text: str | None = None) -> list[dict[str, Any]]:
    """A tool result whose JSON content is 400 bytes: 56 bytes of keys and quotes, 344 characters."""
    return [{"tool_use_id": f"t{n:02d}", "type": "tool_result", "content": (text or f"result {n} ").ljust(344, "r")}]


def answer(n: int) -> list[dict[str, Any]]:
    """An assistant message whose JSON content is 400 bytes: 27 bytes of keys and quotes, 373 characters."""
    return [{"type": "text", "text": f"answer {n} ".ljust(373, "a")}]


class Transcript:
    """A Claude Code transcript written line by line, each line's parent named (branches are explicit)."""

    def __init__(self, session: str = "s-branch", id_prefix: str = "msg_bdrk_01") -> None:
        self.session, self.id_prefix, self.lines = session, id_prefix, []

    def line(self, uuid: str, parent: str | None, t: float, kind: str, **fields: Any) -> str:
        self.lines.append({"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/work/app",
                           "sessionId": self.session, "version": "2.1.250", "type": kind, "uuid": uuid,
                           "timestamp": at(t), **fields})
        return uuid

    def user(self, uuid: str, parent: str | None, t: float, content: Any) -> str:
        return self.line(uuid, parent, t, "user", message={"role": "user", "content": content})

    def answer(self, uuid: str, parent: str, t: float, request: str, *, read: int, write: int, fresh: int = 3,
               cleared: int = 0) -> str:
        usage = {"input_tokens": fresh, "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
                 "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0},
                 "output_tokens": 40}
        managed = {"applied_edits": [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": cleared,
                                      "cleared_input_tokens": 100 * cleared}]} if cleared else None
        return self.line(uuid, parent, t, "assistant", requestId=request,
                         message={"model": "claude-sonnet-4-5", "id": f"{self.id_prefix}{request}", "type": "message",
                                  "role": "assistant", "content": answer(int(request[1:])), "stop_reason": "end_turn",
                                  "usage": usage, "context_management": managed})

    def write(self, folder: Path) -> Path:
        path = folder / "projects" / "-work-app" / f"{self.session}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines))
        return path


def _diagnoses(path: Path) -> dict[str, dict[str, Any]]:
    """The first diagnosis of each request that has one, from `report --json`'s library call."""
    report = kvprobe.analyse([str(path)]).to_json()
    return {r["id"]: r["diagnoses"][0] for r in report["requests"] if r["diagnoses"]}


def _branching_session() -> Transcript:
    """Tools and system are 1,900 tokens and every message 100, so a request's level (read + write) is 1,900 +
    100 a message it was sent. r1-r3 append; the user rewinds to r1's answer and asks again (r4: a branch); r5
    appends; the API clears r6's first tool result (t5) from its prompt; t5's line is then written again with
    other content (r7: an edited history). Each read is the longest entry before the change."""
    s = Transcript()
    s.user("u1", None, 0, user_text(1))
    s.answer("a1", "u1", 2, "r1", read=0, write=2_000)               # u1: level 2,000
    s.user("t1", "a1", 10, tool_result(1))
    s.answer("a2", "t1", 12, "r2", read=2_000, write=200)            # u1 a1 t1: 2,200
    s.user("t2", "a2", 20, tool_result(2))
    s.answer("a3", "t2", 22, "r3", read=2_200, write=200)            # u1 a1 t1 a2 t2: 2,400
    s.user("u4", "a1", 30, user_text(4))                              # the rewind: back to after a1
    s.answer("a4", "u4", 32, "r4", read=2_000, write=200)            # u1 a1 u4: 2,200, reads r1's entry
    s.user("t5", "a4", 40, tool_result(5))
    s.answer("a5", "t5", 42, "r5", read=2_200, write=200)            # u1 a1 u4 a4 t5: 2,400
    s.user("t6", "a5", 50, tool_result(6))
    s.answer("a6", "t6", 52, "r6", read=2_200, write=400, cleared=1)  # t5 cleared at 2,300: reads r4's 2,200
    s.user("t5", "a4", 55, tool_result(5, "[Old tool result content cleared]"))  # t5 written again, edited
    s.user("t7", "a6", 60, tool_result(7))
    s.answer("a7", "t7", 62, "r7", read=2_200, write=600)            # t5 edited at 2,300: reads r4's 2,200
    return s


def test_claude_code_history_is_rebuilt_per_request(tmp_path: Path) -> None:
    path = _branching_session().write(tmp_path)
    history = {r.id: r.extra["history"] for r in load_any([path])}
    # API messages: lines of one role in a row are one message; 100 estimated tokens a line
    assert history["r1"] == {"messages": 1, "tokens": 100}
    assert history["r2"] == {"messages": 3, "tokens": 300}
    assert history["r3"] == {"messages": 5, "tokens": 500}
    # r4 is sent u1 a1 u4: it leaves r3's list after a1, at messages[2] with 200 tokens before it
    assert history["r4"] == {"messages": 3, "tokens": 300,
                             "change": {"kind": "branched", "index": 2, "tokens_before": 200}}
    assert history["r5"] == {"messages": 5, "tokens": 500}
    # r6 (u1 a1 u4 a4 t5 a5 t6): the API cleared the first tool result of its prompt, t5 = messages[4]
    assert history["r6"] == {"messages": 7, "tokens": 700,
                             "change": {"kind": "cleared", "index": 4, "tokens_before": 400}}
    # r7: t5, sent to r6 as it was, is written again with other content: edited at messages[4]
    assert history["r7"] == {"messages": 9, "tokens": 900,
                             "change": {"kind": "edited", "index": 4, "tokens_before": 400}}


def test_a_branch_is_named_at_its_message_with_the_entry_it_read(tmp_path: Path) -> None:
    d = _diagnoses(_branching_session().write(tmp_path))
    r4 = d["r4"]
    # r3's entry ends at 2,400 and covers its 500 estimated message tokens; the branch leaves after 200 of
    # them, 300 before that end: 2,100. An ideal cache reads those 2,100; r4 read r1's 2,000: 100 missed
    assert (r4["kind"], r4["path"], r4["token_position"], r4["writer_id"], r4["evidence"], r4["missed_tokens"]) == \
        ("prefix_changed", "messages[2]", 2_100, "r1", "transcript", 100)
    assert "went back and branched" in r4["detail"] and r4["change"] == "branched"


def test_a_cleared_and_an_edited_tool_result_are_named_where_they_sit(tmp_path: Path) -> None:
    d = _diagnoses(_branching_session().write(tmp_path))
    # r6: r5's entry ends at 2,400 over 500 message tokens; t5 starts 400 in: 2,400 − 100 = 2,300. The read
    # (2,200) is the entry r4 left on this branch (r2's 2,200 was on the other one)
    r6 = d["r6"]
    assert (r6["kind"], r6["path"], r6["token_position"], r6["writer_id"], r6["missed_tokens"]) == \
        ("prefix_changed", "messages[4]", 2_300, "r4", 100)
    assert "cleared old tool results" in r6["detail"] and r6["change"] == "cleared"
    # r7: r6's entry ends at 2,600 over 700 message tokens; t5 starts 400 in: 2,600 − 300 = 2,300
    r7 = d["r7"]
    assert (r7["kind"], r7["path"], r7["token_position"], r7["writer_id"], r7["missed_tokens"]) == \
        ("prefix_changed", "messages[4]", 2_300, "r4", 100)
    assert "rewritten" in r7["detail"] and r7["change"] == "edited"
    assert {r6["evidence"], r7["evidence"]} == {"transcript"}


def _replica_session() -> Transcript:
    """Append-only on Bedrock, tools and system 1,900 tokens, 100 a message, each request reaching one of two
    regions by turns. Levels: r1 2,000; r2 2,200 (region A); r3 reads nothing (region B, 10 s later) and
    writes its 2,400; r4 is back in A and reads r2's 2,200; r5 in B reads r3's 2,400; r6 in A reads r4's 2,600."""
    s = Transcript("s-replica")
    usage = [(0, 2_000), (2_000, 200), (0, 2_400), (2_200, 400), (2_400, 400), (2_600, 400)]
    parent = None
    for n, (read, write) in enumerate(usage, start=1):
        parent = s.user(f"u{n}", parent, 10 * n, user_text(n) if n == 1 else tool_result(n))
        parent = s.answer(f"a{n}", parent, 10 * n + 2, f"r{n}", read=read, write=write)
    return s


def test_alternating_replica_reads_name_the_request_whose_entry_they_read(tmp_path: Path) -> None:
    d = _diagnoses(_replica_session().write(tmp_path))
    assert d["r3"]["kind"] == "routing" and d["r3"]["evidence"] == "platform_routing"
    assert "Bedrock cross-region inference" in d["r3"]["detail"]
    assert "docs.aws.amazon.com/bedrock/latest/userguide/cross-region-inference.html" in d["r3"]["detail"]
    assert "regional model id" in d["r3"]["advice"]
    assert d["r3"]["missed_tokens"] == 2_200  # r2 left 2,200; r3 read none of it
    stale = {rid: (d[rid]["kind"], d[rid]["writer_id"], d[rid]["token_position"], d[rid]["missed_tokens"])
             for rid in ("r4", "r5", "r6")}
    # missed: what the last request left (r3 2,400; r4 2,600; r5 2,800) less the read
    assert stale == {"r4": ("stale_read", "r2", 2_200, 200), "r5": ("stale_read", "r3", 2_400, 200),
                     "r6": ("stale_read", "r4", 2_600, 200)}
    assert all(d[rid]["evidence"] == "read_level" for rid in stale)
    assert all("regional model id" in d[rid]["advice"] for rid in stale)  # Bedrock's own fix, from providers/
    assert "history only grew" in d["r4"]["detail"]
    # where the read ended: r3's entry (2,400) covers its 500 message tokens, so 1,900 are tools and system;
    # r4's 2,200 read covers 300 of those 500
    assert "(tools, system: about 1,900 tokens) and about 300 of the 500 message tokens r3 was sent" \
        in d["r4"]["detail"]


def test_no_charged_miss_of_the_replica_session_stays_unexplained(tmp_path: Path) -> None:
    report = kvprobe.analyse([str(_replica_session().write(tmp_path))]).to_json()
    assert sorted(m["id"] for m in report["misses"]) == ["r3", "r4", "r5", "r6"]
    assert {m["kinds"][0] for m in report["misses"]} == {"routing", "stale_read"}


def test_first_party_reads_of_nothing_stay_unexplained_with_content_ruled_out(tmp_path: Path) -> None:
    """The Claude API itself names no routing rule: the same read of nothing is unexplained, but the transcript
    says the content did not change."""
    s = _replica_session()
    for line in s.lines:
        if line["type"] == "assistant":
            line["message"]["id"] = line["message"]["id"].replace("msg_bdrk_01", "msg_01")
    d = _diagnoses(s.write(tmp_path))
    assert d["r3"]["kind"] == "unexplained" and d["r3"]["evidence"] == "transcript"
    assert "history only grew" in d["r3"]["detail"]
    assert d["r4"]["kind"] == "stale_read"  # an earlier request's level to the token: another replica's


class _CodexRollout:
    """A Codex rollout written line by line: items, token counts (cumulative totals and the last request's)."""

    def __init__(self, session: str = "cdx-1") -> None:
        self.session = session
        self.lines: list[dict[str, Any]] = []
        self.total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0, "reasoning_output_tokens": 0,
                      "total_tokens": 0}
        self.add(0, "session_meta", {"id": session, "timestamp": at(0), "cwd": "/work/app",
                                     "model_provider": "openai"})
        self.add(0, "turn_context", {"cwd": "/work/app", "model": "gpt-5.3-codex", "effort": "high"})
        self.add(0, "event_msg", {"type": "task_started"})

    def add(self, t: float, kind: str, payload: dict[str, Any]) -> None:
        self.lines.append({"timestamp": at(t), "type": kind, "payload": payload})

    def count(self, t: float, input_tokens: int, cached: int) -> None:
        last = {"input_tokens": input_tokens, "cached_input_tokens": cached, "output_tokens": 50,
                "reasoning_output_tokens": 0, "total_tokens": input_tokens + 50}
        for k, v in last.items():
            self.total[k] += v
        self.add(t, "event_msg", {"type": "token_count", "info": {"total_token_usage": dict(self.total),
                                                                   "last_token_usage": last}})

    def item(self, t: float, role: str, n: int) -> None:
        self.add(t, "response_item", {"type": "message", "role": role,
                                      "content": [{"type": "input_text", "text": f"item {n} "}]})

    def turn(self, asked: float, answered: float, n: int, input_tokens: int, cached: int) -> None:
        """Item n asked, item n + 1 answered, and the request's token count."""
        self.item(asked, "user", n)
        self.item(answered, "assistant", n + 1)
        self.count(answered, input_tokens, cached)

    def write(self, tmp_path: Path) -> Path:
        path = tmp_path / "sessions" / "2026" / "11" / "20" / f"rollout-2026-11-20T09-00-00-{self.session}.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines))
        return path


def _rollout(tmp_path: Path) -> Path:
    """A Codex rollout: two appended requests, a compaction that keeps one item, a request after it, then a
    read of nothing 2 s after a full read (no event, the items only grew)."""
    c = _CodexRollout()
    c.turn(0, 1, 1, 20_000, 0)
    c.turn(2, 3, 3, 20_500, 19_968)
    c.add(4, "compacted", {"message": "", "replacement_history": [{"type": "message", "role": "user",
                                                                   "content": [{"type": "input_text", "text": "sum"}]}]})
    c.item(5, "assistant", 5)
    c.count(5, 8_000, 3_456)
    c.turn(6, 7, 6, 8_400, 7_936)
    c.turn(8, 27, 8, 8_900, 0)
    return c.write(tmp_path)


def test_codex_items_rebuild_each_request_and_a_compaction_replaces_them(tmp_path: Path) -> None:
    records = list(load_any([_rollout(tmp_path)]))
    changes = [(r.extra["history"]["messages"], (r.extra["history"].get("change") or {}).get("kind"))
               for r in records]
    # items alternate user/assistant; the compaction keeps one user item, then the model's answer follows
    assert changes == [(2, None), (4, None), (2, "compacted"), (4, None), (6, None)]
    assert records[2].extra["history"]["change"]["index"] == 0


def test_codex_read_of_nothing_within_the_lifetime_is_openai_routing(tmp_path: Path) -> None:
    d = _diagnoses(_rollout(tmp_path))
    last = d["cdx-1#5"]  # 2 s after cdx-1#4 read 7,936 of 8,400: a read of nothing, the items only grew
    assert (last["kind"], last["evidence"]) == ("routing", "platform_routing")
    assert "prefix-hash routing" in last["detail"]
    assert "platform.openai.com/docs/guides/prompt-caching" in last["detail"]
    assert "prompt_cache_key" in last["advice"]


def test_reads_of_nothing_in_a_row_each_miss_what_the_last_full_read_left(tmp_path: Path) -> None:
    """Codex requests routed to a cache without the entry, several in a row (a public Codex rollout shows runs of
    three and four): the entry the last full read left is still where it was, so each of them missed it, not only
    the first. An implicit cache reports no writes: after a read of nothing the stream is known to hold nothing
    more, and the second and third passed as no miss. By hand: cdx-1#2 read 19,968, so #3, #4 and #5 (reads of
    nothing 2, 4 and 6 s later, the items only growing) each missed 19,968; #6 read 21,376 again."""
    c = _CodexRollout()
    sizes = [(20_000, 0), (20_500, 19_968), (21_000, 0), (21_400, 0), (21_800, 0), (22_200, 21_376)]
    for k, (input_tokens, cached) in enumerate(sizes):
        c.turn(2 * k, 2 * k + 1, 2 * k, input_tokens, cached)
    report = kvprobe.analyse([str(c.write(tmp_path))]).to_json()
    rows = {r["id"]: r for r in report["requests"]}
    assert {i: rows[i]["missed_read_tokens"] for i in rows} == {"cdx-1#1": 0, "cdx-1#2": 0, "cdx-1#3": 19_968,
                                                               "cdx-1#4": 19_968, "cdx-1#5": 19_968, "cdx-1#6": 0}
    for i in ("cdx-1#3", "cdx-1#4", "cdx-1#5"):
        assert rows[i]["diagnoses"][0]["kind"] == "routing"
        assert "cdx-1#2 left 19,968 cached" in rows[i]["diagnoses"][0]["detail"], rows[i]["diagnoses"][0]["detail"]


def test_a_gemini_cli_rewind_is_a_branch_at_the_rewound_turn(tmp_path: Path) -> None:
    def msg(i: str, kind: str, t: float, tokens: dict[str, int] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": i, "timestamp": at(t), "type": kind, "content": f"turn {i}"}
        if tokens:
            out.update(tokens=tokens, model="gemini-2.5-pro")
        return out

    def usage(prompt: int, cached: int) -> dict[str, int]:
        return {"input": prompt, "output": 20, "cached": cached, "thoughts": 0, "tool": 0, "total": prompt + 20}

    lines = [{"sessionId": "g-1", "projectHash": "abc", "startTime": at(0)},
             msg("m1", "user", 0), msg("m2", "gemini", 5, usage(9_000, 0)),
             msg("m3", "user", 10), msg("m4", "gemini", 15, usage(9_200, 8_192)),
             {"$rewindTo": "m3"},
             msg("m5", "user", 20), msg("m6", "gemini", 25, usage(9_150, 8_192))]
    path = tmp_path / "chats" / "session-2026-11-20T09-00-g-1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    history = {r.id: r.extra["history"] for r in load_any([path])}
    # m6 is sent m1 m2 m5: it leaves m4's list (m1 m2 m3) at its third message, messages[2]
    assert history["g-1:m6"]["change"]["kind"] == "branched"
    assert history["g-1:m6"]["change"]["index"] == 2
    assert history["g-1:m4"].get("change") is None


def test_parallel_inline_subagents_are_streams_of_their_own(tmp_path: Path) -> None:
    """Older transcripts write subagents inline without an agentId; two running at once interleave their
    lines. Each chains back to its own first line: two streams, each append-only, no miss (before, one
    'sidechain' stream had each read the other's entry and every request looked like a branch)."""
    s = Transcript("s-inline")
    for line in (("sa-root-1", None, "u"), ("sb-root-1", None, "u")):
        s.user(line[0], line[1], 0, user_text(1))
    s.answer("sa-a1", "sa-root-1", 2, "r1", read=0, write=2_000)
    s.answer("sb-a1", "sb-root-1", 2.1, "r2", read=0, write=2_000)
    s.user("sa-t1", "sa-a1", 5, tool_result(1))
    s.user("sb-t1", "sb-a1", 5.1, tool_result(1))
    s.answer("sa-a2", "sa-t1", 7, "r3", read=2_000, write=200)
    s.answer("sb-a2", "sb-t1", 7.1, "r4", read=2_000, write=200)
    for line in s.lines:
        line["isSidechain"] = True
    path = s.write(tmp_path)
    agents = {r.id: r.agent for r in load_any([path])}
    assert agents == {"r1": "sidechain-sa-root-", "r3": "sidechain-sa-root-",
                      "r2": "sidechain-sb-root-", "r4": "sidechain-sb-root-"}
    assert kvprobe.analyse([str(path)]).to_json()["misses"] == []


def test_a_vertex_served_read_of_nothing_is_vertex_routing(tmp_path: Path) -> None:
    s = _replica_session()
    for line in s.lines:
        if line["type"] == "assistant":
            line["message"]["id"] = line["message"]["id"].replace("msg_bdrk_01", "msg_vrtx_01")
    d = _diagnoses(s.write(tmp_path))
    assert (d["r3"]["kind"], d["r3"]["evidence"]) == ("routing", "platform_routing")
    assert "Vertex AI's global endpoint" in d["r3"]["detail"] and "regional endpoint" in d["r3"]["advice"]
    assert (d["r4"]["kind"], d["r4"]["writer_id"]) == ("stale_read", "r2")


def test_qwen_code_chains_are_rebuilt_and_a_compression_replaces_them(tmp_path: Path) -> None:
    """Qwen Code chains its records as Claude Code does (parts in Gemini's shape: `[{"text": …}]` is 13 bytes
    of keys and quotes, so 387 characters make 400 bytes, 100 tokens); its compression record is a link of the
    chain, after which the summary stands for the whole history."""
    base = {"sessionId": "q-1", "cwd": "/work/app", "version": "0.15.0"}

    def rec(uuid: str, parent: str | None, t: float, kind: str, text: str | None = None, **more: Any) -> dict:
        out = {**base, "uuid": uuid, "parentUuid": parent, "timestamp": at(t), "type": kind, **more}
        if text is not None:
            role = "model" if kind == "assistant" else "user"
            out["message"] = {"role": role, "parts": [{"text": text.ljust(387, "x")}]}
        return out

    def usage(prompt: int, cached: int) -> dict[str, int]:
        return {"promptTokenCount": prompt, "candidatesTokenCount": 10, "cachedContentTokenCount": cached,
                "totalTokenCount": prompt + 10}

    lines = [rec("q1", None, 0, "user", "fix it"),
             rec("q2", "q1", 2, "assistant", "looking", model="qwen3-coder-plus", usageMetadata=usage(12_000, 0)),
             rec("q3", "q2", 3, "tool_result", "output"),
             rec("q4", "q3", 5, "assistant", "done", model="qwen3-coder-plus", usageMetadata=usage(12_200, 11_904)),
             rec("q5", "q4", 6, "system", subtype="chat_compression",
                 systemPayload={"info": {"originalTokenCount": 12_210, "newTokenCount": 2_000}}),
             rec("q6", "q5", 8, "assistant", "next", model="qwen3-coder-plus", usageMetadata=usage(2_300, 0))]
    path = tmp_path / "projects" / "-work-app" / "chats" / "q-1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    history = {r.id: r.extra["history"] for r in load_any([path])}
    assert history["q2"] == {"messages": 1, "tokens": 100}
    assert history["q4"] == {"messages": 3, "tokens": 300}  # q1 q2 q3: user, model, tool result
    assert history["q6"]["change"] == {"kind": "compacted", "index": 0, "tokens_before": 0}


def test_opencode_parts_rebuild_each_request_and_its_compaction(tmp_path: Path) -> None:
    """OpenCode keeps each message's content as rows of its `part` table: every part here is 400 characters of
    JSON (100 tokens). The compaction agent's summary stands for the history after it."""
    import sqlite3

    db = sqlite3.connect(tmp_path / "opencode.db")
    db.execute("CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER, "
               "time_updated INTEGER, data TEXT)")
    db.execute("CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT, time_created INTEGER, "
               "time_updated INTEGER, data TEXT)")
    t0 = 1_780_000_000_000

    def message(n: int, role: str, agent: str = "build", read: int = 0) -> None:
        data: dict[str, Any] = {"role": role, "time": {"created": t0 + 1000 * n, "completed": t0 + 1000 * n + 500}}
        if role == "assistant":
            data.update(agent=agent, providerID="anthropic", modelID="claude-sonnet-4-5",
                        tokens={"input": 3, "output": 10, "reasoning": 0, "cache": {"read": read, "write": 100}})
        db.execute("INSERT INTO message VALUES (?, 'ses_1', ?, ?, ?)", (f"msg_{n:02d}", t0 + 1000 * n,
                                                                          t0 + 1000 * n, json.dumps(data)))
        text = json.dumps({"type": "text", "text": ""})  # 26 characters: 374 more make 400
        db.execute("INSERT INTO part VALUES (?, ?, 'ses_1', ?, ?, ?)",
                   (f"prt_{n:02d}", f"msg_{n:02d}", t0 + 1000 * n + 1, t0 + 1000 * n + 1,
                    json.dumps({"type": "text", "text": f"{n:02d}".ljust(400 - len(text), "x")})))

    message(1, "user")
    message(2, "assistant")
    message(3, "user")
    message(4, "assistant", read=2_000)
    message(5, "assistant", agent="compaction")
    message(6, "user")
    message(7, "assistant")
    db.commit()
    db.close()
    history = {r.id: r.extra["history"] for r in load_any([tmp_path / "opencode.db"])}
    assert history["msg_02"] == {"messages": 1, "tokens": 100}
    assert history["msg_04"] == {"messages": 3, "tokens": 300}
    assert history["msg_05"] == {"messages": 4, "tokens": 400}  # the compaction agent is sent all of it
    # build's next request: the summary (msg_05) and the new prompt, nothing of what msg_04 was sent
    assert history["msg_07"] == {"messages": 2, "tokens": 200,
                                 "change": {"kind": "compacted", "index": 0, "tokens_before": 0}}


def _rollout_with_misses_to_the_start(tmp_path: Path) -> Path:
    """Codex requests whose items only grow (each turn a 2,000-character question and answer), two of which
    read only the first 4,992 tokens (the instructions and tools every request starts with), each followed by
    a full read: an implicit cache (gpt-5.3-codex, 128-token steps) keeps each request's whole prompt whatever
    it read."""
    c = _CodexRollout()
    for n, (input_tokens, cached) in enumerate([(10_000, 0), (11_000, 9_984), (12_000, 4_992), (13_000, 11_904),
                                                (14_000, 4_992)]):
        for role in ("user", "assistant"):
            c.add(10 * n, "response_item", {"type": "message", "role": role,
                                            "content": [{"type": "input_text", "text": f"{n}{role}" + "x" * 2_000}]})
        c.count(10 * n + 5, input_tokens, cached)
    return c.write(tmp_path)


def test_an_implicit_caches_miss_does_not_swell_the_estimate_of_its_messages(tmp_path: Path) -> None:
    """A Codex rollout read 4,992 of a 12,000-token prompt, then the next request read the whole of it again:
    the level rose by the prompt's growth (1,000 tokens), not by 6,912 (what was read before the miss to what
    was read after). Learning the latter made the messages swell past the whole prompt and left "about 0
    tokens" for the tools and system (a public Codex Desktop rollout: 922,040 message tokens for a
    182,478-token prompt). By construction the first prompt is 10,000 tokens of which its first turn is about
    1,000 (2 x 2,000 characters), so about 9,000 precede the messages; cdx-1#4's entry is its whole prompt on
    the 128-token grid, 13,000 - 72 = 12,928 tokens, and the 4,992-token read ends well within the 9,000."""
    report = kvprobe.analyse([str(_rollout_with_misses_to_the_start(tmp_path))]).to_json()
    d = {r["id"]: r["diagnoses"][0] for r in report["requests"] if r["diagnoses"]}
    detail = d["cdx-1#5"]["detail"]
    found = re.search(r"the read ends within what precedes the messages the log shows \(tools, system and any "
                      r"context it does not show: about ([\d,]+) tokens, estimated\)", detail)
    assert found, detail
    assert 8_500 <= int(found.group(1).replace(",", "")) <= 9_500, detail
    assert "the read fell from 11,904 to 4,992 tokens" in detail


def test_a_read_of_what_every_request_starts_with_names_no_earlier_request(tmp_path: Path) -> None:
    """cdx-1#3 read the first 4,992 tokens, which the cache held before it (every request starts with them):
    that level is none of its entries, so cdx-1#5's read of the same 4,992 tokens is no read of an entry cdx-1#3
    left (another replica's): it fell to a size the session's reads fall to again and again, a start its
    prompts share."""
    report = kvprobe.analyse([str(_rollout_with_misses_to_the_start(tmp_path))]).to_json()
    d = {r["id"]: r["diagnoses"][0] for r in report["requests"] if r["diagnoses"]}
    assert (d["cdx-1#5"]["kind"], d["cdx-1#5"].get("writer_id")) == ("unexplained", None), d["cdx-1#5"]
    assert "a start its prompts share, such as the instructions and tools" in d["cdx-1#5"]["detail"]
    assert "breakpoint" not in d["cdx-1#5"]["detail"]  # an implicit cache has none


def test_a_call_logged_with_no_tokens_is_no_anchor_for_the_estimate(tmp_path: Path) -> None:
    """Gemini CLI logs a failed call as a gemini message with every count 0 (a public session shows one). From
    0 to the next request's 12,400 tokens is no growth of the messages; learned as one, the estimate of the
    messages swelled past the whole prompt and left "about 0 tokens" for the tools and system. By construction
    each message is 400 characters (about 100 tokens) and each turn adds 200 tokens, so of the 12,400 tokens
    of g-1:m8 about 11,700 precede its seven messages, and the 11,000-token read of g-1:m10 ends within them."""
    def msg(i: str, kind: str, t: float, prompt: int | None = None, cached: int = 0) -> dict[str, Any]:
        out: dict[str, Any] = {"id": i, "timestamp": at(t), "type": kind, "content": f"{i} " + "x" * 396}
        if prompt is not None:  # (a prompt of 0: every count 0)
            output = 20 if prompt else 0
            out.update(model="gemini-2.5-pro", tokens={"input": prompt, "output": output, "cached": cached,
                                                         "thoughts": 0, "tool": 0, "total": prompt + output})
        return out

    lines = [{"sessionId": "g-1", "projectHash": "abc", "startTime": at(0)},
             msg("m1", "user", 0), msg("m2", "gemini", 5, 12_000),
             msg("m3", "user", 10), msg("m4", "gemini", 15, 12_200, 11_900),
             msg("m5", "user", 20), msg("m6", "gemini", 25, 0),
             msg("m7", "user", 30), msg("m8", "gemini", 35, 12_400, 12_100),
             msg("m9", "user", 40), msg("m10", "gemini", 45, 12_600, 11_000)]
    path = tmp_path / "chats" / "session-2026-11-20T09-00-g-1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = kvprobe.analyse([str(path)]).to_json()
    detail = next(r["diagnoses"][0]["detail"] for r in report["requests"] if r["id"] == "g-1:m10")
    found = re.search(r"the read ends within what precedes the messages the log shows \(tools, system and any "
                      r"context it does not show: about ([\d,]+) tokens, estimated\)", detail)
    assert found, detail
    assert 11_500 <= int(found.group(1).replace(",", "")) <= 12_000, detail
