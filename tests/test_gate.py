"""`kvprobe gate` and `kvprobe baseline`: exit codes, config files, baselines, Markdown for CI."""
from __future__ import annotations

import json


from conftest import ROOT
from test_economics import growing_session
from kvprobe.trace import TraceRecord, write_trace

SAMPLE = ROOT / "traces" / "sample_session.jsonl"


def test_thresholds_that_hold_exit_0_and_failures_exit_1_with_causes(cli):
    ok = cli("gate", SAMPLE, "--max-cost-usd", "1", "--min-hit-ratio", "0.3")
    assert ok.exit_code == 0 and "PASS max_cost_usd" in ok.output
    bad = cli("gate", SAMPLE, "--min-hit-ratio", "0.5", "--max-input-equivalent", "10000", "--json")
    assert bad.exit_code == 1
    data = json.loads(bad.stdout)
    failed = {c["name"]: c for c in data["checks"] if not c["passed"]}
    assert set(failed) == {"min_hit_ratio", "max_input_equivalent"}
    assert "below 50.0% by 10.1 points" in failed["min_hit_ratio"]["detail"]
    # 19,403.5 input-equivalents against 10,000: plain numbers, never 1.94e+04
    assert failed["max_input_equivalent"]["detail"] == "19,404 tokens exceeds 10,000 tokens by 9,404 tokens (94.0%)"
    assert data["top_causes"][0]["kind"] == "ttl_expired" and "keep-alive" in data["top_causes"][0]["fix"]


def test_thresholds_from_pyproject_and_kvprobe_toml(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.kvprobe.gate]\nmin_hit_ratio = 0.9\n')
    assert cli("gate", SAMPLE).exit_code == 1
    (tmp_path / "kvprobe.toml").write_text('[gate]\nmax_cost_usd = 5.0\n')  # kvprobe.toml wins
    assert cli("gate", SAMPLE).exit_code == 0
    (tmp_path / "kvprobe.toml").write_text('[gate]\nmax_cost = 5.0\n')
    res = cli("gate", SAMPLE)
    assert res.exit_code == 2 and "kvprobe.toml" in res.output and "max_cost" in res.output


def test_undecidable_without_usage_or_thresholds(cli, tmp_path):
    trace = tmp_path / "nousage.jsonl"
    recs = [TraceRecord(id=r.id, provider=r.provider, started_at=r.started_at, request=r.request, session=r.session)
            for r in growing_session(3)]
    write_trace(trace, recs)
    res = cli("gate", trace, "--max-cost-usd", "1")
    assert res.exit_code == 3 and "no logged usage" in res.output
    assert cli("gate", trace, "--max-cost-usd", "1", "--predicted").exit_code == 0
    assert cli("gate", SAMPLE).exit_code == 3  # no thresholds anywhere


def test_the_failed_requests_limit_alone_is_a_gate(cli, tmp_path):
    """`gate --max-failed-requests 0` on a capture whose requests all succeeded said "could not decide: no
    thresholds" and exited 3, its one check passed (`--undecided warn` too); set, the limit is the gate. The
    sample's 6 requests all succeeded; with one failed (an error, no usage) the same gate fails."""
    res = cli("gate", SAMPLE, "--max-failed-requests", "0")
    assert res.exit_code == 0 and "none of 6 requests failed" in res.output, res.output
    records = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    records[2]["error"] = "HTTP 529: overloaded_error"
    records[2].pop("response", None)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert cli("gate", broken, "--max-failed-requests", "0").exit_code == 1
    assert cli("gate", broken, "--max-failed-requests", "1").exit_code == 0


def test_baseline_regression_and_step_summary(cli, tmp_path, monkeypatch):
    base_trace, cand_trace = tmp_path / "base.jsonl", tmp_path / "cand.jsonl"
    write_trace(base_trace, growing_session(5))
    worse = growing_session(5)
    for r in worse[2:]:
        r.request["system"][0]["text"] = f"Now {r.id}\n" + r.request["system"][0]["text"]
        r.response["usage"]["cache_read_input_tokens"] = 0
        r.response["usage"]["cache_creation_input_tokens"] = r.response["usage"]["cache_creation"][
            "ephemeral_5m_input_tokens"] = sum(v for k, v in r.response["usage"].items()
                                               if k in ("cache_read_input_tokens", "cache_creation_input_tokens")) or 1
    write_trace(cand_trace, worse)
    baseline = tmp_path / "baseline.json"
    assert cli("baseline", base_trace, "-o", baseline).exit_code == 0
    assert json.loads(baseline.read_text())["kvprobe_baseline"] == 1
    assert cli("gate", base_trace, "--baseline", baseline, "--max-regression", "10%").exit_code == 0
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    res = cli("gate", cand_trace, "--baseline", baseline, "--max-regression", "10%", "--markdown")
    assert res.exit_code == 1
    text = summary.read_text()
    assert text.startswith("### kvprobe gate: ❌ failed") and "regression:cost_usd" in text
    assert "prefix_changed" in text


def test_bad_baseline_is_input_error(cli, tmp_path):
    bad = tmp_path / "b.json"
    bad.write_text('{"totals": {}}')
    res = cli("gate", SAMPLE, "--baseline", bad, "--max-cost-usd", "1")
    assert res.exit_code == 2 and "not a kvprobe baseline" in res.output
