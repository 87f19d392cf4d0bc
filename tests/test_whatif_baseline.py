"""The what-if's baseline, released while the fixes are priced, is still what the report and the table show.

Rule (docs/caching-rules.md; providers/anthropic.toml): a 5-minute entry is gone after 5 minutes, and a write
costs 1.25x an input token. Two identical requests 7 minutes apart with no usage logged (the baseline is the
prediction): each writes its whole prompt, so the baseline costs 2 x 1.25 x its tokens and reads nothing.
`report` keeps only its totals of that baseline (`with_all_fixes.baseline_predicted`) and releases the
diagnosed results while the policies are priced; the per-request table (`--what-if`) simulates it again.
"""
from __future__ import annotations

import json

import pytest

from kvprobe.pricing import PriceBook
from kvprobe.trace import write_trace
from kvprobe.whatif.evaluate import evaluate
from test_simulator_rules import claude, sizes
from test_whatif import rec


def pause_of_seven_minutes():
    body = claude()
    return [rec("r0", 0, body), rec("r1", 420, body)], sizes(body)[1]


def test_the_report_shows_the_baseline_it_released(cli, tmp_path):
    records, total = pause_of_seven_minutes()
    trace = tmp_path / "trace.jsonl"
    write_trace(trace, records)
    data = json.loads(cli("report", trace, "--json").stdout)
    assert data["with_all_fixes"]["baseline_predicted"]["token_hit_ratio"] == 0.0
    assert data["with_all_fixes"]["baseline_predicted"]["input_equivalent_tokens"] == pytest.approx(
        2 * 1.25 * total, abs=0.1)


def test_a_released_baseline_is_simulated_again_with_the_same_usage_and_cost():
    records, total = pause_of_seven_minutes()
    held = evaluate(records, PriceBook())
    released = evaluate(records, PriceBook(), keep=lambda baseline: [r.usage.cache_write_tokens for r in baseline])
    assert released.kept == [total, total]  # what the caller kept, before the release
    assert released._baseline is None
    again = released.baseline
    assert [(r.sk.id, r.usage, r.cost_usd, r.input_equivalent) for r in again] == \
        [(r.sk.id, r.usage, r.cost_usd, r.input_equivalent) for r in held.baseline]
    assert [r.usage.cache_write_tokens for r in again] == [total, total]
    assert released.fixes and [f.kind for f in released.fixes] == [f.kind for f in held.fixes]
