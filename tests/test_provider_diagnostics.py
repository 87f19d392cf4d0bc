"""The provider's own cache diagnostics (Anthropic `diagnostics.previous_message_id` -> `cache_miss_reason`).

`serve --emulate anthropic/...` answers it the way the API documents it, checked through the real
`anthropic` SDK; `run-probe --diagnostics` sends it and shows the API's verdict beside kvprobe's; logs that
carry it (captured traces, Claude Code transcripts) make `report` and `watch` show the cause as reported.
"""
from __future__ import annotations

import json
import random

import anthropic
import pytest
from jsonschema import Draft202012Validator

from conftest import ROOT
from kvprobe.analysis.reported import Reported, expected_reason, read_reported
from kvprobe.capture.testing import FakeProvider
from kvprobe.schemas import load_schema
from kvprobe.serve import start_server

MODEL = "claude-opus-5"  # minimum cacheable prefix: 512 tokens (the tiny model's byte tokens)
LONG = "You are a careful coding agent. Read the files before you edit them. " * 9


@pytest.fixture(scope="module")
def server():
    with start_server(model="tiny-random", cache="emulate", emulate=f"anthropic/{MODEL}", device="cpu",
                      num_blocks=2048) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)


def _body(system: str = LONG, turns: int = 1, **extra) -> dict:
    messages = [{"role": "user", "content": "Fix the cart."}]
    for i in range(1, turns):
        messages += [{"role": "assistant", "content": f"Step {i}."}, {"role": "user", "content": f"Result {i}."}]
    return {"model": MODEL, "max_tokens": 2,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": messages, **extra}


def _raw(client, body: dict) -> dict:
    """The response JSON as sent on the wire (to tell a null diagnostics object from an absent one)."""
    return json.loads(client.messages.with_raw_response.create(**body).http_response.text)


def test_the_four_documented_response_states_are_read():
    assert read_reported({"usage": {}}) is None  # not requested
    assert read_reported({"diagnostics": None}) == Reported(None)  # no divergence / first turn
    assert read_reported({"diagnostics": {"cache_miss_reason": None}}).pending
    got = read_reported({"diagnostics": {"cache_miss_reason": {"type": "tools_changed",
                                                               "cache_missed_input_tokens": 4200}}})
    assert got == Reported("tools_changed", 4200) and got.is_cause
    assert not read_reported({"diagnostics": {"cache_miss_reason": {"type": "unavailable"}}}).is_cause


def test_kvprobe_states_its_own_view_in_the_api_words():
    base = _body(turns=2)
    assert expected_reason(base, _body(turns=3)) is None  # turns appended: no divergence
    edited = _body(turns=3)
    edited["messages"][0]["content"] = "Fix the basket."
    assert expected_reason(base, edited) == "messages_changed"
    assert expected_reason(base, _body("Today is Friday. " + LONG, turns=2)) == "system_changed"
    tools = [{"name": "grep", "description": "Search", "input_schema": {"type": "object"}}]
    assert expected_reason(base, _body(turns=2, tools=tools)) == "tools_changed"
    assert expected_reason(base, _body(turns=2, speed="fast")) == "model_changed"
    assert expected_reason(base, _body(turns=2, tool_choice={"type": "any"})) == "unavailable"


def test_serve_answers_each_documented_reason(client):
    first = _raw(client, _body(turns=2, diagnostics={"previous_message_id": None}))
    assert "diagnostics" in first and first["diagnostics"] is None  # opted in, nothing to compare
    def reason(body: dict) -> dict | None:
        diag = _raw(client, body | {"diagnostics": {"previous_message_id": first["id"]}})["diagnostics"]
        return None if diag is None else diag["cache_miss_reason"]
    assert reason(_body(turns=3)) is None  # only appended
    edited = _body(turns=3)
    edited["messages"][0]["content"] = "Fix the basket."
    changed = reason(edited)
    assert changed["type"] == "messages_changed" and isinstance(changed["cache_missed_input_tokens"], int)
    assert reason(_body("Today is Friday. " + LONG, turns=2))["type"] == "system_changed"
    assert reason(_body(turns=2, speed="fast"))["type"] == "model_changed"  # "model or speed differs"
    assert reason(_body(turns=2, tool_choice={"type": "auto"})) == {"type": "unavailable"}
    silent = _raw(client, _body(turns=2))
    assert "diagnostics" not in silent  # not asked: no field, and no fingerprint kept
    assert reason_for(client, silent["id"]) == {"type": "previous_message_not_found"}


def reason_for(client, previous: str) -> dict | None:
    diag = _raw(client, _body(turns=2, diagnostics={"previous_message_id": previous}))["diagnostics"]
    return None if diag is None else diag["cache_miss_reason"]


def test_a_streamed_answer_carries_diagnostics_on_message_start(client):
    first = client.messages.create(**_body(LONG + "stream", diagnostics={"previous_message_id": None}))
    body = _body("Now: 09:14. " + LONG + "stream", diagnostics={"previous_message_id": first.id})
    with client.messages.stream(**body) as stream:
        start = next(e for e in stream if e.type == "message_start")
        final = stream.get_final_message()
    assert start.message.diagnostics.cache_miss_reason.type == "system_changed"
    reason = final.diagnostics.cache_miss_reason
    # the first request left its system prompt cacheable; none of it could be read
    assert reason.type == "system_changed" and reason.cache_missed_input_tokens == \
        first.usage.cache_creation_input_tokens


@pytest.fixture
def document(tmp_path):
    """~820 characters: over the model's minimum as kvprobe estimates it, inside the tiny model's context."""
    rng = random.Random(7)
    path = tmp_path / "doc.txt"
    path.write_text("".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?-") for _ in range(820)))
    return path


def test_run_probe_diagnostics_shows_the_api_verdict_beside_kvprobes(server, document, tmp_path, monkeypatch,
                                                                    cli):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-local")
    log = tmp_path / "probe.jsonl"
    shown = cli("run-probe", document, "--provider", "anthropic", "--model", MODEL, "--base-url",
                server.base_url, "--diagnostics", "--out", log)
    assert shown.exit_code == 0, shown.output
    row = next(line for line in shown.output.splitlines() if "4 changed_beginning" in line)
    assert row.count("system_changed") == 2 and "agree" in row  # the API's verdict, then kvprobe's
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert sent[0]["request"]["diagnostics"] == {"previous_message_id": None}
    assert [s["request"]["diagnostics"]["previous_message_id"] for s in sent[1:]] == \
        [s["response"]["id"] for s in sent[:-1]]  # each request names the one before it
    reasons = [None if s["response"]["diagnostics"] is None else s["response"]["diagnostics"]["cache_miss_reason"]
               for s in sent]
    assert reasons[:2] == [None, None]  # opt-in; an identical request
    assert reasons[2]["type"] == "messages_changed"  # only the question differs
    assert reasons[3]["type"] == "system_changed"  # the version marker at the document's start
    assert reasons[3]["cache_missed_input_tokens"] == sent[2]["usage"]["cache_read_input_tokens"]
    as_json = json.loads(cli("run-probe", document, "--provider", "anthropic", "--model", MODEL, "--base-url",
                             server.base_url, "--diagnostics", "--json").output)
    Draft202012Validator(load_schema("run-probe")).validate(as_json)  # still the documented shape
    compared = [r["diagnostics_compared"] for r in as_json["requests"]]
    assert [c["api_reason"] for c in compared] == [None, None, "messages_changed", "system_changed"]
    assert all(c["agree"] for c in compared)


def test_run_probe_diagnostics_is_for_the_anthropic_api_only(cli, document):
    result = cli("run-probe", document, "--provider", "openai", "--diagnostics")
    assert result.exit_code == 2 and "--diagnostics" in result.output and "Anthropic" in result.output


def _transcript(tmp_path, reason: dict) -> str:
    """Claude Code lines for two requests; the second's message carries the API's diagnostics."""
    def line(uuid, parent, kind, stamp, **extra):
        return json.dumps({"parentUuid": parent, "isSidechain": False, "sessionId": "d1", "type": kind,
                           "uuid": uuid, "timestamp": f"2026-09-10T10:00:{stamp:02d}.000Z", **extra}) + "\n"

    def answer(uuid, parent, stamp, rid, usage, diagnostics=None):
        message = {"id": f"msg_{rid}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                   "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": usage}
        if diagnostics is not None:
            message["diagnostics"] = diagnostics
        return line(uuid, parent, "assistant", stamp, requestId=rid, message=message)
    folder = tmp_path / "projects" / "-home-me-app"
    folder.mkdir(parents=True)
    (folder / "d1.jsonl").write_text(
        line("u1", None, "user", 0, message={"role": "user", "content": "go"})
        + answer("a1", "u1", 2, "R1", {"input_tokens": 5, "cache_creation_input_tokens": 12000,
                                       "cache_read_input_tokens": 0, "output_tokens": 50})
        + line("u2", "a1", "user", 10, message={"role": "user", "content": "more"})
        + answer("a2", "u2", 12, "R2", {"input_tokens": 5, "cache_creation_input_tokens": 12100,
                                        "cache_read_input_tokens": 0, "output_tokens": 50},
                 {"cache_miss_reason": reason}))
    return str(tmp_path / "projects")


def test_report_and_watch_mark_a_reported_cause_as_reported(tmp_path, cli):
    logs = _transcript(tmp_path, {"type": "system_changed", "cache_missed_input_tokens": 11900})
    data = json.loads(cli("report", logs, "--json").output)
    [cause] = data["requests"][1]["diagnoses"]
    assert cause["kind"] == "prefix_changed" and cause["path"] == "system" and cause["inferred"] is False
    assert cause["reported_missed_tokens"] == 11900
    assert "why: provider reported: system_changed (about 11,900 input tokens" in cli("report", logs).output
    watched = cli("watch", logs, "--once")
    assert watched.exit_code == 0 and "(reported by the API)" in watched.output


def test_a_reason_that_names_no_cause_leaves_kvprobes_inference(tmp_path, cli):
    logs = _transcript(tmp_path, {"type": "previous_message_not_found"})
    data = json.loads(cli("report", logs, "--json").output)
    causes = data["requests"][1]["diagnoses"]
    assert causes and all(c["inferred"] for c in causes)  # the prompt grew but the read dropped: inferred


def test_run_probe_says_when_the_api_returns_no_diagnostics(cli, monkeypatch):
    fake = FakeProvider()  # a wire-level stand-in that knows nothing of diagnostics
    fake.start()
    try:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-local")
        result = cli("run-probe", ROOT / "examples" / "public_notes.txt", "--provider", "anthropic", "--base-url",
                     fake.url, "--diagnostics")
    finally:
        fake.stop()
    assert result.exit_code == 0, result.output
    assert "the API returned no diagnostics object" in result.output
