"""The Python API's tables: one name per quantity across tables, each request's dollars by token class, and
`kvprobe.load(kvprobe.analyse(x))` giving the same tables as `kvprobe.load(x)`, on a Claude Code folder and a
kvprobe trace copied outside the repository. Expected dollars are computed by hand below from Anthropic's
list prices for claude-sonnet-4-5 (input $3, output $15, 5-minute writes $3.75, reads $0.30 per million)."""
from __future__ import annotations

import shutil

import pandas.testing as pdt
import pytest

import kvprobe
from conftest import ROOT
from kvprobe.db.schema import TABLES

CLAUDE = ROOT / "tests" / "fixtures" / "importers" / "claude" / "projects" / "-home-me-app"


@pytest.mark.parametrize("source", ["claude_folder", "trace"])
def test_load_of_analyse_is_load(tmp_path, source):
    if source == "claude_folder":
        path = tmp_path / "projects" / "-home-me-app"
        shutil.copytree(CLAUDE, path)
    else:
        path = tmp_path / "run.jsonl"
        shutil.copy(ROOT / "traces" / "sample_session.jsonl", path)
    direct, through = kvprobe.load(path), kvprobe.load(kvprobe.analyse(path))
    assert direct.tables == through.tables
    for table in direct.tables:
        a, b = direct.to_pandas(table), through.to_pandas(table)
        if table == "traces":
            a, b = a.drop(columns="loaded_at"), b.drop(columns="loaded_at")
        pdt.assert_frame_equal(a, b, obj=table)
    traces = through.traces()
    assert len(traces) == 1 and traces.trace_id[0] != "report" and traces.path[0] == str(path.resolve())
    assert traces.records[0] == (5 if source == "claude_folder" else 6)


def test_each_request_has_its_dollars_by_token_class(tmp_path):
    path = tmp_path / "run.jsonl"
    shutil.copy(ROOT / "traces" / "sample_session.jsonl", path)
    rows = kvprobe.load(path).to_pandas().set_index("request_id")
    # req_1: 3,265 tokens written for 5 minutes and 120 output tokens
    assert rows.loc["req_1", "cache_write_usd"] == pytest.approx(3265 * 3.75e-6)
    assert rows.loc["req_1", "output_usd"] == pytest.approx(120 * 15e-6)
    assert rows.loc["req_1", "cache_read_usd"] == 0 and rows.loc["req_1", "fresh_input_usd"] == 0
    # req_2: 3,265 read, 329 written, 127 output tokens
    assert rows.loc["req_2", "cache_read_usd"] == pytest.approx(3265 * 0.30e-6)
    assert rows.loc["req_2", "cache_write_usd"] == pytest.approx(329 * 3.75e-6)
    assert rows.loc["req_2", "cost_usd"] == pytest.approx(3265 * 0.30e-6 + 329 * 3.75e-6 + 127 * 15e-6)
    parts = rows.cache_read_usd + rows.cache_write_usd + rows.fresh_input_usd + rows.output_usd
    assert (parts - rows.cost_usd).abs().max() < 1e-9  # the four add up to the request's cost, every request


def test_one_name_for_one_quantity_across_tables():
    columns = {t.name: {c.name for c in t.columns} for t in TABLES}
    assert "token_hit_ratio" in columns["requests"] and "token_hit_ratio" in columns["sessions"]
    assert "missed_read_tokens" in columns["requests"] & columns["sessions"] & columns["diagnoses"]
    assert {"cache_read_usd", "cache_write_usd", "fresh_input_usd", "cost_usd"} <= columns["requests"] & columns["block_costs"]
    every = set().union(*columns.values())
    assert not every & {"hit_ratio", "missed_tokens", "write_usd", "read_usd", "fresh_usd", "total_usd"}
