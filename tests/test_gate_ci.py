"""`kvprobe gate` in CI: never green on nothing, what the change broke first, and the formats CI reads.

Traces are the sample with records edited by hand; every figure is worked out below from the sample's logged
usage (claude-sonnet-4-5: $3 input, $3.75 5m writes, $0.30 reads, $15 output per million tokens).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from jsonschema import Draft202012Validator

from conftest import ROOT
from kvprobe.schemas import load_schema

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
SAMPLE_COST = 0.0705855  # 14,740 writes × 3.75 + 9,785 reads × 0.3 + 825 output × 15, in µ$
REQ_4_COST = 0.01806  # 4,252 writes × 3.75 + 141 output × 15, in µ$
DEAD = "could not connect to 127.0.0.1:9: [Errno 111] Connect call failed ('127.0.0.1', 9)"


def records() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines()]


def write(path, recs: list[dict]):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def failed(rec: dict, error: str = DEAD) -> dict:
    """The record as the capture proxy writes a request nothing answered: the body, an error, no usage."""
    rec = {k: v for k, v in rec.items() if k != "response"}
    return {**rec, "response": {}, "error": error, "http_status": None}


def check(data: dict, name: str) -> dict:
    return next(c for c in data["checks"] if c["name"] == name)


def test_a_dead_upstream_is_never_green_with_or_without_predicted(cli, tmp_path):
    trace = write(tmp_path / "dead.jsonl", [failed(r) for r in records()[:3]])
    for extra in ([], ["--predicted"]):
        res = cli("gate", trace, "--max-cost-usd", "1", "--min-hit-ratio", "0.5", *extra)
        assert res.exit_code == 1, res.output
        assert f"FAIL failed_requests: 3 of 3 requests failed: {DEAD} (3×) (req_1, req_2, req_3)" in res.output
        assert "PASS" not in res.output and "USD" not in res.output  # nothing priced, nothing passed
    data = json.loads(cli("gate", trace, "--max-cost-usd", "1", "--predicted", "--json").stdout)
    Draft202012Validator(load_schema("gate")).validate(data)
    assert [c["name"] for c in data["checks"]] == ["failed_requests"]
    assert check(data, "failed_requests")["actual"] == 3 and data["passed"] is False
    assert data["inputs"]["failed_requests"] == 3 and data["exit_code"] == 1


def test_a_failed_request_is_left_out_of_the_figures(cli, tmp_path):
    recs = records()
    recs[3] = failed(recs[3])
    trace = write(tmp_path / "one-failed.jsonl", recs)
    assert cli("gate", trace, "--max-cost-usd", "1").exit_code == 1  # any failure fails by default
    data = json.loads(cli("gate", trace, "--max-cost-usd", "1", "--min-hit-ratio", "0.3",
                          "--max-failed-requests", "1", "--json").stdout)
    assert data["exit_code"] == 0 and check(data, "failed_requests")["passed"] is True
    # req_4 reached no model: the cost is the other five requests' ($0.0705855 − $0.01806)
    assert check(data, "max_cost_usd")["actual"] == pytest.approx(SAMPLE_COST - REQ_4_COST, abs=1e-6)
    # reads 9,785 of the other requests' 24,525 − 4,252 = 20,273 input tokens
    assert check(data, "min_hit_ratio")["actual"] == pytest.approx(9785 / 20273, abs=1e-4)


def test_empty_traces_and_baselines_are_refused(cli, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = cli("gate", empty, "--max-cost-usd", "1")
    assert res.exit_code == 2 and "no requests found" in res.output
    out = tmp_path / "base.json"
    res = cli("baseline", empty, "-o", out)
    assert res.exit_code == 2 and not out.exists()
    dead = write(tmp_path / "dead.jsonl", [failed(r) for r in records()[:2]])
    res = cli("baseline", dead, "-o", out)
    assert res.exit_code == 2 and "all 2 requests failed" in res.output and not out.exists()
    # what an older kvprobe wrote from an empty trace: every regression check passed against it
    out.write_text(json.dumps({"kvprobe_baseline": 1, "created": "2026-11-01T00:00:00+00:00",
                               "totals": {"requests": 0, "input_tokens": 0, "cache_read_tokens": 0,
                                          "token_hit_ratio": 0.0, "input_equivalent_tokens": 0.0, "cost_usd": 0.0},
                               "tasks": {}}))
    res = cli("gate", SAMPLE, "--baseline", out)
    assert res.exit_code == 2 and "base.json field 'totals.requests': the baseline holds no requests" in res.output


def _baseline(tmp_path, **totals) -> str:
    """A baseline of the sample's one task, with totals as given (the rest as the sample's)."""
    figures = {"requests": 6, "input_tokens": 24525, "cache_read_tokens": 9785, "token_hit_ratio": 0.399,
               "input_equivalent_tokens": 19403.5, "cost_usd": 0.070585, **totals}
    task = {"task": "fix-login-bug", "requests": 6, "cost_usd": figures["cost_usd"],
            "input_equivalent_tokens": figures["input_equivalent_tokens"],
            "token_hit_ratio": figures["token_hit_ratio"], "passed": None, "duration_s": 561.5,
            "diagnoses": ["params_changed", "prefix_changed", "ttl_expired"]}
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"kvprobe_baseline": 1, "created": "2026-11-29T00:00:00+00:00", "totals": figures,
                                "tasks": {"fix-login-bug": task}}))
    return str(path)


def test_a_baseline_cost_of_zero_is_a_value_not_a_pass(cli, tmp_path):
    data = json.loads(cli("gate", SAMPLE, "--baseline", _baseline(tmp_path, cost_usd=0.0), "--json").stdout)
    cost = check(data, "regression:cost_usd")
    assert cost["passed"] is False and "$0.0000 → $0.0706" in cost["detail"]  # used to pass: "no baseline value"
    assert data["exit_code"] == 1


def test_hit_ratio_regression_is_in_points(cli, tmp_path):
    base = _baseline(tmp_path, token_hit_ratio=0.522)
    res = cli("gate", SAMPLE, "--baseline", base)
    assert res.exit_code == 1
    # 52.2% → 39.9% is 12.3 points down (relative, it would read −23.6%)
    assert "FAIL regression:token_hit_ratio: 52.2% → 39.9% (-12.3 points; allowed −10 points)" in res.output
    res = cli("gate", SAMPLE, "--baseline", base, "--max-hit-ratio-drop", "15%")
    assert res.exit_code == 0 and "PASS regression:token_hit_ratio" in res.output


def test_baseline_tasks_missing_from_the_trace_are_undecided_and_named(cli, tmp_path):
    recs = [{**r, "session": "another-task"} for r in records()]
    trace = write(tmp_path / "renamed.jsonl", recs)
    base = _baseline(tmp_path)
    res = cli("gate", trace, "--baseline", base)
    assert res.exit_code == 3, res.output
    assert "UNDECIDED regression:tasks: 1 of 1 baseline task not in the trace: fix-login-bug; new in the trace: " \
           "another-task" in res.output
    assert cli("gate", trace, "--baseline", base, "--undecided", "warn").exit_code == 0
    assert cli("gate", SAMPLE, "--baseline", base).exit_code == 0


def test_new_causes_come_first_each_with_its_own_fix_and_what_it_adds(cli, tmp_path):
    base = json.loads(open(_baseline(tmp_path, cost_usd=0.05)).read())
    base["tasks"]["fix-login-bug"]["causes"] = [  # the baseline had the pause and the timestamp, not tool_choice
        {"kind": "ttl_expired", "where": "system[0]", "requests": 1, "cost_usd": 0.013534},
        {"kind": "prefix_changed", "where": "system[0]", "requests": 1, "cost_usd": 0.010}]
    (tmp_path / "baseline.json").write_text(json.dumps(base))
    res = cli("gate", SAMPLE, "--baseline", tmp_path / "baseline.json")
    assert res.exit_code == 1  # $0.05 → $0.0706 is +41.2%
    text = res.stdout
    new, old = text.index("New since the baseline:"), text.index("Already in the baseline:")
    assert new < text.index("params_changed at tool_choice") < old < text.index("ttl_expired at system[0]")
    # req_5 and req_6 missed $0.006845 + $0.001135 = $0.00798, all of it new; the timestamp's cost grew by
    # $0.012399 − $0.010 = $0.002399
    assert "params_changed at tool_choice in fix-login-bug: 2 requests from req_5, $0.0080 — tool_choice" in text
    assert "prefix_changed at system[0] in fix-login-bug: 1 request from req_3, $0.0124, +$0.0024 vs the " \
           "baseline" in text
    fixes = [line.strip() for line in text.splitlines() if line.strip().startswith("fix:")]
    assert len(fixes) == len(set(fixes)) == 3  # no fix printed twice
    assert "tool_choice" in fixes[0] and "keep-alive" in fixes[1] and "move the changing" in fixes[2]
    data = json.loads(cli("gate", SAMPLE, "--baseline", tmp_path / "baseline.json", "--json").stdout)
    first = data["top_causes"][0]
    assert (first["kind"], first["new"], first["requests"]) == ("params_changed", True, ["req_5", "req_6"])
    assert first["added_usd"] == pytest.approx(0.00798, abs=1e-6)


def test_a_cause_never_gets_another_kinds_fix():
    from kvprobe.gate.causes import causes
    from kvprobe.report import build_report

    report = build_report([SAMPLE], top=0)
    # a stabilize fix whose requests include the tool_choice change: it must not become that cause's fix
    report.fixes = [{"kind": "stabilize_prefix", "requests": ["req_3", "req_5"], "saving_usd": 0.02,
                     "detail": "move the changing line(s) of system[0] out of the cached prefix"}]
    by_kind = {c.kind: c for c in causes(report)}
    assert by_kind["prefix_changed"].fix.startswith("move the changing line")
    assert by_kind["params_changed"].fix.startswith("keep identity parameters") and \
        by_kind["params_changed"].fix_saving_usd is None


def test_summary_is_markdown_the_log_plain_and_prompt_text_stays_out(cli, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    res = cli("gate", SAMPLE, "--min-hit-ratio", "50%")
    assert res.exit_code == 1
    assert "FAIL min_hit_ratio: 39.9% is below 50.0% by 10.1 points" in res.stdout and "| ❌" not in res.stdout
    text = summary.read_text()
    assert text.startswith("### kvprobe gate: ❌ failed")
    assert "| ❌ | min_hit_ratio | 39.9% is below 50.0% by 10.1 points | --min-hit-ratio |" in text
    # the prompt text the stabilize fix quotes as its example of what changes (`e.g. "…"`)
    data = json.loads(cli("gate", SAMPLE, "--min-hit-ratio", "50%", "--json").stdout)
    (fix,) = [c["fix"] for c in data["top_causes"] if c["kind"] == "prefix_changed"]
    quoted = re.search(r'\(e\.g\. "([^"]+)"\)', fix).group(1).rstrip("…")
    assert "2025-09-10T10:09:10Z" in quoted  # req_3's timestamp, from the sample's system prompt
    assert quoted in res.stdout and quoted not in text
    assert quoted not in cli("gate", SAMPLE, "--min-hit-ratio", "50%", "--no-content").stdout
    summary.unlink()
    cli("gate", SAMPLE, "--min-hit-ratio", "50%", "--content")
    assert quoted in summary.read_text()


def test_markdown_cells_cannot_break_the_table(cli, tmp_path):
    from kvprobe.gate.formats import cell

    assert cell("a | b\nc <b>`x`</b>") == "a \\| b c &lt;b&gt;\\`x\\`&lt;/b&gt;"
    trace = write(tmp_path / "pipes.jsonl", [{**r, "session": "fix | login"} for r in records()])
    md = cli("gate", trace, "--min-hit-ratio", "50%", "--markdown").stdout
    rows = [line for line in md.splitlines() if line.startswith("|")]
    header = {line.count("|") - line.count("\\|") for line in rows if line.startswith("| cause")}
    assert header == {6}
    causes = [line for line in rows if "fix-login" not in line and "fix \\| login" in line]
    assert causes and all(line.count("|") - line.count("\\|") == 6 for line in causes)


def test_junit_xml_has_one_case_per_check(cli, tmp_path):
    junit = tmp_path / "junit.xml"
    res = cli("gate", SAMPLE, "--min-hit-ratio", "50%", "--max-cost-usd", "1", "--junit-xml", junit)
    assert res.exit_code == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "0")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == ["failed_requests", "max_cost_usd", "min_hit_ratio"]
    failure = cases["min_hit_ratio"].find("failure")
    assert failure.get("message") == "39.9% is below 50.0% by 10.1 points" and "ttl_expired" in failure.text
    assert "2025-09-10T10:09:10Z" not in junit.read_text()  # the fix's quoted prompt text


def _unknown_model(tmp_path):
    return write(tmp_path / "acme.jsonl", [{**r, "request": {**r["request"], "model": "acme-model-1"}}
                                           for r in records()])


def test_undecided_warn_passes_with_a_warning_only_when_something_was_decided(cli, tmp_path, monkeypatch):
    trace = _unknown_model(tmp_path)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    junit = tmp_path / "junit.xml"
    res = cli("gate", trace, "--max-cost-usd", "1", "--min-hit-ratio", "30%", "--undecided", "warn",
              "--junit-xml", junit)
    assert res.exit_code == 0 and "UNDECIDED max_cost_usd" in res.output
    assert "::warning title=kvprobe gate%3A max_cost_usd::no price for anthropic/acme-model-1" in res.stderr
    assert ET.parse(junit).getroot().find("testsuite").get("skipped") == "1"
    assert cli("gate", trace, "--max-cost-usd", "1", "--undecided", "warn").exit_code == 3  # nothing decided
    res = cli("gate", trace, "--max-cost-usd", "1", "--min-hit-ratio", "30%")
    assert res.exit_code == 3 and "::error title=kvprobe gate%3A max_cost_usd::" in res.stderr


def test_annotations_point_at_the_config_line_and_cannot_inject_commands(cli, tmp_path, monkeypatch):
    from kvprobe.gate.wording import annotation

    assert annotation("error", "t,1", "a\n::set-env x%") == "::error title=t%2C1::a%0A::set-env x%25"
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "agent"\n\n[tool.kvprobe.gate]\n'
                                             'min_hit_ratio = "50%"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    res = cli("gate", SAMPLE)
    assert res.exit_code == 1
    # "%" is written "%25" in workflow commands; GitHub shows "39.9% is below 50.0%"
    assert "::error file=pyproject.toml,line=5,title=kvprobe gate%3A min_hit_ratio::39.9%25 is below 50.0%25" in res.stderr


def test_several_traces_and_globs(cli, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in ("a", "b"):
        write(runs / f"{name}.jsonl", records())
    data = json.loads(cli("gate", str(runs / "*.jsonl"), "--max-cost-usd", "1", "--json").stdout)
    assert data["inputs"]["requests"] == 12 and len(data["inputs"]["traces"]) == 2
    assert check(data, "max_cost_usd")["actual"] == pytest.approx(2 * SAMPLE_COST, abs=1e-6)
    res = cli("gate", str(runs / "*.json"), "--max-cost-usd", "1")
    assert res.exit_code == 2 and "matches no file" in res.output


def test_config_is_found_up_the_tree_with_paths_relative_to_it(cli, tmp_path, monkeypatch):
    deep = tmp_path / "agent" / "src"
    deep.mkdir(parents=True)
    (tmp_path / "ci").mkdir()
    assert cli("baseline", SAMPLE, "-o", tmp_path / "ci" / "base.json").exit_code == 0
    (tmp_path / "pyproject.toml").write_text('[tool.kvprobe.gate]\nmin_hit_ratio = 0.3\nbaseline = "ci/base.json"\n')
    monkeypatch.chdir(deep)
    res = cli("gate", SAMPLE)
    assert res.exit_code == 0, res.output  # from a subfolder: the root's settings, its baseline path
    assert "PASS regression:cost_usd: $0.0706 → $0.0706 (+0.0%; allowed +10%)" in res.output
    assert "settings from ../../pyproject.toml" in res.output
    (tmp_path / "kvprobe.toml").write_text("[gate]\nmin_hit_ratio = 0.9\n")
    res = cli("gate", SAMPLE)
    assert res.exit_code == 1  # kvprobe.toml wins, and says what it shadows
    assert "disagree (min_hit_ratio: 0.9 in kvprobe.toml, 0.3 in pyproject.toml" in res.stderr
    other = tmp_path / "strict.toml"
    other.write_text("[gate]\nmax_cost_usd = 0.01\n")
    res = cli("gate", SAMPLE, "--config", other)
    assert res.exit_code == 1 and "FAIL max_cost_usd" in res.output and "min_hit_ratio" not in res.output
    res = cli("gate", SAMPLE, "--config", tmp_path / "nope.toml")
    assert res.exit_code == 2 and "field '--config'" in res.output


PRICES = '[models."acme-model-1"]\ninput_mtok = 3.0\noutput_mtok = 15.0\n'


def test_partial_price_file_uses_the_provider_multipliers_and_says_so(cli, tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES)
    res = cli("gate", _unknown_model(tmp_path), "--max-cost-usd", "1", "--price-file", prices, "--json")
    data = json.loads(res.stdout)
    # reads 0.1 × $3 = $0.30, 5m writes 1.25 × $3 = $3.75 (providers/anthropic.toml): the sample's own prices
    assert check(data, "max_cost_usd")["actual"] == pytest.approx(SAMPLE_COST, abs=1e-6)
    assert any("acme-model-1 has no cache_read_mtok, cache_write_mtok, cache_write_1h_mtok: priced at anthropic's "
               "cache multipliers (cache_read_mtok = 0.1 × input_mtok" in note for note in data["notes"])
    assert "warning: " in res.stderr
    prices.write_text('[models."acme-model-1"]\ninput_mtok = 3.0\n')  # output would be priced at $0
    res = cli("gate", _unknown_model(tmp_path), "--max-cost-usd", "1", "--price-file", prices)
    assert res.exit_code == 2 and "field 'models.acme-model-1.output_mtok': missing" in res.output


@pytest.mark.parametrize(("name", "text", "field"), [
    ("p.toml", PRICES.replace("3.0", "-3.0"), "models.acme-model-1.input_mtok"),
    ("p.toml", PRICES.replace("15.0", "nan"), "models.acme-model-1.output_mtok"),
    ("p.toml", PRICES.replace("15.0", "inf"), "models.acme-model-1.output_mtok"),
    ("p.json", '{"models": {"acme-model-1": {"input_mtok": NaN, "output_mtok": 1}}}', "models.acme-model-1.input_mtok"),
    ("p.toml", PRICES.replace("3.0", "true"), "models.acme-model-1.input_mtok"),
])
def test_impossible_prices_never_pass_a_gate(cli, tmp_path, name, text, field):
    prices = tmp_path / name
    prices.write_text(text)
    res = cli("gate", _unknown_model(tmp_path), "--max-cost-usd", "0", "--price-file", prices)
    assert res.exit_code == 2, res.output
    assert f"{prices} field '{field}'" in res.output and "Traceback" not in res.output


def test_files_that_are_not_utf8_exit_2_naming_them(cli, tmp_path, monkeypatch):
    prices = tmp_path / "prices.toml"
    prices.write_bytes(b'[models."acme-model-1"]\n# \xff\ninput_mtok = 3.0\noutput_mtok = 15.0\n')
    res = cli("gate", _unknown_model(tmp_path), "--max-cost-usd", "1", "--price-file", prices)
    assert res.exit_code == 2 and f"{prices}: not UTF-8 text (byte 0xff at offset 26)" in res.output
    (tmp_path / "kvprobe.toml").write_bytes(b"[gate]\n# caf\xe9\nmin_hit_ratio = 0.3\n")
    monkeypatch.chdir(tmp_path)
    res = cli("gate", SAMPLE)
    assert res.exit_code == 2 and "kvprobe.toml: not UTF-8 text (byte 0xe9" in res.output


def test_step_summary_that_cannot_be_written_is_exit_2_before_any_work(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))
    res = cli("gate", SAMPLE, "--min-hit-ratio", "0.3")
    assert res.exit_code == 2 and "field '$GITHUB_STEP_SUMMARY': is a folder" in res.output
    assert "PASS" not in res.output
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "gone" / "summary.md"))
    res = cli("gate", SAMPLE, "--min-hit-ratio", "0.3")
    assert res.exit_code == 2 and "its folder does not exist" in res.output


def test_a_full_stdout_is_exit_2_not_a_traceback():
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "kvprobe", "gate", str(SAMPLE), "--min-hit-ratio", "0.3"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "cannot write the output: No space left on device" in done.stderr
    assert "Traceback" not in done.stderr


def test_input_formats_have_schemas_with_examples_that_load(tmp_path):
    from kvprobe.gate.config import _from_table
    from kvprobe.pricing import load_price_file

    for name in ("price-file", "gate-config"):
        schema = load_schema(name)
        for example in schema["examples"]:
            Draft202012Validator(schema).validate(example)
    example = load_schema("price-file")["examples"][0]
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(example))
    assert load_price_file(path)["acme-model-1"]["cache_write_1h_mtok"] == 6.0
    config = _from_table(load_schema("gate-config")["examples"][0], tmp_path / "kvprobe.toml", "[gate]")
    assert config.thresholds.min_hit_ratio == 0.5 and config.thresholds.max_hit_ratio_drop == 0.05


def test_baseline_output_validates_and_keeps_causes(cli, tmp_path):
    out = tmp_path / "base.json"
    assert cli("baseline", SAMPLE, "-o", out).exit_code == 0
    data = json.loads(out.read_text())
    Draft202012Validator(load_schema("baseline")).validate(data)
    causes = {(c["kind"], c["where"]): c["requests"] for c in data["tasks"]["fix-login-bug"]["causes"]}
    assert causes == {("ttl_expired", "system[0]"): 1, ("prefix_changed", "system[0]"): 1,
                      ("params_changed", "tool_choice"): 2}
