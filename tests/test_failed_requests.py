"""Failed requests are neither priced nor simulated anywhere (issue #37 item 5): one rule, the gate's.

The trace is shaped like a Claude Code capture: three turns that reached the model and three that did not (a
429, a 500 with no usage, a connection that never opened). Before, `report` simulated the three failures,
priced them on predicted usage and showed a bigger bill than `gate`, which left them out.
"""
from __future__ import annotations

import json
import subprocess
import sys

import duckdb
import pytest

import kvprobe
from conftest import ROOT
from kvprobe.analysis.skeleton import failed_call
from kvprobe.usage import Usage

SYSTEM = [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude. " * 60,
           "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "Read", "description": "Read a file from the local filesystem.",
          "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}]


def _body(turns: int) -> dict:
    messages = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"step {i}: look at src/login_{i}.py"})
        if i < turns - 1:
            messages.append({"role": "assistant", "content": f"I read src/login_{i}.py."})
    messages[-1]["content"] = [{"type": "text", "text": messages[-1]["content"],
                                "cache_control": {"type": "ephemeral"}}]
    return {"model": "claude-sonnet-4-5-20250929", "max_tokens": 32000, "stream": True, "system": SYSTEM,
            "tools": TOOLS, "messages": messages}


def _usage(fresh: int, write: int, read: int, out: int) -> dict:
    return {"usage": {"input_tokens": fresh, "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
                      "output_tokens": out}}


# (fresh, 5m write, read, output) of the three requests that reached the model
OK = [(12, 3000, 0, 100), (20, 500, 3000, 200), (30, 400, 3500, 150)]
# claude-sonnet-4-5 per token: input $3/M, 5m write $3.75/M, read $0.30/M, output $15/M
PRICED = [12 * 3e-6 + 3000 * 3.75e-6 + 100 * 15e-6,       # 0.012786
          20 * 3e-6 + 500 * 3.75e-6 + 3000 * 0.3e-6 + 200 * 15e-6,  # 0.005835
          30 * 3e-6 + 400 * 3.75e-6 + 3500 * 0.3e-6 + 150 * 15e-6]  # 0.00489
TOTAL = 0.023511


def _record(rid: str, at: int, turns: int, **rest) -> dict:
    return {"kvprobe": 1, "id": rid, "session": "fix-login", "provider": "anthropic", "endpoint": "/v1/messages",
            "started_at": f"2026-11-20T10:00:{at:02d}Z", "finished_at": f"2026-11-20T10:00:{at + 1:02d}Z",
            "request": _body(turns), **rest}


