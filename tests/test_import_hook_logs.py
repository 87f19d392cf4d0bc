"""Transcripts in the shapes people commit them: a hook's `logs/chat.json` (one JSON array of the transcript's
lines), a one-line `teleported-from` stub; format sniffing from a bounded prefix (a 2 GB file in a scanned
folder, a first line longer than the prefix); Ollama-served models. Figures set by hand."""
from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from agent_logs import ClaudeTranscript, CodexRollout
from kvprobe.importers import ImportReport, detect_format, load_any
from kvprobe.usage import normalize_usage

MODEL = "claude-sonnet-4-5"


def _transcript() -> ClaudeTranscript:
    s = ClaudeTranscript("c1")
    s.turn(0, "r1", read=0, write=12_000, fresh=5, output=40)
    s.turn(30, "r2", read=12_000, write=300, fresh=5, output=60)
    s.turn(70, "r3", read=12_300, write=500, fresh=5, output=90)
    return s


def _write_array(lines: list[dict], path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(lines, indent=2))  # as the hook writes it: pretty-printed, one document


def _facts(records):
    return [(r.id, r.session, r.agent, r.started_at, r.finished_at, r.usage) for r in records]


def test_chat_json_is_read_as_its_json_lines_twin(tmp_path):
    s = _transcript()
    twin = s.write(tmp_path / "jsonl" / "c1.jsonl")
    chat = tmp_path / "hook" / "logs" / "chat.json"
    _write_array(s.lines, chat)
    assert detect_format(chat) == "claude_code"
    from_lines, from_array = list(load_any(twin)), list(load_any(chat))
    assert len(from_array) == 3 and _facts(from_array) == _facts(from_lines)
    # by hand: 3 requests, 5 + 12,000 written, then reads of 12,000 and 12,300
    assert [normalize_usage("anthropic", r.usage).cache_read_tokens for r in from_array] == [0, 12_000, 12_300]
    report = ImportReport()
    assert len(list(load_any([tmp_path], report=report))) == 3  # found in the folder, the twin read once
    assert report.duplicates >= 3 and {s.format for s in report.sources} == {"claude_code"}


def test_versions_of_chat_json_count_each_request_once(tmp_path):
    s = _transcript()
    _write_array(s.lines[:4], tmp_path / "old" / "logs" / "chat.json")  # an earlier commit: the first 2 turns
    _write_array(s.lines, tmp_path / "new" / "logs" / "chat.json")
    report = ImportReport()
    records = list(load_any(tmp_path, report=report))
    assert sorted(r.id for r in records) == ["r1", "r2", "r3"] and report.records == 3


def test_a_broken_chat_json_is_a_counted_skip_in_a_folder(tmp_path):
    s = _transcript()
    s.write(tmp_path / "c1.jsonl")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "chat.json").write_text(json.dumps(s.lines, indent=2)[:-40])  # still being written
    report = ImportReport()
    assert len(list(load_any(tmp_path, report=report))) == 3
    assert report.reasons()["JSON array cut short (a transcript still being written?)"] == 1


def test_a_teleported_from_stub_is_a_known_line_with_no_usage(cli, tmp_path):
    stub = tmp_path / "p" / "t1.jsonl"
    stub.parent.mkdir()
    stub.write_text('{"type":"teleported-from","remoteSessionId":"session_01Abc","branch":"main","messageCount":0}\n')
    _transcript().write(tmp_path / "p" / "c1.jsonl")
    report = ImportReport()
    assert len(list(load_any(tmp_path, report=report))) == 3
    [source] = [s for s in report.sources if s.path == str(stub)]
    assert (source.format, source.ignored, source.skipped_total) == ("claude_code", 1, 0)
    alone = cli("usage", stub)
    assert alone.exit_code == 2 and "no requests found" in alone.output and "not a recognised" not in alone.output


@pytest.mark.parametrize("size", [20 << 10, 100 << 10, 3 << 20])  # past each read (16, 64 KiB), the whole prefix
def test_a_first_line_longer_than_the_sniffed_prefix_is_still_known(tmp_path, size):
    s = _transcript()
    s.lines[1]["message"]["content"] = [{"type": "text", "text": "x" * size}]  # a 20 KB, 100 KB or 3 MB paste
    path = s.write(tmp_path / "big-first.jsonl")
    s.lines.insert(0, s.lines.pop(1))  # the long line first
    path.write_text("".join(json.dumps(line) + "\n" for line in s.lines))
    assert detect_format(path) == "claude_code"


def test_a_2_gb_sparse_json_in_a_scanned_folder_costs_no_memory(tmp_path):
    _transcript().write(tmp_path / "c1.jsonl")
    with (tmp_path / "big.json").open("wb") as fh:
        fh.truncate(2 << 30)  # sparse: 2 GB of NUL bytes, none on disk
    # The peak is the child's own VmHWM: getrusage's ru_maxrss survives fork + exec on Linux, so a child of a
    # large pytest process reports the parent's size (2.5 GB late in the full suite) whatever it read itself.
    code = ("import json, re, sys; from kvprobe.importers import load_any, ImportReport; r = ImportReport(); "
            f"n = len(list(load_any({str(tmp_path)!r}, report=r))); "
            "peak = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)); "
            "print(json.dumps([n, dict(r.reasons()), peak]))")
    n, reasons, rss_kb = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                   check=True).stdout)
    assert n == 3 and reasons == {"file in a named directory is no known format": 1}
    assert rss_kb < 400 << 10  # (it took 4.3 GB when sniffing read the whole .json)


def test_a_document_over_the_limit_is_refused_and_said(cli, tmp_path, monkeypatch):
    s = _transcript()
    s.lines[1]["message"]["content"] = [{"type": "text", "text": "y" * (2 << 20)}]
    chat = tmp_path / "logs" / "chat.json"
    _write_array(s.lines, chat)
    s.write(tmp_path / "c1.jsonl")
    monkeypatch.setenv("KVPROBE_MAX_DOCUMENT_MB", "1")
    report = ImportReport()
    assert len(list(load_any(tmp_path, report=report))) == 3  # the JSON Lines copy
    assert report.reasons()["file too large to read as one JSON document"] == 1
    named = cli("usage", chat)
    assert named.exit_code == 2 and "file too large" in named.output and "KVPROBE_MAX_DOCUMENT_MB" in named.output


def _ollama_rollout(tmp_path, model: str):
    r = CodexRollout("oss1", model=model)
    r.lines[0]["payload"]["model_provider"] = "ollama"
    r.start_turn(1)
    r.request(5, input_tokens=9_000, cached=0)
    r.request(20, input_tokens=9_500, cached=8_800)
    return r.write(tmp_path)


def test_codex_on_ollama_reads_its_cache_and_says_whose_rules(cli, tmp_path):
    _ollama_rollout(tmp_path / "cloud", "kimi-k2.5:cloud")
    _ollama_rollout(tmp_path / "here", "gpt-oss:20b")
    here = json.loads(cli("usage", tmp_path / "here", "--json").output)["totals"]
    # the second request read 8,800 of its 9,500 input tokens (OpenAI's usage shape: cached inside input)
    assert (here["input_tokens"], here["cache_read_tokens"], here["cost_usd"]) == (18_500, 8_800, 0.0)
    text = " ".join(cli("report", tmp_path / "cloud").output.split())
    assert "2 requests served through Ollama" in text
    assert "moonshot/kimi-k2.5:cloud on ollama" in text and "moonshot's own rules" in text
