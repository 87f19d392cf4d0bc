"""The shipped JSON Schemas (docs/contracts.md) against what kvprobe really prints and writes.

Every `--json` output of diff, report, gate, compare, usage and run-probe, and every trace kvprobe writes
(capture, import, fix, run-probe's log), must validate against the schema `kvprobe schema NAME` prints; and
each schema must reject an output that lost a required key or changed a type, or it pins nothing.
"""
from __future__ import annotations

import json

import copy

import anthropic
import openai
import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

import kvprobe.capture
from conftest import ROOT, anthropic_body, openai_chat_body
from kvprobe.cli import app
from kvprobe.schemas import NAMES

TRACE = ROOT / "traces" / "sample_session.jsonl"
EXAMPLES = ROOT / "examples"
FIX = ROOT / "tests" / "fixtures" / "importers"


def run_json(*args, code: int = 0):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def schemas():
    out = {name: run_json("schema", name) for name in NAMES}
    for schema in out.values():
        Draft202012Validator.check_schema(schema)
    return out


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """One valid output per format, computed once for the breakage tests."""
    baseline = tmp_path_factory.mktemp("compare") / "base.json"
    assert CliRunner().invoke(app, ["baseline", str(TRACE), "-o", str(baseline)]).exit_code == 0
    return {
        "trace": json.loads(TRACE.read_text().splitlines()[0]),
        "diff": run_json("diff", EXAMPLES / "request_a.json", EXAMPLES / "request_b.json", "--json"),
        "report": run_json("report", TRACE, "--json"),
        "gate": run_json("gate", TRACE, "--max-cost-usd", "1", "--json"),
        "compare": run_json("compare", baseline, TRACE, "--json"),
        "usage": run_json("usage", FIX / "claude", "--json"),
        "run-probe": run_json("run-probe", EXAMPLES / "public_notes.txt", "--dry-run", "--json"),
    }


def errors(schema: dict, instance) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
            for e in Draft202012Validator(schema).iter_errors(instance)]


def assert_trace_valid(schema: dict, path) -> int:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert lines, f"{path} is empty"
    for n, line in enumerate(lines, start=1):
        assert not errors(schema, json.loads(line)), (path, n, errors(schema, json.loads(line)))
    return len(lines)


def test_every_format_has_a_schema_and_the_list_names_them(cli, schemas):
    listed = run_json("schema", "--json")
    assert [row["name"] for row in listed] == ["trace", "diff", "report", "gate", "compare", "usage", "run-probe",
                                               "watch", "lint", "baseline", "gate-config", "price-file"]
    assert all(schemas[name]["$schema"].endswith("2020-12/schema") for name in NAMES)
    result = cli("schema", "traces")
    assert result.exit_code == 2 and "expected one of trace, diff" in result.output


def test_diff_outputs_validate(schemas, samples, write_json):
    a, b = EXAMPLES / "request_a.json", EXAMPLES / "request_b.json"
    changed = samples["diff"]
    assert changed["first_change"]["path"] == "system[0]"
    assert not errors(schemas["diff"], changed)
    assert not errors(schemas["diff"], run_json("diff", a, a, "--json"))  # identical: first_change null
    assert not errors(schemas["diff"], run_json("diff", a, b, "--json", "--no-content"))
    aa = write_json("aa.json", anthropic_body())
    ab = write_json("ab.json", anthropic_body(tool_choice={"type": "any"}))
    params = run_json("diff", aa, ab, "--json")
    assert params["params_changed"][0]["invalidates"] == "messages" and not errors(schemas["diff"], params)
    oa = write_json("oa.json", openai_chat_body())
    ob = write_json("ob.json", openai_chat_body(messages=openai_chat_body()["messages"][:1]))
    assert not errors(schemas["diff"], run_json("diff", oa, ob, "--json"))
    assert not errors(schemas["diff"], run_json("diff", f"{TRACE}#req_2", f"{TRACE}#req_3", "--json"))


def test_report_outputs_validate(schemas, samples):
    sample = samples["report"]
    assert sample["fixes"] and sample["with_all_fixes"] and not errors(schemas["report"], sample)
    imported = run_json("report", FIX / "claude", "--json")  # usage-only records, importer notes
    assert imported["notes"] and not errors(schemas["report"], imported)


def test_gate_outputs_validate_for_each_exit_code(schemas, samples):
    failed = run_json("gate", TRACE, "--min-hit-ratio", "0.5", "--json", code=1)
    held = samples["gate"]  # exit 0
    undecided = run_json("gate", TRACE, "--json", code=3)
    assert (failed["passed"], held["passed"], undecided["passed"]) == (False, True, None)
    for data in (failed, held, undecided):
        assert not errors(schemas["gate"], data)