@pytest.fixture
def trace(tmp_path):
    rows = [
        _record("req_1", 0, 1, response=_usage(*OK[0]), http_status=200),
        _record("req_2", 5, 2, response={"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
                error="HTTP 429: rate_limit_error: slow", http_status=429),
        _record("req_3", 10, 2, response=_usage(*OK[1]), http_status=200),
        _record("req_4", 15, 3, response={}, error="HTTP 500: api_error: Internal server error", http_status=500),
        _record("req_5", 20, 3, error="could not connect to api.anthropic.com: Connection refused",
                http_status=None),
        _record("req_6", 25, 3, response=_usage(*OK[2]), http_status=200),
    ]
    path = tmp_path / "claude-code.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


FAILED = ["req_2", "req_4", "req_5"]


def test_the_hand_figures_add_up():
    assert round(sum(PRICED), 6) == TOTAL


def test_report_prices_only_what_reached_the_model_and_equals_gate(cli, trace):
    rep = json.loads(cli("report", trace, "--json").output)
    assert rep["totals"]["requests"] == 3 and rep["totals"]["cost_usd"] == TOTAL
    assert [r["id"] for r in rep["requests"]] == ["req_1", "req_3", "req_6"]
    assert [f["id"] for f in rep["failed_requests"]] == FAILED
    assert rep["failed_requests"][0]["error"].startswith("HTTP 429")
    assert rep["totals"]["input_tokens"] == sum(f + w + r for f, w, r, _ in OK)
    gate = json.loads(cli("gate", trace, "--max-cost-usd", "1", "--max-failed-requests", "3", "--json").output)
    (cost,) = [c for c in gate["checks"] if c["name"] == "max_cost_usd"]
    assert cost["actual"] == rep["totals"]["cost_usd"] == TOTAL
    assert gate["inputs"]["failed_requests"] == 3 and gate["inputs"]["requests"] == 6


def test_report_text_says_which_failed(cli, trace):
    result = cli("report", trace)
    assert result.exit_code == 0, result.output
    assert "3 requests failed" in result.output and "req_2, req_4, req_5" in result.output
    assert "$0.024" in result.output or "$0.0235" in result.output


def test_a_trace_whose_every_request_failed_is_reported_as_such(cli, tmp_path):
    path = tmp_path / "codex-404s.jsonl"
    rows = [{"kvprobe": 1, "id": f"req_{i}", "provider": "openai", "endpoint": "/v1/responses",
             "started_at": f"2026-11-20T10:00:{i:02d}Z", "request": {"model": "gpt-5-codex", "input": "fix it"},
             "response": {"error": {"message": "not found"}}, "error": "HTTP 404: not found", "http_status": 404}
            for i in range(12)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = json.loads(cli("report", path, "--json").output)
    assert rep["totals"]["requests"] == 0 and rep["totals"]["cost_usd"] == 0
    assert rep["misses"] == [] and len(rep["failed_requests"]) == 12


def test_html_db_compare_fix_and_the_python_api_leave_them_out(cli, trace, tmp_path):
    page = tmp_path / "page.html"
    info = json.loads(cli("html", trace, "-o", page, "--json").output)
    assert info["requests"] == 3 and "3 requests failed" in page.read_text()
    db = tmp_path / "k.duckdb"
    assert cli("db", "load", trace, "--db", db).exit_code == 0
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("select request_id from requests order by request_id").fetchall()
    assert [r[0] for r in rows] == ["req_1", "req_3", "req_6"]
    compared = json.loads(cli("compare", trace, trace, "--json").output)
    assert compared["totals"]["cost_usd"]["base"] == TOTAL
    # fix prices its simulation: the failures must change nothing in it
    only_ok = tmp_path / "only-ok.jsonl"
    only_ok.write_text("".join(line + "\n" for line in trace.read_text().splitlines()
                               if json.loads(line)["id"] not in FAILED))
    fixed = json.loads(cli("fix", trace, "-o", tmp_path / "fixed.jsonl", "--json").output)
    fixed_ok = json.loads(cli("fix", only_ok, "-o", tmp_path / "fixed-ok.jsonl", "--json").output)
    assert fixed["cost_usd"] == fixed_ok["cost_usd"] and fixed["records"] == 6
    report = kvprobe.analyse(trace)
    assert report.totals["cost_usd"] == TOTAL and [rid for rid, _ in report.failed] == FAILED


def test_watch_counts_them_apart(trace):
    done = subprocess.run([sys.executable, "-m", "kvprobe", "watch", str(trace), "--once", "--json"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["id"] for line in lines] == ["req_1", "req_3", "req_6"]
    assert lines[-1]["totals"]["cost_usd"] == TOTAL and lines[-1]["totals"]["failed_requests"] == 3
    assert "failed, not priced: req_2" in done.stderr


def test_the_rule():
    usage = Usage(100, 0, 0, 0, 5)
    assert failed_call("HTTP 500", None, 500) and failed_call("reset", None, None)
    assert failed_call("HTTP 400: prompt is too long", usage, 400)  # refused: its body's usage is no bill
    assert not failed_call("upstream connection lost mid-response", usage, 200)  # cut after usage: billed
    assert not failed_call(None, None, 200)  # no usage logged but no error: predicted, not failed
