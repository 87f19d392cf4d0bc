"""`kvprobe watch`: following files as they grow, exactly once per request, and the live analysis.

The end-to-end tests run the real command in a subprocess and append to its inputs while it runs; they
wait for expected output with a deadline (never a sleep). File-level behaviour (partial lines, rotation,
truncation, deletion) is driven poll by poll, which makes each interleaving deterministic.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT
from kvprobe.watch import FileTail, Watch

FIX = ROOT / "tests" / "fixtures" / "importers" / "claude" / "projects"
T0 = "2026-09-10T10:00:{:02d}.000Z"
SYSTEM = "You are a careful coding agent working on a web shop. " * 120


def _turns(count: int) -> list[dict]:
    """An agent conversation of `count` turns; the last one carries a cache breakpoint, as agents place it."""
    msgs = [{"role": "user", "content": "Fix the cart total."}]
    for i in range(1, count):
        msgs += [{"role": "assistant", "content": f"Step {i}: reading cart.py."},
                 {"role": "user", "content": f"Result {i}: def total(items): return sum(items)"}]
    msgs[-1] = {"role": "user", "content": [{"type": "text", "text": msgs[-1]["content"],
                                             "cache_control": {"type": "ephemeral"}}]}
    return msgs


def trace_line(rid: str, second: int, system: str, fresh: int, read: int, write: int, out: int = 100,
               turns: int = 1) -> str:
    """A captured request with the usage the provider returned (figures chosen by hand)."""
    record = {"kvprobe": 1, "id": rid, "session": "s", "agent": "main", "provider": "anthropic",
              "endpoint": "/v1/messages", "started_at": T0.format(second), "finished_at": T0.format(second + 2),
              "request": {"model": "claude-sonnet-4-5", "max_tokens": 512,
                          "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
                          "messages": _turns(turns)},
              "response": {"id": f"msg_{rid}", "usage": {"input_tokens": fresh, "cache_read_input_tokens": read,
                                                         "cache_creation_input_tokens": write,
                                                         "output_tokens": out}}}
    return json.dumps(record) + "\n"


class Running:
    """`kvprobe watch ...` in a subprocess; its stdout lines arrive on a queue as they are written."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "kvprobe", "watch", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def expect(self, count: int, within: float = 60.0) -> list[dict]:
        deadline, got = time.monotonic() + within, []
        while len(got) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"only {len(got)} of {count} lines within {within}s: {got}; "
                                     f"stderr: {self._stderr_now()}")
            try:
                got.append(json.loads(self.lines.get(timeout=left)))
            except queue.Empty:
                continue
        return got

    def _stderr_now(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read() if self.proc.stderr else ""

    def finish(self, within: float = 60.0) -> tuple[int, str]:
        rc = self.proc.wait(timeout=within)
        return rc, self.proc.stderr.read() if self.proc.stderr else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def running():
    started: list[Running] = []

    def start(*args: str) -> Running:
        started.append(Running(*args))
        return started[-1]
    yield start
    for r in started:
        r.stop()


def test_watch_streams_each_request_appended_to_a_trace_while_it_runs(tmp_path, running):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(trace_line("r1", 0, SYSTEM, fresh=0, read=0, write=2010))
    w = running(str(trace), "--json", "--exit-after", "3", "--interval", "0.05")
    [first] = w.expect(1)
    assert first["id"] == "r1" and first["miss"] is False and first["totals"]["requests"] == 1
    line2 = trace_line("r2", 10, SYSTEM, fresh=0, read=2010, write=45, turns=2)
    with trace.open("a") as fh:  # a writer caught half-way through a line: nothing is read until its newline
        fh.write(line2[:200])
        fh.flush()
        fh.write(line2[200:])
    [second] = w.expect(1)
    assert second["id"] == "r2" and second["cache_read_tokens"] == 2010 and second["miss"] is False
    with trace.open("a") as fh:  # the system prompt gained a timestamp at its start
        fh.write(trace_line("r3", 20, "Now: 10:00:20. " + SYSTEM, fresh=0, read=0, write=2070, turns=2))
    [third] = w.expect(1)
    rc, err = w.finish()
    assert rc == 0
    assert third["id"] == "r3" and third["miss"] is True
    cause = third["diagnoses"][0]
    assert cause["kind"] == "prefix_changed" and cause["path"] == "system[0]" and cause["inferred"] is True
    totals = third["totals"]
    assert totals["requests"] == 3 and totals["misses"] == 1
    # hit ratio: 2,010 read of 2,010 + 2,055 + 2,070 input tokens
    assert totals["token_hit_ratio"] == pytest.approx(2010 / 6135, abs=1e-4)
    # claude-sonnet-4-5 per million: $3.75 5m write, $0.30 read, $15 output; 100 output tokens each
    assert totals["cost_usd"] == pytest.approx(0.0090375 + 0.00227175 + 0.0092625, abs=1e-6)
    assert "3 requests" in err and "1 miss" in err


def _session_lines(session: str, message: str, request: str, outputs: list[int]) -> list[str]:
    """A new Claude Code transcript: a user turn, one response written as several lines, a tool result."""
    base = {"isSidechain": False, "userType": "external", "cwd": "/home/me/shop", "sessionId": session,
            "version": "2.0.14"}
    lines = [dict(base, parentUuid=None, type="user", uuid="n1", timestamp="2026-09-12T08:00:00.000Z",
                  message={"role": "user", "content": "Add a coupon field"})]
    for i, out in enumerate(outputs):
        usage = {"input_tokens": 4, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 9000,
                 "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 0},
                 "output_tokens": out}
        lines.append(dict(base, parentUuid="n1" if i == 0 else f"n{i + 1}", type="assistant", uuid=f"n{i + 2}",
                          timestamp=f"2026-09-12T08:00:0{i + 3}.000Z", requestId=request,
                          message={"id": message, "type": "message", "role": "assistant",
                                   "model": "claude-sonnet-4-5-20250929", "content": [{"type": "text", "text": "ok"}],
                                   "stop_reason": None, "usage": usage}))
    lines.append(dict(base, parentUuid=f"n{len(outputs) + 1}", type="user", uuid="t1",
                      timestamp="2026-09-12T08:00:09.000Z",
                      message={"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x",
                                                            "content": "done"}]}))
    return [json.dumps(line) + "\n" for line in lines]


