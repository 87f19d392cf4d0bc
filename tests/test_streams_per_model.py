"""Streams are what the provider caches (issue #37 item 6): requests to another model of one session and agent
(Gemini CLI's flash-lite router call, Claude Code's haiku side calls) are separate streams for the causes,
while a genuine mid-session model switch stays a cause. Traces written by hand; the rule is docs/streams.md."""
from __future__ import annotations

import json

FILLER = " Read files before editing them and run the tests that cover each change." * 400  # ~5k tokens
ROUTER = "You are a specialized Task Routing AI. Score the complexity of the request from 1 to 100."
MAIN = "You are Gemini CLI, an autonomous CLI agent specializing in software engineering tasks."
TOOLS = [{"functionDeclarations": [{"name": "read_file", "description": "Read a file." + FILLER[:400]}]}]


def _gemini_body(system: str, tools: list | None, turns: int) -> dict:
    contents = []
    for i in range(turns):
        contents += [{"role": "user", "parts": [{"text": f"fix bug {i}"}]},
                     {"role": "model", "parts": [{"text": f"fixed bug {i}"}]}]
    contents.append({"role": "user", "parts": [{"text": f"fix bug {turns}"}]})
    # The router's instruction is its own short prompt; the main call's system prompt and tools dwarf it (Gemini
    # CLI 0.61.0 through serve: 876 prompt tokens for the flash-lite router call, 9,030 for the pro main call)
    body = {"contents": contents, "systemInstruction": {"parts": [{"text": system + (FILLER if tools else "")}]}}
    return {**body, "tools": tools} if tools else body


def _record(i: int, model: str, body: dict | None, prompt: int, cached: int, **extra) -> dict:
    usage = {"promptTokenCount": prompt, "cachedContentTokenCount": cached, "candidatesTokenCount": 20}
    rec = {"kvprobe": 1, "id": f"r{i}", "session": "s1", "provider": "gemini",
           "endpoint": f"/v1beta/models/{model}:generateContent", "started_at": f"2026-11-30T10:00:{2 * i:02d}Z",
           "response": {"usageMetadata": usage, "modelVersion": model}, **extra}
    if body is not None:
        rec["request"] = body
    return rec


def _report(cli, tmp_path, records: list[dict]) -> dict[str, list[dict]]:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = cli("report", path, "--json")
    assert result.exit_code == 0, result.output
    return {r["id"]: r["diagnoses"] for r in json.loads(result.stdout)["requests"]}


def _mentions(diagnoses: list[dict], ids: set[str]) -> set[str]:
    return {i for d in diagnoses for i in ids if f"{i})" in d["detail"] or f"{i} " in d["detail"]}


def test_gemini_cli_router_and_main_calls_are_separate_streams(cli, tmp_path):
    """Each turn: a flash-lite router call, then the pro main call. The main call of turn 2 reads nothing (a
    provider-side miss). Before: 'model changed' and 'prefix changed at tools[0]' against the router call."""
    records = []
    for turn in range(3):
        router, main = 2 * turn + 1, 2 * turn + 2
        records.append(_record(router, "gemini-2.5-flash-lite", _gemini_body(ROUTER, None, turn), 880 + turn, 0))
        records.append(_record(main, "gemini-2.5-pro", _gemini_body(MAIN, TOOLS, turn), 5300 + 10 * turn,
                               5200 if turn == 2 else 0))
    found = _report(cli, tmp_path, records)
    routers, mains = {"r1", "r3", "r5"}, {"r2", "r4", "r6"}
    for rid, diagnoses in found.items():
        assert not [d for d in diagnoses if d.get("param") == "model"], (rid, diagnoses)
        assert not _mentions(diagnoses, mains if rid in routers else routers), (rid, diagnoses)
    assert [d["kind"] for d in found["r4"]] == ["unexplained"]  # its miss is the provider's, not a change


def test_a_genuine_model_switch_is_diagnosed(cli, tmp_path):
    """Two turns on pro, then the same conversation on flash: the first flash request reads nothing."""
    records = [_record(1, "gemini-2.5-pro", _gemini_body(MAIN, TOOLS, 0), 5300, 0),
               _record(2, "gemini-2.5-pro", _gemini_body(MAIN, TOOLS, 1), 5320, 5280),
               _record(3, "gemini-2.5-flash", _gemini_body(MAIN, TOOLS, 2), 5340, 0)]
    found = _report(cli, tmp_path, records)
    (switch,) = [d for d in found["r3"] if d.get("param") == "model"]
    assert switch["kind"] == "params_changed" and "gemini-2.5-pro" in switch["detail"]


