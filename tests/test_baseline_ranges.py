"""A baseline's every figure is checked against its range before a gate compares with it: a hand-edited
`token_hit_ratio: 5` was accepted and printed `FAIL regression: 500.0% → 96.6%`. Refused now, exit 2, the
line naming the file and the field, nothing written (no JUnit, no summary).

The baseline is written here by hand, as `kvprobe baseline` writes one for traces/sample_session.jsonl
(figures from its report: 6 requests, 24,525 input tokens, 9,785 read, $0.070585).
"""
from __future__ import annotations

import copy
import json

import pytest

from conftest import ROOT

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
GOOD = {"kvprobe_baseline": 1, "created": "2026-11-29T00:00:00+00:00",
        "totals": {"requests": 6, "input_tokens": 24525, "cache_read_tokens": 9785, "token_hit_ratio": 0.399,
                   "input_equivalent_tokens": 19403.5, "cost_usd": 0.070585, "tasks": 1, "pass_rate": None,
                   "cost_per_accepted_task_usd": None, "median_duration_s": 561.5, "max_task_cost_usd": 0.0705855},
        "tasks": {"fix-login-bug": {"task": "fix-login-bug", "requests": 6, "cost_usd": 0.070585,
                                    "input_equivalent_tokens": 19403.5, "token_hit_ratio": 0.399, "passed": None,
                                    "duration_s": 561.5, "cold": None, "agents": ["main"], "keep_alive_requests": 0,
                                    "diagnoses": ["params_changed", "prefix_changed", "ttl_expired"],
                                    "causes": [{"kind": "prefix_changed", "where": "system[0]", "requests": 1,
                                                "cost_usd": 0.012399}]}}}
TASK = "tasks.fix-login-bug"
RATIO, COUNT, AMOUNT = "a ratio from 0 to 1", "a whole number of 0 or more", "a finite number of 0 or more"
# (field, value, what the error expects): each range's edges and what lies beyond them
CASES = [
    ("totals.token_hit_ratio", 5, RATIO), ("totals.token_hit_ratio", -0.1, RATIO),
    ("totals.token_hit_ratio", 1.0001, RATIO), ("totals.pass_rate", 2, RATIO),
    (f"{TASK}.token_hit_ratio", 1.5, RATIO), (f"{TASK}.token_hit_ratio", "0.4", RATIO),
    ("totals.requests", -1, COUNT), ("totals.requests", 6.5, COUNT), ("totals.input_tokens", True, COUNT),
    ("totals.cache_read_tokens", -5, COUNT), ("totals.tasks", 1.5, COUNT), (f"{TASK}.requests", "6", COUNT),
    (f"{TASK}.keep_alive_requests", -2, COUNT), (f"{TASK}.causes[0].requests", 0.5, COUNT),
    ("totals.cost_usd", -0.01, AMOUNT), ("totals.cost_usd", 1e300, AMOUNT), ("totals.max_task_cost_usd", [], AMOUNT),
    ("totals.cost_per_accepted_task_usd", -1, AMOUNT), ("totals.input_equivalent_tokens", -3, AMOUNT),
    ("totals.median_duration_s", -1, AMOUNT), (f"{TASK}.cost_usd", {"usd": 1}, AMOUNT),
    (f"{TASK}.duration_s", -0.5, AMOUNT), (f"{TASK}.causes[0].cost_usd", -1, AMOUNT),
    ("totals.cache_read_tokens", 30000, "expected no more than input_tokens (24525), got 30000"),
    (f"{TASK}.passed", "yes", "expected true, false or null"), (f"{TASK}.cold", 1, "expected true, false or null"),
    (f"{TASK}.agents", "main", "expected a list of agent names"),
    (f"{TASK}.diagnoses", [1], "expected a list of diagnosis kinds"),
    (f"{TASK}.causes", {}, "expected a list of causes"), (f"{TASK}.causes[0]", {"requests": 1}, "with a 'kind'"),
    ("created", "yesterday", "expected an RFC 3339 time"), ("created", 20261129, "expected an RFC 3339 time"),
]


def _set(doc: dict, field: str, value) -> dict:
    """A copy of `doc` with the figure at `field` ("tasks.fix-login-bug.causes[0].requests") set."""
    doc = copy.deepcopy(doc)
    parts = field.split(".")
    holder = doc
    for part in parts[:-1]:
        name, _, index = part.partition("[")
        holder = holder[name]
        if index:
            holder = holder[int(index[:-1])]
    name, _, index = parts[-1].partition("[")
    if index:
        holder[name][int(index[:-1])] = value
    else:
        holder[name] = value
    return doc


def _gate(cli, tmp_path, doc: dict):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(doc))
    res = cli("gate", SAMPLE, "--baseline", path, "--junit-xml", tmp_path / "junit.xml",
              "--markdown-file", tmp_path / "summary.md")
    return res, path


def test_the_hand_written_baseline_is_accepted(cli, tmp_path):
    res, _ = _gate(cli, tmp_path, GOOD)
    assert res.exit_code == 0 and "PASS regression:token_hit_ratio" in res.output


@pytest.mark.parametrize(("field", "value", "expected"), CASES, ids=[f"{f}={v!r}" for f, v, _ in CASES])
def test_a_figure_out_of_its_range_is_refused_naming_file_and_field(cli, tmp_path, field, value, expected):
    res, path = _gate(cli, tmp_path, _set(GOOD, field, value))
    assert res.exit_code == 2, res.output
    assert f"{path} field '{field}': " in res.output and expected in res.output
    assert not (tmp_path / "junit.xml").exists() and not (tmp_path / "summary.md").exists()


@pytest.mark.parametrize("field", ["totals.token_hit_ratio", "totals.cost_usd", "totals.pass_rate",
                                   f"{TASK}.cost_usd", "created"])
def test_null_is_unknown_not_out_of_range(cli, tmp_path, field):
    res, _ = _gate(cli, tmp_path, _set(GOOD, field, None))
    assert res.exit_code in (0, 3), res.output  # compared where known, undecided where not


def test_ranges_edges_are_inside(cli, tmp_path):
    doc = _set(_set(GOOD, "totals.pass_rate", 1), f"{TASK}.keep_alive_requests", 0)
    doc = _set(_set(doc, "totals.requests", 6.0), f"{TASK}.passed", True)  # a whole number written as 6.0
    res, _ = _gate(cli, tmp_path, doc)
    assert res.exit_code == 0, res.output
