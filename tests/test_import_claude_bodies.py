"""Claude Code 2.1.33x logs each request it sends, content-addressed: `api-request-shape` (system and tools),
`api-request-blob` (a message no transcript line holds) and `api-request` (params, the messages as `keep` of
a base request's then the hashes of `tail`, `cacheControl` paths); a hash names a blob or one of the
transcript's own messages as sent (the sha256 of its sorted, compact JSON; a string content as one text
block; an answer's lines joined). Line shapes as Claude Code 2.1.332 wrote them run against `kvprobe serve`;
the texts, ids and counts are written here."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kvprobe.importers import load_any

SESSION = "df1c6872-4786-45fe-af18-e1ef62bb3653"
MODEL = "claude-sonnet-4-5-20250929"
EPH = {"type": "ephemeral"}


def _hash(message: dict) -> str:
    return hashlib.sha256(json.dumps(message, separators=(",", ":"), sort_keys=True,
                                     ensure_ascii=False).encode()).hexdigest()


def _line(kind: str, **fields) -> dict:
    return {"type": kind, "sessionId": SESSION, **fields}


def _request(rid: str, at: str, tail: list[str], keep: int = 0, base: str | None = None,
             marks: list[list] | None = None) -> dict:
    line = _line("api-request", id=rid, timestamp=at, version="2.1.332", shapeHash="s1", keep=keep, tail=tail,
                 params={"model": MODEL, "betas": ["claude-code-20250219"], "max_tokens": 32000},
                 cacheControl=[{"path": p, "value": EPH} for p in marks or []])
    if base:
        line["base"] = base
    return line


def _assistant(uid: str, parent: str, at: str, mid: str, block: dict, read: int, write: int) -> dict:
    return {"type": "assistant", "uuid": uid, "parentUuid": parent, "sessionId": SESSION, "timestamp": at,
            "requestId": f"req_{mid}", "message": {
                "id": mid, "type": "message", "role": "assistant", "model": MODEL, "content": [block],
                "stop_reason": "tool_use", "usage": {"input_tokens": 6, "cache_read_input_tokens": read,
                                                     "cache_creation_input_tokens": write, "output_tokens": 20}}}


def test_the_requests_claude_code_logged_are_rebuilt_on_its_records(tmp_path: Path, cli):
    shape = {"system": [{"type": "text", "text": "You are Claude Code. " * 300}],
             "tools": [{"name": "Read", "description": "Read a file. " * 200, "input_schema": {"type": "object"}}]}
    prompt = {"role": "user", "content": [{"type": "text", "text": "<system-reminder>git status</system-reminder>"},
                                          {"type": "text", "text": "Read README.md"}]}
    text = {"type": "text", "text": "Reading."}
    call = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "README.md"}}
    result = [{"tool_use_id": "toolu_1", "type": "tool_result", "content": "1\t# demo"}]
    # what the second request sends after the prompt: the answer's two lines joined, then the tool result
    answer = {"role": "assistant", "content": [text, call]}
    returned = {"role": "user", "content": result}
    lines = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": SESSION,
         "timestamp": "2026-12-07T08:40:37.500Z", "message": {"role": "user", "content": "Read README.md"}},
        _line("api-request-shape", shapeHash="s1", shape=shape),
        _line("api-request-blob", hash=_hash(prompt), message=prompt),
        _request("r1", "2026-12-07T08:40:37.635Z", [_hash(prompt)], marks=[["system", 0], ["messages", 0, "content", 1]]),
        _assistant("a1", "u1", "2026-12-07T08:40:38.000Z", "msg_1", text, read=0, write=3_000),
        _assistant("a2", "a1", "2026-12-07T08:40:38.001Z", "msg_1", call, read=0, write=3_000),
        {"type": "user", "uuid": "u2", "parentUuid": "a2", "sessionId": SESSION,
         "timestamp": "2026-12-07T08:40:38.100Z", "message": {"role": "user", "content": result}},
        _request("r2", "2026-12-07T08:40:38.482Z", [_hash(answer), _hash(returned)], keep=1, base="r1",
                 marks=[["system", 0], ["messages", 2, "content", 0]]),
        _assistant("a3", "u2", "2026-12-07T08:40:39.000Z", "msg_2", {"type": "text", "text": "It says: demo."},
                   read=3_000, write=120),
    ]
    folder = tmp_path / "projects" / "-work"
    folder.mkdir(parents=True)
    (folder / f"{SESSION}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    first, second = load_any(tmp_path / "projects")
    assert first.request["messages"] == [{**prompt, "content": [prompt["content"][0],
                                                                {**prompt["content"][1], "cache_control": EPH}]}]
    assert first.request["system"][0]["cache_control"] == EPH and first.request["tools"] == shape["tools"]
    assert [m["role"] for m in second.request["messages"]] == ["user", "assistant", "user"]
    assert second.request["messages"][1] == answer  # rebuilt from the transcript's own lines, by their hash
    assert second.request["messages"][2]["content"][0]["cache_control"] == EPH
    assert "cache_control" not in second.request["messages"][0]["content"][1]  # r1's mark is not r2's
    assert second.extra["request_headers"] == {"anthropic-beta": "claude-code-20250219"}
    # with the bodies, the report prices blocks and can simulate fixes; usage reads as before
    data = json.loads(cli("report", tmp_path / "projects", "--json").stdout)
    assert data["blocks"] and "no request bodies" not in (data.get("fixes_note") or "")
    assert json.loads(cli("usage", tmp_path / "projects", "--json").stdout)["totals"]["requests"] == 2


def test_a_request_whose_messages_the_file_does_not_hold_carries_no_body(tmp_path: Path):
    """A tail hash that is neither a blob nor one of the file's messages (a copied, cut file): no body rather
    than a wrong one; the record is read as before, from its usage."""
    shape = {"system": [{"type": "text", "text": "sys"}], "tools": []}
    lines = [_line("api-request-shape", shapeHash="s1", shape=shape),
             _request("r1", "2026-12-07T08:40:37.635Z", ["0" * 64]),
             _assistant("a1", None, "2026-12-07T08:40:38.000Z", "msg_1", {"type": "text", "text": "hi"}, 0, 100)]
    folder = tmp_path / "projects" / "-work"
    folder.mkdir(parents=True)
    (folder / f"{SESSION}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (record,) = load_any(tmp_path / "projects")
    assert record.request is None and record.response["usage"]["cache_creation_input_tokens"] == 100


def test_a_mark_on_a_string_content_marks_the_text_block_it_is_sent_as(tmp_path: Path):
    shape = {"system": [{"type": "text", "text": "sys"}], "tools": []}
    prompt = {"role": "user", "content": "Read README.md"}
    lines = [_line("api-request-shape", shapeHash="s1", shape=shape),
             _line("api-request-blob", hash=_hash(prompt), message=prompt),
             _request("r1", "2026-12-07T08:40:37.635Z", [_hash(prompt)], marks=[["messages", 0, "content", 0]]),
             _assistant("a1", None, "2026-12-07T08:40:38.000Z", "msg_1", {"type": "text", "text": "hi"}, 0, 100)]
    folder = tmp_path / "projects" / "-work"
    folder.mkdir(parents=True)
    (folder / f"{SESSION}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (record,) = load_any(tmp_path / "projects")
    assert record.request["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Read README.md", "cache_control": EPH}]}]
    assert prompt["content"] == "Read README.md"  # the blob itself is left as it was


def test_a_subagents_description_beside_its_transcript_is_claude_codes_own_file(tmp_path: Path, cli):
    """Claude Code 2.1.33x writes subagents/agent-<id>.meta.json (type, model, description) beside each
    subagent's transcript: read as its file, not "no known format"."""
    sub = tmp_path / "projects" / "-work" / SESSION / "subagents"
    sub.mkdir(parents=True)
    line = _assistant("a1", None, "2026-12-07T08:40:38.000Z", "msg_9", {"type": "text", "text": "hi"}, 0, 100)
    (sub / "agent-a8d6.jsonl").write_text(json.dumps({**line, "isSidechain": True, "agentId": "a8d6"}) + "\n")
    (sub / "agent-a8d6.meta.json").write_text(json.dumps({"agentType": "general-purpose", "model": MODEL}))
    data = json.loads(cli("usage", tmp_path / "projects", "--json").stdout)
    assert data["import"]["skipped"] == 0 and data["totals"]["requests"] == 1
