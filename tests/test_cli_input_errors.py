"""Empty or wrong input is a mistake to name (exit 2), not an empty answer; and `diff` across APIs."""
from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from conftest import ROOT
from kvprobe.schemas import load_schema

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
EXAMPLES = ROOT / "examples"


@pytest.mark.parametrize(("args", "message"), [
    (["report", "{empty}"], "empty.jsonl: no requests found"),
    (["report", "{empty}", "--json"], "empty.jsonl: no requests found"),
    (["report", "{dir}"], "logs: no requests found"),
    (["report", SAMPLE, "--session", "nosuch"], "field '--session': none of the 6 requests matches --session nosuch"),
    (["report", SAMPLE, "--agent", "x", "--since", "2030-01-01T00:00:00Z"],
     "none of the 6 requests matches --agent x and --since 2030-01-01T00:00:00Z"),
    (["providers", "not-a-model"], "field 'MODEL': no provider lists a model like \"not-a-model\""),
    (["providers", "--provider", "nosuch"],
     "field '--provider': unknown provider \"nosuch\": expected one of anthropic, deepseek, gemini, mistral, moonshot, openai, qwen, xai"),
])
def test_empty_or_unknown_input_exits_2_with_a_message(cli, tmp_path, args, message):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "logs").mkdir()
    args = [str(a).format(empty=tmp_path / "empty.jsonl", dir=tmp_path / "logs") for a in args]
    res = cli(*args)
    assert res.exit_code == 2, res.output
    assert message in res.output and res.stdout == ""  # nothing half-written to stdout, not even a table


def test_an_unknown_model_with_its_provider_shows_that_providers_defaults(cli):
    res = cli("providers", "not-a-model", "--provider", "openai", "--json")
    assert res.exit_code == 0
    [view] = json.loads(res.stdout)
    assert view["provider"] == "openai" and view["known_model"] is False


def test_serve_refuses_a_bad_port_before_loading_any_model(cli):
    res = cli("serve", "--port", "99999", "--model", "tiny-random")
    assert res.exit_code == 2 and "--port" in res.output and "65535" in res.output
    assert "loading" not in res.output and "Traceback" not in res.output


GEMINI_SYSTEM = "You review pull requests for the acme/webapp repository. " * 120


def _gemini(*turns: str) -> dict:
    roles = ["user", "model"]
    return {"systemInstruction": {"parts": [{"text": GEMINI_SYSTEM}]},
            "contents": [{"role": roles[i % 2], "parts": [{"text": t}]} for i, t in enumerate(turns)]}


def test_diff_reads_bare_gemini_bodies(cli, write_json):
    a = write_json("a.json", _gemini("Review PR 12."))
    b = write_json("b.json", _gemini("Review PR 12.", "Looks fine.", "And PR 13?"))
    res = cli("diff", a, b, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["provider"] == "gemini" and data["extends"] is True and data["shared_cache"] is True
    assert "B extends A" in cli("diff", a, b).stdout


def _openai_twin() -> dict:
    """examples/request_a.json's conversation as an OpenAI Chat body (written here, not by kvprobe)."""
    a = json.loads((EXAMPLES / "request_a.json").read_text())
    system = " ".join(block["text"] for block in a["system"])
    messages = [{"role": "system", "content": system}]
    for m in a["messages"]:
        content = m["content"] if isinstance(m["content"], str) else \
            " ".join(p.get("text", "") for p in m["content"] if p.get("type") == "text")
        messages.append({"role": m["role"], "content": content})
    return {"model": "gpt-4.1", "messages": messages}


def test_diff_across_providers_shares_no_cache_and_invents_no_parameter_changes(cli, write_json):
    b = write_json("openai.json", _openai_twin())
    res = cli("diff", EXAMPLES / "request_a.json", b)
    assert res.exit_code == 0
    assert "A goes to anthropic and B to openai: providers do not share a cache" in res.stdout
    assert "Parameter changed" not in res.stdout and "null" not in res.stdout and "None" not in res.stdout
    data = json.loads(cli("diff", EXAMPLES / "request_a.json", b, "--json").stdout)
    Draft202012Validator(load_schema("diff")).validate(data)
    assert data["shared_cache"] is False and data["a_provider"] == "anthropic" and data["provider"] == "openai"
    assert data["params_changed"] == [] and data["predicted"]["cache_read_tokens"] == 0
    assert cli("diff", EXAMPLES / "request_a.json", b, "--exit-code").exit_code == 1


def test_diff_refuses_a_body_of_no_known_api_naming_gemini_too(cli, write_json):
    res = cli("diff", write_json("x.json", {"prompt": "hi"}), write_json("y.json", {"prompt": "hi"}))
    assert res.exit_code == 2 and "x.json" in res.output and "'contents'" in res.output


def test_a_bad_value_in_a_trace_is_quoted_as_json(cli, tmp_path):
    record = json.loads(SAMPLE.read_text().splitlines()[0])
    record["finished_at"] = {"at": 1}
    trace = tmp_path / "bad.jsonl"
    trace.write_text(json.dumps(record) + "\n")
    res = cli("report", trace)
    assert res.exit_code == 2
    assert "bad.jsonl:1 field 'finished_at': expected an RFC 3339 timestamp, got {\"at\": 1}" in res.output