def test_watch_picks_up_a_new_transcript_in_a_claude_folder(tmp_path, running):
    projects = tmp_path / "projects"
    shutil.copytree(FIX, projects)
    w = running(str(projects), "--json", "--exit-after", "6", "--interval", "0.05", "--settle", "60")
    backlog = w.expect(5)
    assert sorted(r["id"] for r in backlog) == ["req_01A", "req_01B", "req_01D", "req_01S", "req_02A"]
    new = projects / "-home-me-shop" / "9c1e-new.jsonl"
    new.parent.mkdir()
    lines = _session_lines("9c1e-new", "msg_N1", "req_N1", outputs=[12, 250])
    with new.open("w") as fh:
        for line in lines:
            fh.write(line)
            fh.flush()
    [fresh] = w.expect(1)
    rc, err = w.finish()
    assert rc == 0
    assert fresh["id"] == "req_N1" and fresh["session"] == "9c1e-new"
    assert fresh["output_tokens"] == 250  # the response's last line, not its first
    assert fresh["input_tokens"] == 9304 and fresh["cache_read_tokens"] == 9000
    assert fresh["totals"]["requests"] == 6
    assert "skipped 1: truncated JSON line" in err  # the fixture's cut-off line, counted, not dropped


def test_a_response_still_being_written_waits_for_what_follows_or_for_quiet(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    path = folder / "s.jsonl"
    now = [0.0]
    w = Watch([folder], settle_s=5.0, clock=lambda: now[0])
    user, part1, part2, tool = _session_lines("s", "msg_X", "req_X", outputs=[7, 400])
    path.write_text(user + part1)
    assert w.step().events == []  # the response's first line: more may follow
    with path.open("a") as fh:
        fh.write(part2)
    assert w.step().events == []
    with path.open("a") as fh:
        fh.write(tool)
    [event] = w.step().events  # something followed it: complete
    assert event.result.usage.output_tokens == 400
    # a response that is the last line of a quiet file counts once the file was quiet for --settle seconds
    path2 = folder / "t.jsonl"
    u2, p2, _t2 = _session_lines("t", "msg_Y", "req_Y", outputs=[30])
    path2.write_text(u2 + p2)
    assert w.step().events == []
    now[0] += 4.9
    assert w.step().events == []
    now[0] += 0.2
    [late] = w.step().events
    assert late.result.sk.id == "req_Y" and w.totals.requests == 2


def test_tail_reads_only_complete_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": ')
    tail = FileTail(path)
    first = tail.poll()
    assert [(n, off, raw) for n, off, raw in first.lines] == [(1, 0, b'{"a": 1}')] and first.partial
    assert tail.poll().lines == []
    with path.open("ab") as fh:
        fh.write(b'2}\n\n{"c": 3}\n')
    assert [(n, off, raw) for n, off, raw in tail.poll().lines] == [(2, 9, b'{"b": 2}'), (4, 19, b'{"c": 3}')]


def test_tail_keeps_lines_written_just_before_rotation_and_deletion(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"one\n")
    tail = FileTail(path)
    assert [raw for _, _, raw in tail.poll().lines] == [b"one"]
    with path.open("ab") as fh:
        fh.write(b"two\n")  # written, then the file is rotated before the next poll
    os.rename(path, tmp_path / "t.jsonl.1")
    path.write_bytes(b"three\n")
    rotated = tail.poll()
    assert [raw for _, _, raw in rotated.lines] == [b"two", b"three"]
    assert [e.kind for e in rotated.events] == ["rotated", "opened"]
    with path.open("ab") as fh:
        fh.write(b"four\n")
    path.unlink()
    gone = tail.poll()
    assert [raw for _, _, raw in gone.lines] == [b"four"] and [e.kind for e in gone.events] == ["deleted"]
    path.write_bytes(b"five\n")
    assert [(n, raw) for n, _, raw in tail.poll().lines] == [(1, b"five")]


def test_tail_rereads_a_truncated_file_from_its_start(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"aaaa\nbbbb\n")
    tail = FileTail(path)
    tail.poll()
    path.write_bytes(b"cc\n")  # same file, shorter: truncated and rewritten
    again = tail.poll()
    assert [e.kind for e in again.events] == ["truncated"] and [raw for _, _, raw in again.lines] == [b"cc"]


def test_a_rotated_trace_rewritten_with_old_and_new_requests_counts_each_once(tmp_path):
    trace = tmp_path / "trace.jsonl"
    a, b, c = (trace_line(r, i * 10, SYSTEM, 0, 2010 if i else 0, 45 if i else 2010, turns=i + 1) for i, r in
               enumerate(("r1", "r2", "r3")))
    trace.write_text(a + b)
    w = Watch([trace])
    assert [e.result.sk.id for e in w.step().events] == ["r1", "r2"]
    trace.rename(tmp_path / "old.jsonl")
    trace.write_text(a + b + c)  # a writer that rewrites the whole file under the same name
    step = w.step()
    assert [e.result.sk.id for e in step.events] == ["r3"] and [e.kind for e in step.file_events] == ["rotated",
                                                                                                       "opened"]
    assert w.totals.requests == 3 and w.duplicates == 2


def test_malformed_lines_are_counted_and_named(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(trace_line("r1", 0, SYSTEM, 10, 0, 2000) + "{not json}\n" + '{"id": "x"}\n')
    w = Watch([trace])
    events = list(w.run(once=True))
    assert [e.result.sk.id for s in events for e in s.events] == ["r1"]
    assert w.skips.total == 2
    assert any(ex.startswith(f"{trace}:2: invalid JSON") for ex in w.skips.examples)
    assert any(ex.startswith(f"{trace}:3: ") and "'request'" in ex for ex in w.skips.examples)


def test_from_end_counts_only_what_is_written_after_watching_starts(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(trace_line("r1", 0, SYSTEM, 10, 0, 2000))
    w = Watch([trace], from_end=True)
    assert w.step().events == []
    with trace.open("a") as fh:
        fh.write(trace_line("r2", 10, SYSTEM, 0, 2010, 45, turns=2))
    assert [e.result.sk.id for e in w.step().events] == ["r2"]


def test_watch_once_shows_each_miss_with_its_cause(cli):
    result = cli("watch", str(ROOT / "traces" / "sample_session.jsonl"), "--once")
    assert result.exit_code == 0, result.output
    assert "6 requests" in result.output and "4 miss(es)" in result.output
    assert "miss req_3" in result.output and "prefix changed at system[0] (inferred)" in result.output
    assert "TTL expired" in result.output


def test_watch_names_a_missing_path(cli, tmp_path):
    result = cli("watch", str(tmp_path / "nope.jsonl"), "--once")
    assert result.exit_code == 2 and "nope.jsonl: file or directory does not exist" in result.output


def test_from_end_on_transcripts_counts_only_new_responses(tmp_path):
    projects = tmp_path / "projects"
    shutil.copytree(FIX, projects)
    w = Watch([projects], from_end=True)
    assert w.step().events == []
    session = next(projects.rglob("1f0c-sess.jsonl"))
    user, answer, tool = _session_lines("1f0c-sess", "msg_Z", "req_Z", outputs=[64])
    with session.open("a") as fh:
        fh.write(user + answer + tool)
    assert [e.result.sk.id for e in w.step().events] == ["req_Z"]


def test_a_growing_transcript_counts_each_malformed_line_once_and_times_requests_by_their_turn(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    path = folder / "s.jsonl"
    user, answer, tool = _session_lines("s", "msg_A", "req_A", outputs=[20])
    path.write_text(user + answer)
    w = Watch([folder])
    for _ in range(3):  # polls while the file only grows by a cut-off line and more turns
        w.step()
    with path.open("a") as fh:
        fh.write('{"parentUuid": "n2", "type": "assis\n' + tool)
    for _ in range(3):
        w.step()
    second = _session_lines("s", "msg_B", "req_B", outputs=[30])
    with path.open("a") as fh:
        fh.write(second[0].replace('"uuid": "n1"', '"uuid": "m1"') + second[1].replace('"parentUuid": "n1"',
                                                                                     '"parentUuid": "m1"') + tool)
    events = [e for _ in range(3) for e in w.step().events]
    assert [e.result.sk.id for e in events] == ["req_B"]
    assert w.totals.requests == 2
    assert w.skips.reasons == {"truncated JSON line": 1}
    # started when the user turn it answers was written (08:00:00), not when its answer was (08:00:03)
    assert events[0].result.sk.started_at == pytest.approx(1_789_200_000.0)


def test_a_transcript_deleted_and_written_again_is_read_from_its_start_without_double_counting(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    path = folder / "s.jsonl"
    first = _session_lines("s", "msg_A", "req_A", outputs=[20])
    path.write_text("".join(first))
    w = Watch([folder])
    assert [e.result.sk.id for e in w.step().events] == ["req_A"]
    path.unlink()
    assert [e.kind for e in w.step().file_events] == ["deleted"]
    second = _session_lines("s", "msg_B", "req_B", outputs=[30])
    path.write_text("".join(first) + "".join(second))  # longer than before: its old position means nothing
    assert [e.result.sk.id for e in w.step().events] == ["req_B"] and w.totals.requests == 2


def test_every_streamed_line_validates_against_the_shipped_schema(cli):
    from jsonschema import Draft202012Validator

    from kvprobe.schemas import load_schema
    validator = Draft202012Validator(load_schema("watch"))
    result = cli("watch", str(ROOT / "traces" / "sample_session.jsonl"), "--json", "--once")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 6
    for line in lines:
        validator.validate(line)
    broken = dict(lines[2], totals={k: v for k, v in lines[2]["totals"].items() if k != "token_hit_ratio"})
    assert not validator.is_valid(broken)  # the schema pins the running totals
