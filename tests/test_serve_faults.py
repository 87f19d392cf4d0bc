"""`serve -o` under faults (#39 items 7 and 9): a trace on a full disk never gets a torn line and the client
hears an error, not a success nobody recorded; a client that leaves mid-stream still has its request recorded,
marked, since its prompt was computed and changed the cache."""
from __future__ import annotations

import errno
import json
import os
import time

import anthropic
import httpx
import pytest

from kvprobe.serve import start_server
from kvprobe.trace import TraceRecord, TraceWriter, read_trace

CLAUDE = "claude-opus-5-5"
USER = [{"role": "user", "content": "Fix the login bug. " * 20}]


def _rec(rid: str) -> TraceRecord:
    return TraceRecord(rid, "anthropic", 1.0, request={"model": CLAUDE, "messages": USER})


def test_a_line_the_disk_refuses_halfway_is_cut_off(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path)
    writer.append(_rec("a"))
    real_write, calls = os.write, []

    def half_then_full(fd, data):  # the first write stores half a line, the next finds the disk full
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("kvprobe.trace.writer.os.write", half_then_full)
    with pytest.raises(OSError):
        writer.append(_rec("b"))
    monkeypatch.setattr("kvprobe.trace.writer.os.write", real_write)
    writer.append(_rec("c"))
    writer.close()
    assert [r.id for r in read_trace(path)] == ["a", "c"]  # no torn "b", nothing glued to "c"


@pytest.fixture(scope="module")
def full_disk_server():
    # /dev/full: every write fails with ENOSPC, as on a full disk
    with start_server(model="tiny-random", device="cpu", num_blocks=256, max_output_tokens=4,
                      trace="/dev/full") as handle:
        yield handle


def test_on_a_full_disk_clients_get_an_error_and_the_loss_is_counted(full_disk_server):
    claude = anthropic.Anthropic(base_url=full_disk_server.base_url, api_key="x", max_retries=2)
    with pytest.raises(anthropic.APIStatusError) as info:  # x-should-retry: false, so one attempt only
        claude.messages.create(model=CLAUDE, max_tokens=4, messages=USER)
    assert info.value.status_code == 507 and "No space left on device" in info.value.message
    assert "/dev/full" in info.value.message
    with httpx.stream("POST", full_disk_server.base_url + "/v1/messages", timeout=60,
                      json={"model": CLAUDE, "max_tokens": 4, "messages": USER, "stream": True}) as stream:
        events = [line[7:] for line in stream.iter_lines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "error" and "message_stop" not in events
    trace = httpx.get(full_disk_server.base_url + "/health", timeout=10).json()["trace"]
    assert (trace["recorded"], trace["lost"]) == (0, 2)


def test_a_client_that_leaves_mid_stream_is_recorded_marked(tmp_path):
    path = tmp_path / "served.jsonl"
    with start_server(model="tiny-random", device="cpu", num_blocks=256, max_output_tokens=400,
                      trace=path) as server:
        body = {"model": CLAUDE, "max_tokens": 400, "messages": USER, "stream": True}
        with httpx.stream("POST", server.base_url + "/v1/messages", json=body, timeout=60) as stream:
            for line in stream.iter_lines():
                if "content_block_delta" in line:
                    break  # the first text arrived: hang up
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not path.read_text():
            time.sleep(0.05)
        health = httpx.get(server.base_url + "/health", timeout=10).json()
    (record,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert record["client_disconnected"] is True and "error" not in record
    assert record["response"]["kvprobe"]["client_disconnected"] is True
    assert record["response"]["stop_reason"] is None and record["response"]["usage"]["input_tokens"] > 100
    assert 0 < record["response"]["usage"]["output_tokens"] < 400
    assert health["requests_disconnected"] == 1
