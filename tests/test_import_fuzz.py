"""Hypothesis fuzzing of every importer: malformed input is an InputError or a counted skip, never a crash.

The default run tries a few hundred cases; `pytest -m slow` runs 10,000 per importer (benchmarks/soak).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import json_spots
from kvprobe.errors import InputError
from kvprobe.importers import ImportReport, load_any
from kvprobe.importers.summary import summarize
from kvprobe.trace.reader import record_from_json

FIX = Path(__file__).parent / "fixtures" / "importers"
SOURCES = {"claude_code": sorted((FIX / "claude").rglob("*.jsonl")), "codex": sorted((FIX / "codex").rglob("*.jsonl")),
           "litellm": [FIX / "litellm/requests.jsonl"], "otel": [FIX / "otel/spans.json"],
           "har": [FIX / "har/session.har"]}
KVPROBE_LINES = [b'{"kvprobe": 1, "id": "a", "provider": "anthropic", "started_at": "2026-09-10T10:00:00Z", '
                 b'"response": {"usage": {"input_tokens": 5, "cache_read_input_tokens": 100}}}']
# lines of the shapes the newer readers handle: a Codex fork (its parent's session_meta, a replayed turn start),
# Gemini CLI JSON Lines with $set updates of every shape
EXTRA_LINES = {
    "codex": [b'{"timestamp":"2026-09-10T11:00:00Z","type":"session_meta","payload":{"id":"f1","forked_from_id":"p1",'
              b'"timestamp":"2026-09-10T11:00:00Z","source":{"subagent":{"thread_spawn":{"parent_thread_id":"p1"}}}}}',
              b'{"timestamp":"2026-09-10T11:00:00Z","type":"session_meta","payload":{"id":"p1"}}',
              b'{"timestamp":"2026-09-10T11:00:00Z","type":"event_msg","payload":{"type":"task_started",'
              b'"started_at":1788000000}}'],
    "gemini_cli": [b'{"sessionId":"s1","projectHash":"h","startTime":"2026-02-11T09:00:00.000Z"}',
                   b'{"$set":{"messages":5}}', b'{"$set":{"lastUpdated":"2026-02-11T09:00:05.000Z"}}',
                   b'{"$rewindTo":"g1"}',
                   b'{"id":"g1","timestamp":"2026-02-11T09:00:04.000Z","type":"gemini","model":"gemini-2.5-flash",'
                   b'"tokens":{"input":20000,"output":100,"cached":0,"thoughts":5,"tool":0,"total":20105}}'],
    "kimi_cli": [b'{"type":"metadata","protocol_version":"1.3"}',
                 b'{"timestamp":1770800000.5,"message":{"type":"StepBegin","payload":{"n":1}}}',
                 b'{"timestamp":1770800003.0,"message":{"type":"StatusUpdate","payload":{"message_id":"m1",'
                 b'"token_usage":{"input_other":1200,"output":50,"input_cache_read":9000,"input_cache_creation":0}}}}',
                 b'{"timestamp":1770800004.0,"message":{"type":"SubagentEvent","payload":{"agent_id":"a1","event":'
                 b'{"type":"StatusUpdate","payload":{"token_usage":{"input_other":5,"output":1,"input_cache_read":0,'
                 b'"input_cache_creation":0}}}}}}',
                 b'{"timestamp":1770800005.0,"message":{"type":"CompactionBegin","payload":{}}}'],
    "copilot_cli": [b'{"type":"metric","name":"gen_ai.client.token.usage"}',
                    b'{"type":"span","traceId":"t1","spanId":"s1","name":"chat gpt-5.4","startTime":[1775934000,0],'
                    b'"endTime":[1775934004,500],"attributes":{"gen_ai.operation.name":"chat","gen_ai.response.model":'
                    b'"gpt-5.4","gen_ai.conversation.id":"c1","gen_ai.response.id":"r1","gen_ai.usage.input_tokens":'
                    b'12000,"gen_ai.usage.output_tokens":10,"gen_ai.usage.cache_read.input_tokens":10240}}',
                    b'{"hrTime":[1775934004,0],"_body":"GenAI inference","attributes":{"gen_ai.usage.input_tokens":5}}'],
}
DOCUMENT_FORMATS = ("har", "otel", "claude_chat")
FORMAT_OF = {"claude_chat": "claude_code"}  # a hook's logs/chat.json: the transcript's lines as one JSON array
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12) | st.sampled_from(["", "<synthetic>", "token_count", "assistant", "2026-09-10T10:00:00Z",
                                              "text/event-stream", "POST", "chunked", "data: {}\n\n"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _lines(fmt: str) -> list[bytes]:
    if fmt == "kvprobe":
        return KVPROBE_LINES
    files = [line for path in SOURCES.get(fmt, []) for line in path.read_bytes().splitlines() if line.strip()]
    return files + EXTRA_LINES.get(fmt, [])


def _document(fmt: str) -> bytes:
    if fmt == "claude_chat":
        return orjson.dumps([orjson.loads(line) for line in _lines("claude_code") if _parses(line)],
                            option=orjson.OPT_INDENT_2)
    return SOURCES[fmt][0].read_bytes()


def _parses(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


@st.composite
def mutated_json(draw, raw: bytes) -> bytes:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    for _ in range(draw(st.integers(1, 3))):
        spots = list(json_spots(value))
        if not spots:
            break
        container, key = draw(st.sampled_from(spots))
        if draw(st.booleans()) and isinstance(container, dict):
            del container[key]
        else:
            container[key] = draw(json_values)
    return orjson.dumps(value)


@st.composite
def mutated_bytes(draw, raw: bytes) -> bytes:
    kind = draw(st.sampled_from(["truncate", "flip", "insert"]))
    if not raw:
        return raw
    at = draw(st.integers(0, len(raw) - 1))
    if kind == "truncate":
        return raw[:at]
    if kind == "flip":
        return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1:]
    return raw[:at] + draw(st.binary(max_size=8)) + raw[at:]


def _content(fmt: str):
    lines = _lines(fmt)
    one = st.sampled_from(lines)
    line = st.one_of(one, one.flatmap(mutated_json), one.flatmap(mutated_json), one.flatmap(mutated_bytes),
                     json_values.map(orjson.dumps), st.binary(max_size=40))
    if fmt in DOCUMENT_FORMATS:
        doc = _document(fmt)
        return st.one_of(mutated_json(doc), mutated_json(doc), mutated_bytes(doc))
    return st.lists(line, min_size=1, max_size=8).map(lambda ls: b"\n".join(ls) + b"\n")


def _check(fmt: str, content: bytes) -> None:
    fd, name = tempfile.mkstemp(suffix={"har": ".har", "claude_chat": ".json"}.get(fmt, ".jsonl"))
    try:
        os.write(fd, content)
        os.close(fd)
        for forced in (FORMAT_OF.get(fmt, fmt), None):
            report = ImportReport()
            try:
                records = list(load_any(name, fmt=forced, report=report))
            except InputError as exc:
                assert exc.file == name  # says which file
                continue
            for record in records:  # each record is a valid trace record after a JSON round trip
                record_from_json(orjson.loads(orjson.dumps(record.to_json())))
            summarize(records)
            # nothing vanishes silently: every line is a record, a duplicate, ignored or a counted skip
            for source in report.sources:
                assert source.records + source.duplicates + source.ignored + source.replayed + source.skipped_total >= \
                    (1 if source.lines else 0)
    finally:
        os.unlink(name)


FORMATS = ["claude_code", "claude_chat", "codex", "gemini_cli", "litellm", "otel", "har", "kvprobe", "kimi_cli",
           "copilot_cli"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_importers_never_crash_on_malformed_input(fmt):
    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        _check(fmt, data.draw(_content(fmt)))
    run()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_importers_never_crash_soak(fmt):
    @settings(max_examples=10_000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        _check(fmt, data.draw(_content(fmt)))
    run()


def test_cli_reports_malformed_lines_without_a_traceback(cli, tmp_path):
    bad = tmp_path / "session.jsonl"
    lines = _lines("claude_code")
    bad.write_bytes(lines[1] + b"\n" + lines[2][:40] + b"\n\xff\xfe garbage\n" + lines[2] + b"\n")
    result = cli("usage", bad)
    assert result.exit_code == 0 and "Traceback" not in result.output
    assert "skipped 1: truncated JSON line" in result.output and "skipped 1: invalid JSON line" in result.output
