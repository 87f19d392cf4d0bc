"""`kvprobe replay --engine openai-compatible` against llama.cpp's servers: a local fake with their wire
behaviour in the default suite (see llamacpp_fake.py), and the real llama-cpp-python server when installed.

Expected token counts are worked out by hand from the fake's word tokenizer (comments give the sums).
"""
from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time

import httpx
import pytest
from conftest import ROOT
from llamacpp_fake import LlamaCppFake, running

from kvprobe.replay.drive import Measured
from kvprobe.trace import TraceRecord, write_trace

TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]
SYSTEM = "You are a coding agent"  # 5 words
T0 = 1_760_000_000.0


def _turns(n: int, marker: str = "") -> list[dict]:
    """Up to 3 requests of one agent turn: ask, call a tool (no text), read its result, answer."""
    first = [{"role": "user", "content": f"fix the bug{marker}"}]  # 3 words
    second = first + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_file",
                                           "input": {"path": "a.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "def login pass"}]}]
    third = second + [{"role": "assistant", "content": "done now"}, {"role": "user", "content": "thanks"}]
    return [first, second, third][:n]


def _trace(tmp_path, markers=("", "", "")) -> str:
    records = []
    for i, marker in enumerate(markers):
        body = {"model": "claude-sonnet-4-5", "max_tokens": 4, "system": SYSTEM, "tools": TOOLS,
                "messages": _turns(i + 1, marker)[-1]}
        records.append(TraceRecord(f"r{i + 1}", "anthropic", T0 + 10 * i, body, None, session="s",
                                   endpoint="/v1/messages", finished_at=T0 + 10 * i + 2))
    path = tmp_path / "agent.jsonl"
    write_trace(path, records)
    return str(path)


def _replay(cli, trace, url, *extra):
    return cli("replay", trace, "--engine", "openai-compatible", "--base-url", url, *extra)


def test_llama_cpp_python_server_replays_every_request_and_says_what_it_cannot_know(cli, tmp_path):
    fake = LlamaCppFake("python")
    with running(fake) as url:
        result = _replay(cli, _trace(tmp_path), url, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["totals"]["replayed"] == 3  # no null content was sent (the server answers those with HTTP 500)
    assistant = [m for m in fake.prompts[-1] if m["role"] == "assistant"]
    assert assistant[0]["content"] == "" and assistant[0]["tool_calls"][0]["function"]["name"] == "read_file"
    # No usage in its streams: sizes from its /tokenize over the recorded text (words; tools JSON = 3 words):
    # r1 = 5 system + 3 user + 3 tools = 11; r2 adds the call's arguments (2) and the result (3) = 16;
    # r3 adds "done now" and "thanks" = 19.
    assert [r["prompt_tokens"] for r in out["requests"]] == [11, 16, 19]
    assert {r["prompt_tokens_source"] for r in out["requests"]} == {"server /tokenize"}
    # Its cache did reuse r1 on r2 (13 tokens), but it says nothing: unknown, not 0.
    assert fake.cache_hits[1] == 13
    assert [r["cached_tokens"] for r in out["requests"]] == [None, None, None]
    assert {r["cache"] for r in out["requests"]} == {None}
    assert out["totals"]["engine_hit_ratio"] is None and out["totals"]["cache_unknown_requests"] == 3
    assert out["totals"]["cold_requests"] == out["totals"]["warm_requests"] == 0
    notes = " ".join(out["notes"])
    assert "cached tokens are unknown, not zero" in notes
    assert "does not render tools or tool messages" in notes


def test_llama_server_timings_give_prompt_size_and_cached_tokens(cli, tmp_path):
    with running(LlamaCppFake("server")) as url:
        result = _replay(cli, _trace(tmp_path), url, "--json")
        table = _replay(cli, _trace(tmp_path), url)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    # chatml words: r1 = system (1 + 5 + 1) + user (1 + 3 + 1) + assistant prompt (1) = 13, nothing cached;
    # r2 adds the empty assistant turn (2) = 15, reusing all 13 of r1; r3 adds "done now" (4) and "thanks"
    # (3) = 22, reusing r2's 15.
    rows = out["requests"]
    assert [(r["prompt_tokens"], r["cached_tokens"]) for r in rows] == [(13, 0), (15, 13), (22, 15)]
    assert {r["prompt_tokens_source"] for r in rows} == {"server timings"}
    assert [r["cache"] for r in rows] == ["cold", "warm", "warm"]
    assert out["totals"]["engine_hit_ratio"] == round(28 / 50, 4)
    assert table.exit_code == 0 and "engine hit ratio" in table.stdout and "server timings" in table.stdout


def test_a_stream_that_breaks_midway_is_a_failure_and_all_failed_exits_1(cli, tmp_path):
    with running(LlamaCppFake("server", crash_marker="CRASH")) as url:
        one = _replay(cli, _trace(tmp_path, markers=("", " CRASH", "")), url, "--json")
        every = _replay(cli, _trace(tmp_path, markers=(" CRASH", " CRASH", " CRASH")), url)
    assert one.exit_code == 0, one.output
    rows = json.loads(one.stdout)["requests"]
    assert [r["status"] for r in rows] == ["replayed", "failed", "replayed"]
    assert "before the reply finished" in rows[1]["reason"] and rows[1]["prompt_tokens"] == 0
    assert every.exit_code == 1
    lines = [line for line in every.stdout.splitlines() if line.startswith("not replayed")]
    assert len(lines) == 1 and lines[0].startswith("not replayed (3: r1, r2, r3)")
    assert "every request failed" in every.stderr


def test_warm_means_most_of_the_prompt_came_from_the_cache():
    assert Measured("a", "replayed", prompt_tokens=100, cached_tokens=8).warm is False
    assert Measured("a", "replayed", prompt_tokens=100, cached_tokens=50).warm is True
    assert Measured("a", "replayed", prompt_tokens=100, cached_tokens=None).warm is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# llama_cpp.server needs the [server] extra's packages: without them the server cannot start at all
_SERVER_MODULES = ("llama_cpp", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in _SERVER_MODULES),
                    reason="llama-cpp-python with its server extra is not installed (optional; "
                    "CMAKE_ARGS=-DGGML_NATIVE=ON pip install 'llama-cpp-python[server]', about an hour to build on "
                    "2 cores)")
def test_real_llama_cpp_python_server(cli, tmp_path):
    from localengine.loader import default_model_path

    port = _free_port()
    log = tmp_path / "llama_server.log"  # a file, not a pipe: the server logs more than a pipe holds unread
    with log.open("wb") as err:  # the child keeps its own handle
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(default_model_path()),
                                 "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
                                 "--chat_format", "chatml"], stdout=subprocess.DEVNULL, stderr=err)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):  # bounded: up to 60 s to load
            assert proc.poll() is None, \
                f"the llama.cpp server exited ({proc.returncode}): {log.read_text(errors='replace')[-2000:]}"
            try:
                if httpx.get(url + "/v1/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        result = _replay(cli, str(ROOT / "traces" / "sample_session.jsonl"), url, "--json", "--limit", "3",
                         "--max-tokens", "4")
    finally:
        proc.terminate()
        proc.wait(10)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["totals"]["replayed"] == 3
    assert all(r["prompt_tokens"] > 0 and r["prompt_tokens_source"] for r in out["requests"])
