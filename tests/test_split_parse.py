"""Large traces are parsed on two cores (kvprobe.analysis.split_parse): the result must be exactly what one
pass gives. $KVPROBE_SPLIT_MIN_BYTES lowers the size at which a file is cut, so small hand-made traces take
the two-process path here; the same command without it reads them in one pass, and the outputs must match.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.analysis import split_parse
from kvprobe.analysis.skeleton import BlockStore, skeletons
from kvprobe.trace import read_trace

SYSTEM = "You are a patient build agent working in a monorepo. " * 120


def _body(session: str, turn: int) -> dict:
    messages = []
    for t in range(turn + 1):
        messages.append({"role": "user", "content": f"{session} step {t}: run the tests in package {t}."})
        if t < turn:
            messages.append({"role": "assistant", "content": f"Ran package {t}: {t * 7} passed, {t % 3} failed."})
    return {"model": "claude-sonnet-4-5", "max_tokens": 512,
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "messages": messages}


def _records(prefix: str = "r", sessions: int = 3, turns: int = 7) -> list[dict]:
    """Interleaved sessions; every third record has no start time (inferred from the record before)."""
    out = []
    for turn in range(turns):
        for s in range(sessions):
            n = len(out)
            rec = {"id": f"{prefix}{n}", "session": f"s{s}", "provider": "anthropic",
                   "request": _body(f"s{s}", turn),
                   "response": {"usage": {"input_tokens": 40 + 30 * turn,
                                          "cache_read_input_tokens": 1400 if turn else 0,
                                          "cache_creation_input_tokens": 0 if turn else 1400,
                                          "output_tokens": 25}}}
            if n % 3 != 1:
                rec["started_at"] = f"2026-11-02T10:{turn:02d}:{s * 10:02d}Z"
            out.append(rec)
    return out


def _write(path: Path, records: list[dict], blank_at: int | None = None) -> Path:
    lines = [json.dumps(r) for r in records]
    if blank_at is not None:
        lines.insert(blank_at, "")
    path.write_text("\n".join(lines) + "\n")
    return path


def _report(cli, monkeypatch, *args: str, split: bool) -> tuple[int, str]:
    if split:
        monkeypatch.setenv("KVPROBE_SPLIT_MIN_BYTES", "1")
    else:
        monkeypatch.delenv("KVPROBE_SPLIT_MIN_BYTES", raising=False)
    result = cli("report", *args, "--json")
    return result.exit_code, result.output


@pytest.mark.parametrize("fixes", ["--what-if", "--no-fixes"])
def test_report_on_two_cores_equals_one_pass(cli, monkeypatch, tmp_path, fixes):
    trace = _write(tmp_path / "t.jsonl", _records(), blank_at=11)
    monkeypatch.setenv("KVPROBE_SPLIT_MIN_BYTES", "1")
    assert split_parse._cut(trace) is not None  # the file is really cut in two
    one_code, one = _report(cli, monkeypatch, str(trace), fixes, split=False)
    two_code, two = _report(cli, monkeypatch, str(trace), fixes, split=True)
    assert one_code == two_code == 0, one + two
    assert json.loads(two) == json.loads(one)
    assert json.loads(two)["totals"]["requests"] == 21


def test_two_files_keep_ids_unique_and_order(cli, monkeypatch, tmp_path):
    a = _write(tmp_path / "a.jsonl", _records("r", turns=5))
    b = _write(tmp_path / "b.jsonl", _records("r", turns=4))  # same ids as a.jsonl: made unique by file
    one_code, one = _report(cli, monkeypatch, str(a), str(b), "--what-if", split=False)
    two_code, two = _report(cli, monkeypatch, str(a), str(b), "--what-if", split=True)
    assert one_code == two_code == 0
    assert json.loads(two) == json.loads(one)
    ids = [r["id"] for r in json.loads(two)["requests"]]
    assert len(ids) == len(set(ids)) == 27 and "b:r0" in ids


def test_skeletons_match_a_single_pass_and_share_blocks(monkeypatch, tmp_path):
    trace = _write(tmp_path / "t.jsonl", _records(turns=8), blank_at=3)
    monkeypatch.setenv("KVPROBE_SPLIT_MIN_BYTES", "1")
    seq_store, par_store = BlockStore(), BlockStore()
    seq = list(skeletons(read_trace(trace), seq_store))
    par, kept = split_parse.parse([trace], par_store, [], keep_records=True)
    def fields(sks, store):
        return [(s.id, s.order, s.line, s.offset, s.started_at, s.readable_at,
                 [store.raw[b.cache_key] for b in s.request.blocks]) for s in sks]

    assert fields(par, par_store) == fields(seq, seq_store)
    assert [r.id for r in kept] == [s.id for s in seq] and [r.line for r in kept] == [s.line for s in seq]
    # one object per chained key on both sides of the cut (sizing sizes each shared block once)
    objects = {}
    for sk in par:
        for block in sk.request.blocks:
            assert objects.setdefault(block.cache_key, block) is block
    assert set(objects) == set(seq_store.blocks)


def test_progress_adds_up_to_the_file(monkeypatch, tmp_path):
    trace = _write(tmp_path / "t.jsonl", _records())
    monkeypatch.setenv("KVPROBE_SPLIT_MIN_BYTES", "1")
    seen = []
    split_parse.parse([trace], BlockStore(), [], progress=seen.append)
    assert sum(seen) == trace.stat().st_size


def test_bad_line_after_the_cut_is_named_by_its_line_in_the_file(cli, monkeypatch, tmp_path):
    trace = _write(tmp_path / "t.jsonl", _records())
    lines = trace.read_text().splitlines()
    lines[17] = lines[17][: len(lines[17]) // 2]  # line 18, well after the middle: cut short
    trace.write_text("\n".join(lines) + "\n")
    for split in (False, True):
        code, out = _report(cli, monkeypatch, str(trace), split=split)
        assert code == 2
        assert f"{trace}:18" in out and "truncated line" in out, out


def test_duplicate_id_across_the_cut(cli, monkeypatch, tmp_path):
    records = _records()
    records[19]["id"] = records[2]["id"]
    trace = _write(tmp_path / "t.jsonl", records)
    for split in (False, True):
        code, out = _report(cli, monkeypatch, str(trace), split=split)
        assert code == 2
        assert f"{trace}:20" in out and "duplicate id 'r2' (first seen on line 3)" in out, out


def test_a_trace_out_of_time_order_across_the_cut_equals_one_pass(cli, monkeypatch, tmp_path):
    """This process simulates its share while the other reads the rest; when the rest holds requests that
    started earlier (the first turns written last here), the whole trace is simulated again in start order."""
    records = _records()
    late_written = records[:6] + [records[9]]  # the first two turns, and one of turn 3 without a start time
    trace = _write(tmp_path / "t.jsonl", [r for r in records if r not in late_written] + late_written)
    monkeypatch.setenv("KVPROBE_SPLIT_MIN_BYTES", "1")
    assert split_parse._cut(trace) is not None
    one_code, one = _report(cli, monkeypatch, str(trace), "--no-fixes", split=False)
    two_code, two = _report(cli, monkeypatch, str(trace), "--no-fixes", split=True)
    assert one_code == two_code == 0, one + two
    assert json.loads(two) == json.loads(one)
    writes = [r["id"] for r in json.loads(two)["requests"] if r["predicted"]["cache_write_tokens"]]
    assert writes == ["r0"]  # the first request in time, written last: the shared system prompt's one write
