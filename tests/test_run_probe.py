"""`kvprobe run-probe`: the four requests, their log, the stop rules, keys, against local wire-level servers."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT
from kvprobe.diff import diff_requests
from kvprobe.errors import InputError
from kvprobe.probe.cases import build_cases
from kvprobe.probe.runner import run_probe
from kvprobe.request import render_request

NOTES = ROOT / "examples" / "public_notes.txt"
SECRET = "sk-ant-test-0123456789abcdefSECRET"


def _render(case):
    return render_request({k: v for k, v in case.body.items() if k not in ("stream", "stream_options")})


@pytest.mark.parametrize("provider, model", [("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o-mini")])
def test_the_four_requests_differ_exactly_as_described(provider, model):
    cases = build_cases(NOTES.read_text(), provider, model, "run123")
    assert [c.name for c in cases] == ["prepare", "confirm", "new_question", "changed_beginning"]
    prepare, confirm, question, changed = map(_render, cases)
    assert diff_requests(prepare, confirm).identical
    d3 = diff_requests(prepare, question)
    assert d3.first_change.path.startswith("messages[") and d3.first_change.block_index == len(prepare.blocks) - 1
    d4 = diff_requests(question, changed)  # 3 -> 4: only the version marker, early in the prefix
    first = d4.first_change
    assert first.block_index == 0 and first.char_offset == len("Probe run run123\nDocument version: ")
    assert "version: A" in first.a_snippet and "version: B" in first.b_snippet
    assert d4.b_tokens == d4.a_tokens and not d4.params_changed
    body3, body4 = cases[2].body, cases[3].body  # the question is the same: only the prefix's marker differs
    assert {k: v for k, v in body3.items() if k not in ("system", "messages")} == \
        {k: v for k, v in body4.items() if k not in ("system", "messages")}
    assert body3["messages"][-1] == body4["messages"][-1]
    for case in cases:
        assert case.body["model"] == model and case.body["max_tokens"] == 96 and case.body["stream"] is True
    if provider == "anthropic":
        assert prepare.breakpoints == [(0, "5m")]  # cache_control at the end of the document block


def test_anthropic_run_logs_every_request_and_never_the_key(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    log = tmp_path / "probe.jsonl"
    result = run_probe(NOTES, "anthropic", base_url=fake.url, out=log)
    assert result.exit_code == 0 and result.verdict.confirmed
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["case"] for line in lines] == ["prepare", "confirm", "new_question", "changed_beginning"]
    first = lines[0]
    assert first["usage"]["cache_read_input_tokens"] == 2048 and first["returned_model"] == "claude-sonnet-5"
    assert first["complete"] is True and first["stop_reason"] and first["request_s"] > 0
    assert first["first_text_s"] is not None
    assert SECRET not in log.read_text()
    sent = fake.requests[0]
    auth = sent["headers"].get("x-api-key") or sent["headers"].get("authorization", "")
    assert auth.endswith(SECRET)  # the key went to the provider, and only there
    assert json.loads(sent["body"])["system"][0]["cache_control"] == {"type": "ephemeral"}


def test_openai_path_uses_the_chat_api_with_usage_in_the_stream(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    result = run_probe(NOTES, "openai", base_url=fake.url + "/v1", out=tmp_path / "p.jsonl")
    assert result.exit_code == 0
    body = json.loads(fake.requests[0]["body"])
    assert body["stream_options"] == {"include_usage": True}
    assert result.outcomes[1].usage["prompt_tokens_details"]["cached_tokens"] == 2048


def test_unconfirmed_hit_stops_after_request_2_with_exit_1(cli, fake, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    result = run_probe(NOTES, "anthropic", base_url=fake.url,
                       client_options={"default_headers": {"x-fake-usage": '{"cache_read_input_tokens": 0}'}})
    assert len(result.outcomes) == 2 and result.exit_code == 1
    assert "minimum cacheable length" in result.verdict.advice and "TTL" in result.verdict.advice


def test_http_error_stops_and_keeps_what_arrived(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    log = tmp_path / "p.jsonl"
    result = run_probe(NOTES, "anthropic", base_url=fake.url, out=log,
                       client_options={"default_headers": {"x-fake": "status=529"}})
    assert len(result.outcomes) == 1 and result.exit_code == 1 and "529" in result.stopped
    line = json.loads(log.read_text())
    assert line["complete"] is False and line["usage"] is None and line["stop_reason"] is None
    assert SECRET not in log.read_text()


def test_broken_stream_keeps_the_partial_usage(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    result = run_probe(NOTES, "anthropic", base_url=fake.url,
                       client_options={"default_headers": {"x-fake": "reset-after=2"}})
    [outcome] = result.outcomes
    assert outcome.error and not outcome.complete
    assert outcome.usage["cache_read_input_tokens"] == 2048  # message_start had arrived


def test_short_document_is_refused_with_the_numbers(cli, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("Too short to cache.")
    res = cli("run-probe", short, "--provider", "anthropic", "--dry-run")
    assert res.exit_code == 2 and "short.txt" in res.output and "caches nothing under 1,024 tokens" in res.output


def test_missing_key_without_a_terminal_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(InputError, match="set OPENAI_API_KEY"):
        run_probe(NOTES, "openai", base_url="http://127.0.0.1:9")


def test_dry_run_shows_the_four_requests_and_costs(cli):
    res = cli("run-probe", NOTES, "--provider", "anthropic", "--dry-run", "--json")
    data = json.loads(res.stdout)
    assert [r["case"] for r in data["requests"]] == ["prepare", "confirm", "new_question", "changed_beginning"]
    reads = [r["predicted"]["cache_read_tokens"] for r in data["requests"]]
    assert reads[0] == 0 and reads[1] == reads[2] > 4000 and reads[3] == 0
    assert all(r["estimated_cost_usd"] > 0 for r in data["requests"])


def test_dry_run_on_gpt_5_6_predicts_its_breakpoint_cache_with_the_document_marked(cli):
    """GPT-5.6+ reads only at breakpoints, and its managed one sits after the question: the probe marks the
    document's end (`prompt_cache_breakpoint`), so the identical request reads all the first wrote, a new
    question reads the document and writes only its own span, and a changed beginning reads nothing."""
    res = cli("run-probe", NOTES, "--provider", "openai", "--model", "gpt-5.6-sol", "--dry-run", "--json")
    data = json.loads(res.stdout)
    rows = [r["predicted"] for r in data["requests"]]
    reads = [r["cache_read_tokens"] for r in rows]
    writes = [r["cache_write_tokens"] for r in rows]
    document = data["prefix_tokens"]
    assert document > 4000 and writes[0] > document
    assert reads == [0, writes[0], document, 0]
    # request 4 is request 3 with one letter changed at its start: it writes all that request 3 read or wrote
    assert 0 < writes[2] < 100 and reads[2] + writes[2] == writes[3]


def test_the_document_is_marked_only_where_the_model_reads_at_breakpoints():
    marked = build_cases("text " * 10, "openai", "gpt-5.6-sol", "run1")[0].body["messages"][0]["content"]
    assert marked[0]["prompt_cache_breakpoint"] == {"mode": "explicit"}
    assert isinstance(build_cases("text " * 10, "openai", "gpt-5", "run1")[0].body["messages"][0]["content"], str)


def test_local_probe_runs_the_same_sdk_path_on_the_bundled_engine(tmp_path, monkeypatch):
    """The README's main job: no key, the local engine in Anthropic emulation, four requests."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    log = tmp_path / "local.jsonl"
    result = run_probe(NOTES, "local", out=log)
    assert result.exit_code == 0, result.stopped
    reads = [o.usage["cache_read_input_tokens"] for o in result.outcomes]
    writes = [o.usage["cache_creation_input_tokens"] for o in result.outcomes]
    assert reads[0] == 0 and writes[0] > 4000  # the document is written once...
    assert reads[1] == reads[2] == writes[0]  # ...read back by the identical request and the new question
    assert reads[3] == 0 and writes[3] == writes[0]  # and lost when only its first lines changed
    assert all(o.complete and o.returned_model == "claude-sonnet-5" for o in result.outcomes)
    assert len(result.verdict.supports) == 3
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["case"] for line in lines] == ["prepare", "confirm", "new_question", "changed_beginning"]


def test_unknown_provider_is_refused_before_anything_runs(cli):
    result = cli("run-probe", NOTES, "--provider", "mistral")
    assert result.exit_code == 2
    assert "running 4 requests" not in result.output
    assert "--provider" in result.output and "mistral" in result.output