def test_a_switch_after_a_side_call_on_a_third_model_is_diagnosed(cli, tmp_path):
    """Kilo Code through capture: two turns on flash, a flash-lite title call (a prompt of its own), then the
    same conversation on pro, which reads nothing of 5,340 tokens. Before: pro was compared with the title call
    only, sent nothing of it, and started a stream of its own: no miss, no cause."""
    title = {"contents": [{"role": "user", "parts": [{"text": "Write a title for: fix bug 0"}]}]}
    records = [_record(1, "gemini-2.5-flash", _gemini_body(MAIN, TOOLS, 0), 5300, 0),
               _record(2, "gemini-2.5-flash", _gemini_body(MAIN, TOOLS, 1), 5320, 5280),
               _record(3, "gemini-2.5-flash-lite", title, 12, 0),
               _record(4, "gemini-2.5-pro", _gemini_body(MAIN, TOOLS, 2), 5340, 0)]
    found = _report(cli, tmp_path, records)
    (switch,) = [d for d in found["r4"] if d.get("param") == "model"]
    assert switch["kind"] == "params_changed" and "gemini-2.5-flash" in switch["detail"]
    assert "flash-lite" not in switch["detail"]
    assert not [d for d in found["r3"] if d.get("param") == "model"]  # the title call is its own stream


def _claude(i: int, model: str, tokens: tuple[int, int, int]) -> dict:
    fresh, write, read = tokens
    return {"kvprobe": 1, "id": f"c{i}", "session": "cc", "provider": "anthropic", "endpoint": "/v1/messages",
            "started_at": f"2026-11-30T11:00:{2 * i:02d}Z",
            "response": {"model": model, "usage": {"input_tokens": fresh, "cache_creation_input_tokens": write,
                                                   "cache_read_input_tokens": read, "output_tokens": 50}}}


def test_claude_code_haiku_side_calls_in_a_usage_only_log_are_their_own_stream(cli, tmp_path):
    """Usage only: opus turns of ~40k tokens, haiku side calls of ~600 between them. Before: a 'model changed'
    at every opus turn after a haiku call, as if the switch had cost the whole prompt."""
    opus, haiku = "claude-opus-4-5-20251101", "claude-haiku-4-5-20251001"
    records = [_claude(1, opus, (10, 40000, 0)), _claude(2, haiku, (600, 0, 0)),
               _claude(3, opus, (10, 300, 40000)), _claude(4, haiku, (620, 0, 0)),
               _claude(5, opus, (10, 300, 40300))]
    found = _report(cli, tmp_path, records)
    assert all(not [d for d in ds if d.get("param") == "model"] for ds in found.values()), found


def test_a_model_switch_in_a_usage_only_log_is_still_one(cli, tmp_path):
    opus, sonnet = "claude-opus-4-5-20251101", "claude-sonnet-4-5-20250929"
    records = [_claude(1, opus, (10, 40000, 0)), _claude(2, opus, (10, 300, 40000)),
               _claude(3, sonnet, (10, 40600, 0))]
    found = _report(cli, tmp_path, records)
    assert [d["kind"] for d in found["c3"]] == ["params_changed"] and found["c3"][0]["param"] == "model"


def _chat(i: int, model: str, messages: list[dict], prompt: int, cached: int) -> dict:
    usage = {"prompt_tokens": prompt, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": cached}}
    return {"kvprobe": 1, "id": f"q{i}", "session": "qs", "provider": "qwen", "endpoint": "/v1/chat/completions",
            "started_at": f"2026-11-30T12:00:{2 * i:02d}Z",
            "request": {"model": model, "messages": messages, "tools": QWEN_TOOLS},
            "response": {"model": model, "usage": usage}}


QWEN_TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file." + FILLER[:400]}}]


def _qwen_system(model: str) -> dict:
    return {"role": "system", "content": f"You are Qwen Code, running as {model}." + FILLER}


def test_a_switch_whose_agent_rewrites_its_instructions_for_the_new_model_is_diagnosed(cli, tmp_path):
    """Qwen Code names the model in its system prompt (Codex sends per-model instructions): after `-m qwen3-max`
    nothing of the prompt's start is sent again, but the conversation is, at about the same length. The first
    qwen3-max request reads nothing: the switch is its cause (before: no cause, a new stream)."""
    talk = [{"role": "user", "content": "fix bug 0"}, {"role": "assistant", "content": "fixed bug 0"}]
    records = [_chat(1, "qwen3-coder-plus", [_qwen_system("qwen3-coder-plus"), talk[0]], 5300, 0),
               _chat(2, "qwen3-coder-plus", [_qwen_system("qwen3-coder-plus"), *talk,
                                             {"role": "user", "content": "fix bug 1"}], 5320, 5280),
               _chat(3, "qwen3-max", [_qwen_system("qwen3-max"), *talk, {"role": "user", "content": "fix bug 1"},
                                      {"role": "assistant", "content": "fixed bug 1"},
                                      {"role": "user", "content": "fix bug 2"}], 5340, 0)]
    found = _report(cli, tmp_path, records)
    (switch,) = [d for d in found["q3"] if d.get("param") == "model"]
    assert switch["kind"] == "params_changed" and "qwen3-coder-plus" in switch["detail"]
