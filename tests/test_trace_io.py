"""Trace records: streaming read, validation with file/line/field, duplicates, provider inference, writing."""
from __future__ import annotations

import json

import pytest

from conftest import anthropic_body, openai_chat_body
from kvprobe.errors import InputError
from kvprobe.trace import ReadStats, TraceRecord, read_trace, write_trace


def lines(path, *records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_reads_records_and_infers_providers(tmp_path):
    path = lines(tmp_path / "t.jsonl",
                 {"id": "a", "request": anthropic_body(), "started_at": "2026-09-10T10:07:55Z",
                  "first_token_at": "2026-09-10T10:07:57.4Z", "custom": {"x": 1}},
                 {"id": "b", "endpoint": "/v1/chat/completions", "request": openai_chat_body(model="deepseek-chat")},
                 {"id": "c", "response": {"usage": {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}}}},
                 "")
    recs = list(read_trace(path))
    assert [r.provider for r in recs] == ["anthropic", "deepseek", "openai"]
    assert recs[0].first_token_at - recs[0].started_at == pytest.approx(2.4)
    assert recs[0].extra == {"custom": {"x": 1}}  # unknown keys kept
    assert (recs[0].source, recs[0].line) == (str(path), 1)


@pytest.mark.parametrize("bad, field", [
    ({"request": {}}, "id"),
    ({"id": "x"}, "request"),
    ({"id": "x", "request": [], }, "request"),
    ({"id": "x", "request": {"messages": []}, "started_at": "yesterday"}, "started_at"),
    ({"id": "x", "request": {"messages": []}, "provider": "acme"}, "provider"),
])
def test_invalid_records_name_line_and_field(tmp_path, bad, field):
    path = lines(tmp_path / "t.jsonl", {"id": "ok", "request": anthropic_body()}, bad)
    with pytest.raises(InputError) as err:
        list(read_trace(path))
    assert (err.value.line, err.value.field) == (2, field)
    assert str(path) in str(err.value)


def test_duplicate_ids_are_detected(tmp_path):
    rec = {"id": "same", "request": anthropic_body()}
    with pytest.raises(InputError, match="duplicate id 'same' \\(first seen on line 1\\)"):
        list(read_trace(lines(tmp_path / "t.jsonl", rec, rec)))


def test_lenient_mode_counts_malformed_lines(tmp_path):
    path = lines(tmp_path / "t.jsonl", {"id": "a", "request": anthropic_body()}, '{"id": "b", "requ',
                 {"id": "c", "request": anthropic_body()})
    stats = ReadStats()
    recs = list(read_trace(path, strict=False, stats=stats))
    assert [r.id for r in recs] == ["a", "c"]
    assert stats.skipped == 1 and "t.jsonl:2" in stats.errors[0]


def test_write_then_read_round_trips(tmp_path):
    rec = TraceRecord(id="r1", provider="anthropic", started_at=1_757_498_875.5, request=anthropic_body(),
                      response={"usage": {"input_tokens": 3}}, session="s", agent="main")
    path = tmp_path / "out.jsonl"
    assert write_trace(path, [rec, TraceRecord(id="r2", provider="openai", started_at=None,
                                               response={"usage": {"prompt_tokens": 1}})]) == 2
    back = list(read_trace(path))
    assert back[0].request == rec.request and back[0].started_at == pytest.approx(rec.started_at)
    assert json.loads(path.read_text().splitlines()[0])["started_at"] == "2025-09-10T10:07:55.500Z"


def test_failed_write_leaves_nothing_half_written(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("previous\n")

    def records():
        yield TraceRecord(id="r1", provider="anthropic", started_at=None, request=anthropic_body())
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError):
        write_trace(path, records())
    assert path.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


@pytest.mark.parametrize("stamp", [-62135596801, "0001-01-01T00:00:00Z", 1e20])
def test_out_of_range_times_are_input_errors(tmp_path, stamp):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "x", "request": anthropic_body(), "started_at": stamp}) + "\n")
    with pytest.raises(InputError) as err:
        list(read_trace(path))
    assert (err.value.line, err.value.field) == (1, "started_at")


def test_records_reread_by_offset_are_the_records_read(tmp_path):
    """A report re-reads records by their byte offsets through one open file (`RecordReader`): each is the
    record the reading gave, a line longer than one read of the file (200,000 characters) whole, the last line
    without its newline too, and a reader sent elsewhere (pickled) opens the file again there."""
    import pickle
    from dataclasses import replace

    from kvprobe.trace.reader import RecordReader

    long_text = "word " * 40_000
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "a", "request": anthropic_body()}) + "\n"
                    + json.dumps({"id": "b", "request": anthropic_body(system=long_text)}) + "\n"
                    + json.dumps({"id": "c", "request": openai_chat_body()}))  # no newline at the end
    read = list(read_trace(path))
    assert [r.offset for r in read] == [0, len(path.read_bytes().split(b"\n")[0]) + 1, read[2].offset]
    reader = RecordReader()
    again = [reader.read(path, r.offset, r.line) for r in reversed(read)][::-1]
    as_read = [replace(r, offset=None) for r in read]  # (a record read again does not carry its offset)
    assert again == as_read
    assert again[1].request["system"] == long_text
    elsewhere = pickle.loads(pickle.dumps(reader))
    assert elsewhere.read(str(path), read[2].offset, 3) == as_read[2]
    with pytest.raises(FileNotFoundError):
        RecordReader().read(tmp_path / "gone.jsonl", 0)
