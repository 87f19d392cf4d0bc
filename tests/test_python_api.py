"""The Python API matches the CLI: `kvprobe.analyse` is `kvprobe report`, `kvprobe.load` gives every table
of its JSON as DataFrames and dataclasses, and `dir(kvprobe)` shows what a user can call."""
from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import kvprobe
from conftest import ROOT
from kvprobe.cli import app

SAMPLE = ROOT / "traces" / "sample_session.jsonl"


@pytest.fixture(scope="module")
def report_json() -> dict:
    return json.loads(CliRunner().invoke(app, ["report", str(SAMPLE), "--json"]).stdout)


@pytest.fixture(scope="module")
def data():
    return kvprobe.load(SAMPLE)


def test_dir_shows_the_public_api_each_with_a_docstring():
    assert dir(kvprobe) == sorted(kvprobe.__all__)
    assert {"analyse", "load", "Loaded", "Report", "InputError"} <= set(kvprobe.__all__)
    for name in kvprobe.__all__:
        if name != "__version__":
            assert inspect.getdoc(getattr(kvprobe, name)), name
    assert "kvprobe.load" in kvprobe.__doc__ and "to_pandas" in kvprobe.__doc__


def test_every_table_of_the_report_json_is_a_dataframe(data, report_json):
    assert set(data.tables) == {"traces", "requests", "sessions", "blocks", "block_costs", "diagnoses", "fixes",
                                "bill"}
    # the sample's misses, by hand from its logged usage: req_3 loses req_2's read + write (3,265 + 329);
    # req_4 the 3,923 req_3 wrote; req_5 reads 2,268 of req_4's 4,252; req_6 reads 4,252 of req_5's 4,581
    diagnoses = data.to_pandas("diagnoses")
    assert list(zip(diagnoses.request_id, diagnoses.kind, diagnoses.missed_read_tokens)) == [
        ("req_3", "prefix_changed", 3594), ("req_4", "ttl_expired", 3923), ("req_5", "params_changed", 1984),
        ("req_6", "params_changed", 329)]
    fixes = data.to_pandas("fixes")
    assert [(f["kind"], f["requests"], f["saving_usd"]) for f in report_json["fixes"]] == \
        [(k, list(r), s) for k, r, s in zip(fixes.kind, fixes.requests, fixes.saving_usd)]
    assert len(data.block_costs()) == len(report_json["blocks"])
    # the JSON rounds each block to 6 decimals: 22 blocks, at most 22 x 0.5e-6 apart in all
    assert data.block_costs().cost_usd.sum() == pytest.approx(sum(b["total_usd"] for b in report_json["blocks"]),
                                                               abs=1.1e-5)
    sessions = data.sessions().drop(columns=["trace_id"]).set_index("session")
    for name, totals in report_json["sessions"].items():
        assert {k: sessions.loc[name, k] for k in totals} == pytest.approx(totals), name
    assert data.to_pandas().equals(data.requests()) and data.to_pandas("fixes").equals(data.fixes())
    with pytest.raises(KeyError, match="tables: traces, requests"):
        data.to_pandas("misses")


def test_trace_id_is_filled_and_the_same_in_every_table(data, tmp_path):
    ids = {name: set(data.to_pandas(name).trace_id) for name in data.tables}
    (trace_id,) = ids["traces"]
    assert trace_id and all(found == {trace_id} for found in ids.values()), ids
    assert list(data.reports) == [trace_id] and data.reports[trace_id].totals["requests"] == 6
    db = tmp_path / "k.duckdb"
    from kvprobe.db import load_traces

    assert load_traces(db, [SAMPLE])[0].trace_id == trace_id  # the identity `kvprobe db load` gives it
    from_db = kvprobe.load(db)
    assert from_db.sessions().drop(columns=["trace_id"]).equals(data.sessions().drop(columns=["trace_id"]))


def test_rows_are_dataclasses_typed_by_the_schema(data):
    fix = data.records("fixes")[0]
    assert dataclasses.is_dataclass(fix) and type(fix).__name__ == "FixRow"
    assert (fix.kind, fix.requests, fix.chosen) == ("keep_alive", ["req_4"], True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fix.kind = "other"
    first = data.records("requests")[0]
    assert first.request_id == "req_1" and first.started_at == dt.datetime(2025, 9, 10, 10, 7, 55, tzinfo=dt.timezone.utc)
    assert "cache_read_tokens: input tokens read from the cache" in type(first).__doc__


def test_analyse_is_kvprobe_report(report_json):
    rep = kvprobe.analyse(SAMPLE)
    assert isinstance(rep, kvprobe.Report)
    assert json.loads(json.dumps(rep.to_json(), default=str)) == report_json
    only = kvprobe.analyse(SAMPLE, since="2025-09-10T10:16:00Z", fixes=False)
    assert [r.sk.id for r in only.results] == ["req_4", "req_5", "req_6"]
    loaded = kvprobe.load(only)
    assert loaded.to_pandas().request_id.tolist() == ["req_4", "req_5", "req_6"] and len(loaded.fixes()) == 0
    with pytest.raises(kvprobe.InputError, match="RFC 3339"):
        kvprobe.analyse(SAMPLE, since="yesterday")


def test_fleet_findings_become_a_table_when_the_report_has_them():
    from kvprobe.analysis.fleet import SharedPrefix

    rep = kvprobe.analyse(SAMPLE, fixes=False)
    assert rep.fleet == [] and "fleet" not in kvprobe.load(rep).tables  # one session: no fleet
    rep.fleet = [SharedPrefix(["main"], [f"s{i}" for i in range(120)], 120, 13, 3_460, "system[0]",
                              rewrote_sessions=120, rewritten_tokens=415_200, rewrite_usd=4.2)]
    loaded = kvprobe.load(rep)
    assert "fleet" in loaded.tables
    [row] = loaded.fleet().drop(columns=["trace_id"]).to_dict("records")
    assert (row["sessions"], row["shared_tokens"], row["rewrite_usd"]) == (120, 3_460, 4.2)
    assert loaded.records("fleet")[0].sessions == 120


def test_the_example_notebook_runs_and_prints_the_reports_figures():
    res = subprocess.run([sys.executable, str(ROOT / "examples" / "notebook.py")], capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("6 requests · hit ratio 39.9% · 19,404 input-equivalents · $0.0706")
    assert "largest saving: keep_alive on req_4: $0.0123" in res.stdout
