"""Each importer on a small fixture tree with the source's real quirks; load_any's detection and dedupe."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

from kvprobe.errors import InputError
from kvprobe.importers import ImportReport, detect_format, load_any
from kvprobe.trace.reader import record_from_json
from kvprobe.usage import normalize_usage

FIX = Path(__file__).parent / "fixtures" / "importers"


def _load(path, **kw):
    report = ImportReport()
    records = list(load_any(path, report=report, **kw))
    for r in records:  # every importer produces valid contract records (they survive a JSON round trip)
        again = record_from_json(orjson.loads(orjson.dumps(r.to_json())))
        assert again.id == r.id and again.usage == r.usage
    return records, report


def _usage(record):
    return normalize_usage(record.provider, record.usage)


@pytest.mark.parametrize(("outputs", "kept"), [
    ((180, 12), 180),  # a later line with fewer output tokens does not replace the complete usage
    ((12, 180), 180),
    ((180, -5), 180),  # an impossible count is read as 0, so it never replaces a real one
])
def test_claude_code_keeps_the_usage_with_the_most_output_of_a_response(tmp_path, outputs, kept):
    """A response logged as several lines (one per content block) is one request: its usage is the line with
    the largest output count, whichever order the lines come in."""
    folder = tmp_path / "projects" / "-home-me-app"
    folder.mkdir(parents=True)
    lines = [{"type": "user", "uuid": "u1", "timestamp": "2026-09-10T10:00:00.000Z", "sessionId": "s",
              "message": {"role": "user", "content": "hi"}}]
    for i, out in enumerate(outputs):
        lines.append({"type": "assistant", "uuid": f"a{i}", "parentUuid": "u1", "sessionId": "s",
                      "requestId": "req_1", "timestamp": f"2026-09-10T10:00:0{i + 2}.000Z",
                      "message": {"id": "msg_1", "model": "claude-sonnet-4-5", "role": "assistant",
                                  "content": [{"type": "text", "text": f"part {i}"}],
                                  "usage": {"input_tokens": 10, "cache_read_input_tokens": 2000,
                                            "output_tokens": out}}})
    (folder / "s.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = ImportReport()
    records = list(load_any(tmp_path / "projects", report=report))
    assert len(records) == 1 and report.sources[0].duplicates == 1
    assert _usage(records[0]).output_tokens == kept
    assert records[0].finished_at - records[0].started_at == pytest.approx(3.0)  # the last line, 10:00:03


def test_claude_code_reads_both_lines_of_a_line_written_without_its_newline(tmp_path):
    """Claude Code appends its `summary` and `file-history-snapshot` lines to a transcript whose last line was
    cut short of its newline: the assistant line and the appended one arrive as one line (three public
    transcripts show it). Both are read: the response's usage (the only line of request req_2) counts, the line
    is said joined, not skipped. By hand: req_1 2,000 + 10 input, req_2 2,500 + 12; output 30 + 40."""
    folder = tmp_path / "projects" / "-home-me-app"
    folder.mkdir(parents=True)

    def answer(n: int, read: int, fresh: int, out: int) -> dict:
        return {"type": "assistant", "uuid": f"a{n}", "parentUuid": f"u{n}", "sessionId": "s", "requestId": f"req_{n}",
                "timestamp": f"2026-09-10T10:00:0{2 * n}.000Z",
                "message": {"id": f"msg_{n}", "model": "claude-sonnet-4-5", "role": "assistant",
                            "content": [{"type": "text", "text": f"answer {n}"}],
                            "usage": {"input_tokens": fresh, "cache_read_input_tokens": read, "output_tokens": out}}}

    def user(n: int) -> dict:
        return {"type": "user", "uuid": f"u{n}", "timestamp": f"2026-09-10T10:00:0{2 * n - 1}.000Z", "sessionId": "s",
                "message": {"role": "user", "content": f"question {n}"}}

    summary = {"type": "summary", "summary": "Greetings", "leafUuid": "a2"}
    text = "".join(json.dumps(line) + "\n" for line in (user(1), answer(1, 2_000, 10, 30), user(2)))
    text += json.dumps(answer(2, 2_500, 12, 40)) + json.dumps(summary) + "\n"  # the newline lost between them
    (folder / "s.jsonl").write_text(text)
    records, report = _load(tmp_path / "projects")
    assert sorted(r.id for r in records) == ["req_1", "req_2"]
    assert sum(_usage(r).input_tokens for r in records) == 2_010 + 2_512
    assert sum(_usage(r).output_tokens for r in records) == 70
    assert (report.skipped, report.sources[0].joined, report.sources[0].lines) == (0, 1, 4)
    assert any("1 line held two or more lines written with no newline" in line for line in report.summary())
    # a line cut short before the one appended to it is still a skip, named by its reason
    (folder / "s.jsonl").write_text(text.replace('"output_tokens": 40}}}', '"output_tokens": 4'))
    records, report = _load(tmp_path / "projects")
    assert [r.id for r in records] == ["req_1"] and report.reasons() == {"invalid JSON line": 1}


def test_codex_reads_both_objects_of_a_joined_line_and_its_repeated_count_stays_a_repeat(tmp_path):
    """A public Codex rollout holds a `token_count` with the next `task_started` joined to it on one line; read
    as one invalid line, the count was lost, and the same count repeated a few lines on (a rate-limit update)
    became a request of its own, 164,773 tokens counted once where the log has them once. By hand: two calls,
    20,000 + 24,000 input, 19,000 cached in the second."""
    stamp = "2026-04-08T18:06:4{}.000Z"

    def line(t: int, kind: str, **payload) -> str:
        return json.dumps({"timestamp": stamp.format(t), "type": kind, "payload": payload}, separators=(",", ":"))

    def count(t: int, total: tuple[int, int], last: tuple[int, int]) -> str:
        names = ("input_tokens", "cached_input_tokens")
        return line(t, "event_msg", type="token_count",
                    info={"total_token_usage": {**dict(zip(names, total)), "output_tokens": 10, "total_tokens": 1},
                          "last_token_usage": {**dict(zip(names, last)), "output_tokens": 10, "total_tokens": 1}})

    lines = [line(0, "session_meta", id="cdx-j", timestamp=stamp.format(0), cwd="/repo", model_provider="openai"),
             line(0, "turn_context", cwd="/repo", model="gpt-5.4"),
             count(1, (20_000, 0), (20_000, 0)) + line(2, "event_msg", type="task_started", turn_id="t2"),
             count(3, (20_000, 0), (20_000, 0)),  # the same count again: no request
             count(4, (44_000, 19_000), (24_000, 19_000))]
    path = tmp_path / "sessions" / "2026" / "04" / "08" / "rollout-2026-04-08T18-06-40-cdx-j.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    records, report = _load(tmp_path / "sessions")
    assert [(_usage(r).input_tokens, _usage(r).cache_read_tokens) for r in records] == [(20_000, 0), (24_000, 19_000)]
    assert (report.skipped, report.sources[0].joined) == (0, 1)


def test_a_transcript_split_in_chunks_is_read_as_one(tmp_path):
    """Entire's checkpoints (an `entire/checkpoints/v1` branch) split a transcript over 50 MB into `full.jsonl`,
    `full.jsonl.001`, …, each ending at a line. The chunks were not read at all (their names end in .001); a
    Codex rollout's later chunks hold no session_meta and no turn_context of their own. Now the chunks continue
    their file, line numbers too; a chunk whose file is absent is read on its own. By hand: three calls,
    20,000 + 24,000 + 30,000 input, 0 + 19,000 + 23,000 cached, all on gpt-5.4 in session cdx-s."""
    stamp = "2026-04-08T18:06:4{}.000Z"

    def line(t: int, kind: str, **payload) -> str:
        return json.dumps({"timestamp": stamp.format(t), "type": kind, "payload": payload}, separators=(",", ":"))

    totals = [0, 0]

    def count(t: int, last: tuple[int, int]) -> str:
        totals[0], totals[1] = totals[0] + last[0], totals[1] + last[1]
        names = ("input_tokens", "cached_input_tokens")
        return line(t, "event_msg", type="token_count",
                    info={"total_token_usage": {**dict(zip(names, totals)), "output_tokens": 10, "total_tokens": 1},
                          "last_token_usage": {**dict(zip(names, last)), "output_tokens": 10, "total_tokens": 1}})

    lines = [line(0, "session_meta", id="cdx-s", timestamp=stamp.format(0), cwd="/repo", model_provider="openai"),
             line(0, "turn_context", cwd="/repo", model="gpt-5.4"), count(1, (20_000, 0)),
             count(2, (24_000, 19_000)), count(3, (30_000, 23_000))]
    folder = tmp_path / "checkpoints" / "07" / "ebffc93812" / "0"
    folder.mkdir(parents=True)
    (folder / "full.jsonl").write_text("\n".join(lines[:3]) + "\n")
    (folder / "full.jsonl.001").write_text(lines[3] + "\n")
    (folder / "full.jsonl.002").write_text(lines[4] + "\n")
    records, report = _load(tmp_path / "checkpoints")
    got = [(r.session, r.model, _usage(r).input_tokens, _usage(r).cache_read_tokens, r.line) for r in records]
    assert got == [("cdx-s", "gpt-5.4", 20_000, 0, 3), ("cdx-s", "gpt-5.4", 24_000, 19_000, 4),
                   ("cdx-s", "gpt-5.4", 30_000, 23_000, 5)]
    assert [(Path(s.path).name, s.lines) for s in report.sources] == [("full.jsonl", 5)]
    (folder / "full.jsonl").unlink()  # a mirror without the large first chunk: the rest, on its own
    records, report = _load(tmp_path / "checkpoints")
    assert [(_usage(r).input_tokens, _usage(r).cache_read_tokens) for r in records] == [(24_000, 19_000),
                                                                                        (30_000, 23_000)]
    assert [(Path(s.path).name, s.lines) for s in report.sources] == [("full.jsonl.001", 2)]


def test_detects_each_format():
    assert detect_format(FIX / "har/session.har") == "har"
    assert detect_format(FIX / "otel/spans.json") == "otel"
    assert detect_format(FIX / "litellm/requests.jsonl") == "litellm"
    assert detect_format(next((FIX / "codex").rglob("*.jsonl"))) == "codex"
    assert detect_format(FIX / "claude/projects/-home-me-app/1f0c-sess.jsonl") == "claude_code"


def test_every_format_detected_has_an_importer_and_every_importer_is_detected():
    """Detection (importers.formats) lives apart from the importers it names: a format it can answer with
    and no importer reads would crash `load_any`; an importer it cannot answer with is never used."""
    from kvprobe.importers import IMPORTERS
    from kvprobe.importers.formats import SNIFFERS

    assert set(SNIFFERS) == set(IMPORTERS)
    assert all(IMPORTERS[name].sniff is test for name, test in SNIFFERS.items())


def test_claude_code_merges_repeated_lines_skips_synthetic_and_attributes_subagents():
    records, report = _load(FIX / "claude/projects")
    by_id = {r.id: r for r in records}
    assert sorted(by_id) == ["req_01A", "req_01B", "req_01D", "req_01S", "req_02A"]
    first = by_id["req_01A"]  # two lines, one response: merged, the later (complete) usage kept
    assert first.usage["output_tokens"] == 180 and first.usage["cache_creation_input_tokens"] == 12000
    assert first.request is None and first.provider == "anthropic" and first.model.startswith("claude-sonnet-4-5")
    assert first.started_at == pytest.approx(1_789_034_400.0)  # the user turn it answers (parentUuid)
    assert first.finished_at - first.first_token_at == pytest.approx(1.0)
    assert by_id["req_01S"].agent == "agent-7a2b" and by_id["req_01S"].session == "1f0c-sess"
    assert by_id["req_01B"].agent == "main"
    assert by_id["req_01D"].usage["cache_miss_reason"] == "ttl_expired"  # provider reason kept for report
    assert _usage(by_id["req_01D"]).miss_reason == "ttl_expired"
    assert report.duplicates == 2  # a repeated line, and msg_01B copied into the resumed session
    assert report.reasons() == {"truncated JSON line": 1, "synthetic message written by Claude Code (no API call)": 1}


def test_codex_uses_last_token_usage_and_drops_repeated_and_empty_events():
    records, report = _load(FIX / "codex")
    assert [r.id for r in records] == ["0199a-codex-sess#1", "0199a-codex-sess#2"]
    second = records[1]
    u = _usage(second)
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (8600, 7936, 200)
    assert second.model == "gpt-5-codex" and second.session == "0199a-codex-sess" and second.provider == "openai"
    assert second.started_at < second.finished_at
    assert report.duplicates == 1
    assert set(report.reasons()) == {"token_count event without info (rate-limit update only)", "invalid JSON line"}


def test_otel_spans_with_usage_become_records():
    records, report = _load(FIX / "otel")
    claude, gpt = records
    u = _usage(claude)
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens) == (15000, 12000, 2500)
    assert u.fresh_input_tokens == 500
    assert claude.session == "conv-42" and claude.agent == "planner" and claude.model == "claude-sonnet-4-5-20250929"
    assert claude.finished_at - claude.started_at == pytest.approx(3.9)
    g = _usage(gpt)
    assert (g.input_tokens, g.cache_read_tokens) == (9000, 8192) and gpt.error == "rate limited"
    assert report.sources[0].ignored == 1  # the agent span has no usage: not a request, not a skip


def test_litellm_payloads_and_quirks():
    records, report = _load(FIX / "litellm")
    claude, gpt = records
    u = _usage(claude)
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens) == (14000, 12000, 1000)
    assert claude.provider == "anthropic" and claude.request is None  # OpenAI-format input is not Claude's
    assert claude.first_token_at - claude.started_at == pytest.approx(1.2)
    assert gpt.request["messages"][0] == {"role": "system", "content": "be brief"}  # wrapped payload read too
    assert _usage(gpt).cache_read_tokens == 2048
    assert report.reasons() == {"served from LiteLLM's own response cache (no provider call)": 1,
                                "failed call without usage": 1}


def test_har_reassembles_sse_and_keeps_no_headers():
    records, report = _load(FIX / "har")
    stream, chat, limited = records
    assert stream.id == "req_h1" and stream.extra["stream"] is True
    assert stream.usage["cache_read_input_tokens"] == 4096 and stream.usage["output_tokens"] == 12
    assert stream.response["content"][0]["text"] == "Hi"
    assert stream.extra["request_headers"] == {"anthropic-version": "2023-06-01",
                                               "anthropic-beta": "prompt-caching-2024-07-31"}
    assert stream.first_token_at - stream.started_at == pytest.approx(0.422)
    assert chat.usage["prompt_tokens_details"]["cached_tokens"] == 1024  # base64 body decoded
    assert limited.error.startswith("HTTP 429") and "rate_limit_error" in limited.error
    assert "SECRET" not in json.dumps([r.to_json() for r in records])
    assert report.sources[0].ignored == 1 and report.reasons() == {"request body is not JSON": 1}


def test_a_directory_of_mixed_sources_and_dedupe_across_files(tmp_path):
    shutil.copytree(FIX, tmp_path / "logs")
    shutil.copy(FIX / "litellm/requests.jsonl", tmp_path / "logs/litellm/again.jsonl")
    records, report = _load(tmp_path / "logs")
    assert len(records) == 14 and len({r.id for r in records}) == 14
    assert report.duplicates == 3 + 2  # the copied LiteLLM file adds its 2 requests as duplicates
    formats = {s.format for s in report.sources}
    assert formats == {"claude_code", "codex", "otel", "litellm", "har"}


def test_kvprobe_traces_are_read_with_malformed_lines_counted(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"kvprobe": 1, "id": "a", "response": {"usage": {"input_tokens": 5}}}\n{"id": 7\n'
                    '{"kvprobe": 1, "id": "b", "response": {"usage": {"input_tokens": 6}}}\n')
    records, report = _load(path)
    assert [r.id for r in records] == ["a", "b"]
    assert report.skipped == 1 and report.sources[0].format == "kvprobe"


def test_unknown_and_broken_inputs_are_input_errors_naming_the_file(tmp_path):
    junk = tmp_path / "notes.jsonl"
    junk.write_text('{"hello": "world"}\n')
    with pytest.raises(InputError, match="not a recognised trace or log") as info:
        _load(junk)
    assert info.value.file == str(junk)
    broken = tmp_path / "broken.har"
    broken.write_text('{"log": {"entries": [\n{"request": x}\n]}}\n')
    with pytest.raises(InputError) as info:
        _load(broken, fmt="har")
    assert info.value.file == str(broken) and info.value.line == 2
    with pytest.raises(InputError, match="does not exist"):
        _load(tmp_path / "missing")
    with pytest.raises(InputError, match="unknown format"):
        _load(junk, fmt="nope")


def test_parallel_load_gives_the_same_records_and_counts(tmp_path):
    shutil.copytree(FIX, tmp_path / "logs")
    shutil.copy(FIX / "litellm/requests.jsonl", tmp_path / "logs/litellm/again.jsonl")
    serial, serial_report = _load(tmp_path / "logs")
    parallel, parallel_report = _load(tmp_path / "logs", workers=2)
    assert [r.to_json() for r in parallel] == [r.to_json() for r in serial]
    assert parallel_report.to_json() == serial_report.to_json()


def test_processes_are_chosen_by_size_and_by_what_travels_back(tmp_path):
    """--workers 0: one process per core (up to 4) for 13 MB of files read into `usage` rows, one for the same
    files read as whole records (those pay from 64 MB); 11 MB: one process either way."""
    from kvprobe.importers.loading import _auto_workers
    from kvprobe.cpus import usable_cpus

    files = []
    for name, mb in (("a", 6), ("b", 7)):
        files.append(tmp_path / f"{name}.jsonl")
        with files[-1].open("wb") as fh:
            fh.truncate(mb << 20)  # (sparse: the size is what is read from the file system)
    cores = min(usable_cpus(), 4)
    assert _auto_workers(files, reduced=True) == cores and _auto_workers(files) == 1
    with files[1].open("r+b") as fh:
        fh.truncate(5 << 20)
    assert _auto_workers(files, reduced=True) == 1


def test_a_strict_error_read_in_parallel_names_its_file_and_line(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    good = '{"kvprobe": 1, "id": "%s", "response": {"usage": {"input_tokens": 5}}}\n'
    (logs / "a.jsonl").write_text(good % "a1" + '{"kvprobe": 1, "id": 7}\n' + good % "a2")
    for name in ("b", "c", "d"):  # files for the other process
        (logs / f"{name}.jsonl").write_text("".join(good % f"{name}{i}" for i in range(50)))
    for workers in (1, 2):
        with pytest.raises(InputError) as info:
            _load(logs, strict_traces=True, workers=workers)
        assert info.value.file == str(logs / "a.jsonl") and info.value.line == 2


def test_an_error_in_the_other_process_s_files_is_raised_here_naming_its_file_and_line(tmp_path):
    """The later files are read by a forked child: what it raises travels back and is raised as it was."""
    logs = tmp_path / "logs"
    logs.mkdir()
    good = '{"kvprobe": 1, "id": "%s", "response": {"usage": {"input_tokens": 5}}}\n'
    for name in ("a", "b", "c"):
        (logs / f"{name}.jsonl").write_text("".join(good % f"{name}{i}" for i in range(50)))
    (logs / "d.jsonl").write_text(good % "d1" + good % "d2" + '{"kvprobe": 1, "id": 7}\n')
    with pytest.raises(InputError) as info:
        _load(logs, strict_traces=True, workers=2)
    assert info.value.file == str(logs / "d.jsonl") and info.value.line == 3


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_the_first_bad_file_in_file_order_is_named_however_many_processes_read(tmp_path, workers):
    """Two bad files, the first in file order read by a worker and the later by this process (or the other
    way round): the error names the first one, as one process reading them in order does."""
    logs = tmp_path / "logs"
    logs.mkdir()
    good = '{"kvprobe": 1, "id": "%s", "response": {"usage": {"input_tokens": 5}}}\n'
    for k in range(1, 9):
        lines = [good % f"t{k}-{i}" for i in range(9)]
        if k in (1, 6):
            lines[4 if k == 1 else 6] = '{"kvprobe": 1, "id": 7}\n'  # t1.jsonl line 5, t6.jsonl line 7
        (logs / f"t{k}.jsonl").write_text("".join(lines))
    with pytest.raises(InputError) as info:
        _load(logs, strict_traces=True, workers=workers)
    assert (Path(info.value.file).name, info.value.line) == ("t1.jsonl", 5)


def test_a_child_that_dies_costs_time_not_answers(tmp_path, monkeypatch):
    """A child killed mid-read (out of memory, a signal) leaves its files to this process: the same records
    and counts as one process reading them all."""
    import os

    from kvprobe.importers import loading

    shutil.copytree(FIX, tmp_path / "logs")
    serial, serial_report = _load(tmp_path / "logs")
    parent, read_batch = os.getpid(), loading._read_batch

    def dies_in_the_child(*args, **kwargs):
        if os.getpid() != parent:
            os.kill(os.getpid(), 9)
        return read_batch(*args, **kwargs)
    monkeypatch.setattr(loading, "_read_batch", dies_in_the_child)
    parallel, parallel_report = _load(tmp_path / "logs", workers=2)
    assert [r.to_json() for r in parallel] == [r.to_json() for r in serial]
    assert parallel_report.to_json() == serial_report.to_json()


def test_no_process_to_fork_reads_every_file_here(tmp_path, monkeypatch):
    """A system out of processes (fork fails with EAGAIN): the same records and counts, read in one."""
    import errno
    import os

    shutil.copytree(FIX, tmp_path / "logs")
    serial, serial_report = _load(tmp_path / "logs")

    def no_fork():
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
    monkeypatch.setattr(os, "fork", no_fork)
    parallel, parallel_report = _load(tmp_path / "logs", workers=2)
    assert [r.to_json() for r in parallel] == [r.to_json() for r in serial]
    assert parallel_report.to_json() == serial_report.to_json()
