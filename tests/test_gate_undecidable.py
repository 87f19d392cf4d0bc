"""`kvprobe gate` cannot pass what it cannot price, and refuses thresholds it would misread."""
from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from conftest import ROOT
from kvprobe.schemas import load_schema

SAMPLE = ROOT / "traces" / "sample_session.jsonl"

# The sample's logged usage (response.usage of its six records), summed by hand:
# cache writes 3265+329+3923+4252+2313+658 = 14,740; reads 3265+2268+4252 = 9,785; fresh 0;
# output 120+127+134+141+148+155 = 825. At the prices below ($/Mtok: write 3.75, read 0.3, output 15):
# 14,740 × 3.75 + 9,785 × 0.3 + 825 × 15 = 55,275 + 2,935.5 + 12,375 = 70,585.5 µ$ = $0.0705855.
PRICED_AT_FILE = 0.0705855
PRICES = '[models."acme-model-1"]\ninput_mtok = 3.0\noutput_mtok = 15.0\ncache_read_mtok = 0.3\ncache_write_mtok = 3.75\n'


def _unknown_model_trace(tmp_path, first_n: int | None = None):
    """The sample with its model renamed to one no price list knows (all records, or the first n)."""
    lines = SAMPLE.read_text().splitlines()
    cut = len(lines) if first_n is None else first_n
    renamed = [line.replace('"claude-sonnet-4-5"', '"acme-model-1"') if i < cut else line
               for i, line in enumerate(lines)]
    assert sum('"acme-model-1"' in line for line in renamed) == cut  # the rename really happened
    path = tmp_path / "acme.jsonl"
    path.write_text("\n".join(renamed) + "\n")
    return path


def test_cost_gate_on_an_unknown_model_is_undecidable_and_names_it(cli, tmp_path):
    trace = _unknown_model_trace(tmp_path)
    res = cli("gate", trace, "--max-cost-usd", "0.001")
    assert res.exit_code == 3, res.output
    assert "no price for anthropic/acme-model-1 (6 requests)" in res.output and "--price-file" in res.output
    assert "0 USD" not in res.output  # it used to print "0 USD ≤ 0.001 USD" and pass
    data = json.loads(cli("gate", trace, "--max-cost-usd", "0.001", "--json").stdout)
    Draft202012Validator(load_schema("gate")).validate(data)  # the shipped contract allows an undecided check
    assert data["decidable"] is False and data["passed"] is None
    cost = next(c for c in data["checks"] if c["name"] == "max_cost_usd")
    assert cost["passed"] is None and cost["actual"] is None


def test_partly_priced_trace_names_how_many_requests(cli, tmp_path):
    trace = _unknown_model_trace(tmp_path, first_n=2)
    res = cli("gate", trace, "--max-cost-per-task", "5")
    assert res.exit_code == 3 and "anthropic/acme-model-1 (2 requests)" in res.output


def test_price_file_makes_the_cost_gate_decidable(cli, tmp_path):
    trace = _unknown_model_trace(tmp_path)
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES)
    data = json.loads(cli("gate", trace, "--max-cost-usd", "0.05", "--price-file", prices, "--json").stdout)
    assert data["decidable"] is True and data["passed"] is False
    cost = next(c for c in data["checks"] if c["name"] == "max_cost_usd")
    assert cost["actual"] == pytest.approx(PRICED_AT_FILE, abs=1e-6)
    assert cli("gate", trace, "--max-cost-usd", "0.08", "--price-file", prices).exit_code == 0


def test_a_failed_check_still_fails_beside_an_undecidable_one(cli, tmp_path):
    trace = _unknown_model_trace(tmp_path)
    res = cli("gate", trace, "--max-cost-usd", "1", "--min-hit-ratio", "90%")
    assert res.exit_code == 1  # the hit ratio (39.9 %) fails whatever the cost
    assert "UNDECIDED max_cost_usd" in res.output and "FAIL min_hit_ratio" in res.output


def test_unpriced_report_shows_na_not_zero(cli, tmp_path):
    trace = _unknown_model_trace(tmp_path)
    res = cli("report", trace, "--no-fixes")
    assert res.exit_code == 0
    total = res.stdout[res.stdout.index("Total"):].split("Writes:")[0]
    assert "n/a" in total and "$0.0000" not in res.stdout
    data = json.loads(cli("report", trace, "--json", "--no-fixes").stdout)
    Draft202012Validator(load_schema("report")).validate(data)
    assert data["totals"]["cost_usd"] is None and data["tasks"][0]["cost_usd"] is None


@pytest.mark.parametrize(("args", "message"), [
    (["--min-hit-ratio", "50"], "for 50 percent write 50%"),
    (["--min-hit-ratio", "-1"], "a ratio cannot be negative"),
    (["--min-hit-ratio", "120%"], "expected a percentage from 0% to 100%, got 120%"),
    (["--min-hit-ratio", "most"], "got most"),
    (["--max-cost-usd", "-1"], "a limit cannot be negative"),
    (["--max-cost-per-task", "-0.5"], "a limit cannot be negative"),
    (["--max-input-equivalent", "-10"], "a limit cannot be negative"),
    (["--max-cost-usd", "abc"], "expected a number of at least 0, got abc"),
    (["--max-regression", "10"], "for 10 percent write 10%"),
    (["--max-regression", "-5%"], "of at least 0%"),
    (["--max-regression", "10%"], "needs a baseline to compare with: pass --baseline"),
])
def test_out_of_range_thresholds_exit_2_naming_the_flag(cli, args, message):
    res = cli("gate", SAMPLE, *args)
    assert res.exit_code == 2, res.output
    assert f"field '{args[0]}'" in res.output and message in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("ratio", ["0.5", "50%", "50.0%"])
def test_ratio_as_fraction_or_percentage_means_the_same(cli, ratio):
    res = cli("gate", SAMPLE, "--min-hit-ratio", ratio)
    assert res.exit_code == 1 and "39.9% is below 50.0% by 10.1 points" in res.output


@pytest.mark.parametrize(("toml", "message"), [
    ("[gate]\nmin_hit_ratio = 80\n", "for 80 percent write 80%"),
    ("[gate]\nmin_hit_ratio = \"80%\"\nmax_cost_usd = -2\n", "a limit cannot be negative"),
    ("[gate]\nmax_regression = \"10%\"\n", "needs a baseline"),
])
def test_config_thresholds_are_checked_like_flags(cli, tmp_path, monkeypatch, toml, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kvprobe.toml").write_text(toml)
    res = cli("gate", SAMPLE)
    assert res.exit_code == 2 and "kvprobe.toml" in res.output and message in res.output


def test_config_percentage_is_accepted(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kvprobe.toml").write_text('[gate]\nmin_hit_ratio = "30%"\n')
    res = cli("gate", SAMPLE)
    assert res.exit_code == 0 and "39.9% ≥ 30.0%" in res.output


def test_compare_does_not_call_an_unpriced_candidate_cheaper(cli, tmp_path):
    trace = _unknown_model_trace(tmp_path)
    res = cli("compare", SAMPLE, trace)
    assert res.exit_code == 0
    assert "Total cost: $0.0706 → n/a; regressed: none; cheaper: none" in res.stdout
    data = json.loads(cli("compare", SAMPLE, trace, "--json").stdout)
    assert data["tasks"][0]["cost_usd"]["candidate"] is None and data["improved"] == []