def test_compare_output_validates(schemas, samples):
    data = samples["compare"]
    assert [t["task"] for t in data["tasks"]] == ["fix-login-bug"] and not errors(schemas["compare"], data)


@pytest.mark.parametrize("source", ["claude", "codex", "har/session.har", "otel/spans.json", "litellm/requests.jsonl"])
def test_usage_output_validates(schemas, source):
    data = run_json("usage", FIX / source, "--json")
    assert data["totals"]["requests"] > 0 and not errors(schemas["usage"], data)


def test_run_probe_outputs_and_its_log_validate(schemas, samples, fake, tmp_path, monkeypatch):
    notes = EXAMPLES / "public_notes.txt"
    dry = samples["run-probe"]
    assert len(dry["requests"]) == 4 and not errors(schemas["run-probe"], dry)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-schema0123456789")
    log = tmp_path / "probe.jsonl"
    run = run_json("run-probe", notes, "--provider", "anthropic", "--base-url", fake.url, "--out", log, "--json")
    assert run["confirmed"] is True and not errors(schemas["run-probe"], run)
    assert assert_trace_valid(schemas["trace"], log) == 4


def test_captured_traces_validate(schemas, fake, tmp_path):
    out = tmp_path / "captured.jsonl"
    messages = [{"role": "user", "content": "Hello"}]
    client = anthropic.Anthropic(api_key="k", base_url=fake.url, max_retries=0,
                                 http_client=kvprobe.capture.http_client(out=out, session="s", agent="main"))
    client.messages.create(model="claude-sonnet-5", max_tokens=8, messages=messages)
    with client.messages.stream(model="claude-sonnet-5", max_tokens=8, messages=messages) as stream:
        stream.get_final_message()
    with pytest.raises(anthropic.RateLimitError):  # an API error is recorded too
        client.messages.create(model="claude-sonnet-5", max_tokens=8, messages=messages,
                               extra_headers={"x-fake": "status=429"})
    oai = openai.OpenAI(api_key="k", base_url=fake.url + "/v1", max_retries=0,
                        http_client=kvprobe.capture.http_client(out=out, hash_only=True))
    oai.chat.completions.create(model="gpt-4o-mini", messages=messages)
    for _ in oai.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True,
                                         stream_options={"include_usage": True}):
        pass
    assert assert_trace_valid(schemas["trace"], out) == 5


def test_imported_and_fixed_traces_validate(cli, schemas, tmp_path):
    for source in ("claude", "codex", "har/session.har", "otel/spans.json", "litellm/requests.jsonl"):
        out = tmp_path / (source.split("/")[0] + ".jsonl")
        assert cli("import", FIX / source, "-o", out).exit_code == 0
        assert assert_trace_valid(schemas["trace"], out) > 0
    fixed = tmp_path / "fixed.jsonl"
    assert cli("fix", TRACE, "-o", fixed).exit_code == 0
    records = [json.loads(line) for line in fixed.read_text().splitlines()]
    assert any(r.get("keep_alive") for r in records)  # the fix adds a keep-alive record: it must validate too
    assert assert_trace_valid(schemas["trace"], fixed) == 7


# Each schema must fail an output that lost a required key or changed a type (else it pins nothing).
BREAKAGES = [
    ("trace", lambda d: d.pop("id")),
    ("trace", lambda d: d.update(started_at="10:07 yesterday")),
    ("trace", lambda d: (d.pop("request"), d["response"].pop("usage"))),
    ("diff", lambda d: d.pop("first_change")),
    ("diff", lambda d: d["predicted"].update(cache_read_tokens="0")),
    ("report", lambda d: d["totals"].pop("cost_usd")),
    ("report", lambda d: d["requests"][2]["diagnoses"][0].update(kind="cache_flushed")),
    ("report", lambda d: d["requests"][0].update(input_tokens=-1)),
    ("gate", lambda d: d.update(passed="no")),
    ("compare", lambda d: d["totals"].pop("cost_usd")),
    ("usage", lambda d: d["by_day"][0].pop("day")),
    ("run-probe", lambda d: d["requests"][0].update(case="warmup")),
]


@pytest.mark.parametrize("name, breakage", BREAKAGES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BREAKAGES)])
def test_schemas_reject_broken_outputs(schemas, samples, name, breakage):
    data = copy.deepcopy(samples[name])
    assert not errors(schemas[name], data)
    breakage(data)
    assert errors(schemas[name], data)
