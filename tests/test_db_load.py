"""`kvprobe db load`, `kvprobe sql`, `kvprobe db schema` and `kvprobe.load()`: traces as tables."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from agent_logs import ClaudeTranscript
from kvprobe.db.schema import TABLES

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "traces" / "sample_session.jsonl"
LINES = SAMPLE.read_text().splitlines(keepends=True)


@pytest.fixture
def trace(tmp_path) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(LINES[:4]))  # the first four requests; tests append the rest
    return path


def counts(db: Path) -> dict[str, int]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {t.name: con.execute(f"SELECT count(*) FROM {t.name}").fetchone()[0] for t in TABLES}


def load(cli, *args) -> dict:
    res = cli("db", "load", *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_load_is_incremental_and_never_duplicates(cli, trace, tmp_path):
    db = tmp_path / "k.duckdb"
    first = load(cli, trace, "--db", db)["traces"]
    assert [t["status"] for t in first] == ["loaded"] and first[0]["requests"] == 4
    before = counts(db)
    assert before["requests"] == 4 and before["traces"] == 1 and before["blocks"] > 4 * 10
    assert load(cli, trace, "--db", db)["traces"][0]["status"] == "unchanged"
    assert counts(db) == before

    with trace.open("a") as fh:  # the capture went on: two more requests appended
        fh.write("".join(LINES[4:]))
    again = load(cli, trace, "--db", db)["traces"][0]
    assert again["status"] == "replaced" and again["trace_id"] == first[0]["trace_id"]
    after = counts(db)
    assert after["requests"] == 6 and after["traces"] == 1

    moved = tmp_path / "moved.jsonl"  # the same trace under another name is the same trace
    moved.write_text(trace.read_text())
    assert load(cli, moved, "--db", db, "--force")["traces"][0]["status"] == "replaced"
    assert counts(db) == after
    with duckdb.connect(str(db), read_only=True) as con:
        dupes = con.execute("SELECT count(*) FROM (SELECT trace_id, request_id FROM requests GROUP BY ALL "
                            "HAVING count(*) > 1)").fetchone()[0]
        assert dupes == 0 and con.execute("SELECT path FROM traces").fetchone()[0] == str(moved.resolve())


def test_two_traces_and_the_tables_answer_questions(cli, trace, tmp_path):
    db = tmp_path / "k.duckdb"
    other = tmp_path / "other.jsonl"
    other.write_text(SAMPLE.read_text().replace('"fix-login-bug"', '"other-task"').replace('"req_', '"o_'))
    res = load(cli, trace, other, "--db", db)
    assert [t["status"] for t in res["traces"]] == ["loaded", "loaded"]
    with duckdb.connect(str(db), read_only=True) as con:
        sessions = con.execute("SELECT session, count(*) FROM requests GROUP BY 1 ORDER BY 1").fetchall()
        assert sessions == [("fix-login-bug", 4), ("other-task", 6)]
        # The costliest cause, joined across tables.
        worst = con.execute("SELECT d.kind, d.seconds_past, r.request_id FROM diagnoses d JOIN requests r "
                            "USING (trace_id, request_id) WHERE r.session = 'other-task' AND d.kind = "
                            "'ttl_expired'").fetchall()
        assert worst == [("ttl_expired", 120.0, "o_4")]
        # Blocks: prefix order, cumulative positions, hex hashes, the breakpoint TTLs of that request.
        blocks = con.execute("SELECT block_index, start_token, tokens, content_hash, breakpoint_ttl, path FROM "
                             "blocks WHERE request_id = 'req_2' ORDER BY block_index").fetchall()
        assert [b[0] for b in blocks] == list(range(len(blocks)))
        assert all(b[1] == sum(x[2] for x in blocks[:i]) for i, b in enumerate(blocks))
        assert all(len(b[3]) == 32 and int(b[3], 16) >= 0 for b in blocks)
        assert {b[4] for b in blocks if b[4]} == {"5m"} and blocks[0][5] == "tools[0]"
        total = con.execute("SELECT sum(input_tokens) FROM requests r JOIN traces t USING (trace_id) "
                            "WHERE t.path LIKE '%other.jsonl'").fetchone()[0]
        assert total == 24525  # matches `kvprobe report` on the same file
        fix = con.execute("SELECT kind, requests FROM fixes f JOIN traces t USING (trace_id) WHERE "
                          "t.path LIKE '%other.jsonl' ORDER BY fix_index LIMIT 1").fetchone()
        assert fix == ("keep_alive", ["o_4"])


def test_schema_is_documented_and_matches_the_database(cli, trace, tmp_path):
    db = tmp_path / "k.duckdb"
    load(cli, trace, "--db", db)
    described = json.loads(cli("db", "schema", "--json").stdout)
    assert [t["table"] for t in described] == ["traces", "requests", "sessions", "blocks", "block_costs",
                                               "diagnoses", "fixes"]
    with duckdb.connect(str(db), read_only=True) as con:
        for t in described:
            actual = con.execute("SELECT column_name, data_type, comment FROM duckdb_columns() WHERE "
                                 "table_name = ? ORDER BY column_index", [t["table"]]).fetchall()
            assert [(c["name"], c["type"].replace("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE"), c["doc"])
                    for c in t["columns"]] == actual
            assert all(c["doc"] for c in t["columns"])
    res = cli("db", "schema")
    assert res.exit_code == 0 and "cache_read_tokens" in res.output and "breakpoint_ttl" in res.output
    assert "CREATE TABLE IF NOT EXISTS blocks" in cli("db", "schema", "--sql").output


def test_sql_prints_a_table_or_json_and_is_read_only(cli, trace, tmp_path):
    db = tmp_path / "k.duckdb"
    load(cli, trace, "--db", db)
    q = "SELECT request_id, miss_kind, cost_usd FROM requests ORDER BY seq"
    res = cli("sql", q, "--db", db)
    assert res.exit_code == 0 and "req_3" in res.output and "prefix_changed" in res.output
    assert "4 row(s)" in res.output
    rows = json.loads(cli("sql", q, "--db", db, "--json").stdout)
    assert [r["request_id"] for r in rows] == ["req_1", "req_2", "req_3", "req_4"]
    assert rows[0]["miss_kind"] is None and rows[3]["miss_kind"] == "ttl_expired"
    assert "showing 2" in cli("sql", q, "--db", db, "--max-rows", "2").output
    direct = json.loads(cli("sql", "SELECT count(*) AS n FROM requests", "--trace", SAMPLE, "--json").stdout)
    assert direct == [{"n": 6}]

    for bad, words in (("SELEC 1", "syntax error"), ("DELETE FROM requests", "read-only")):
        res = cli("sql", bad, "--db", db)
        assert res.exit_code == 2 and words in res.output and "Traceback" not in res.output
    assert counts(db)["requests"] == 4
    res = cli("sql", "SELECT 1", "--db", tmp_path / "nope.duckdb")
    assert res.exit_code == 2 and "kvprobe db load" in res.output and not (tmp_path / "nope.duckdb").exists()


def test_bad_trace_exits_2_and_leaves_the_database_alone(cli, trace, tmp_path):
    db = tmp_path / "k.duckdb"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(LINES[1] + '{"id": "x", "request": {"model": "claude-sonnet-4-5", "messages": "hi"}}\n')
    res = cli("db", "load", bad, "--db", db)
    assert res.exit_code == 2 and "bad.jsonl:2" in res.output and "request.messages" in res.output
    assert not db.exists()
    load(cli, trace, "--db", db)
    before = counts(db)
    res = cli("db", "load", trace, bad, "--db", db, "--force")  # one bad file: nothing of either is written
    assert res.exit_code == 2 and counts(db) == before
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    res = cli("db", "load", empty, "--db", db)
    assert res.exit_code == 2 and "empty.jsonl" in res.output and "no records" in res.output


def test_load_to_pandas_has_the_schema_columns(trace, tmp_path):
    import pandas as pd

    import kvprobe

    data = kvprobe.load(trace)
    df = data.to_pandas()
    assert list(df.columns) == next(t.names for t in TABLES if t.name == "requests")
    assert len(df) == len(data) == 4 and df["request_id"].tolist() == ["req_1", "req_2", "req_3", "req_4"]
    assert str(df["started_at"].dtype) == "datetime64[us, UTC]"
    assert df["started_at"].iloc[0] == pd.Timestamp("2025-09-10T10:07:55Z")
    assert df["cache_read_tokens"].sum() == 3265 and df["missed_read_tokens"].dtype == "Int64"
    assert df.set_index("request_id").loc["req_4", "miss_kind"] == "ttl_expired"
    assert set(data.diagnoses()["kind"]) == {"prefix_changed", "ttl_expired"}
    assert len(data.blocks()) > 40 and list(data.fixes().columns)[:3] == ["trace_id", "fix_index", "kind"]

    db = tmp_path / "k.duckdb"
    from kvprobe.db import load_traces
    load_traces(db, [trace])
    from_db = kvprobe.load(db).to_pandas()
    pd.testing.assert_frame_equal(from_db.drop(columns=["trace_id"]), df.drop(columns=["trace_id"]),
                                  check_exact=False)


def test_import_kvprobe_does_not_import_pandas_or_duckdb():
    code = "import sys, kvprobe; kvprobe.__version__; print('pandas' in sys.modules, 'duckdb' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_a_different_trace_that_starts_alike_never_replaces_another(cli, trace, tmp_path):
    """Identity is not the first line alone: other.jsonl shares a.jsonl's first record and nothing else."""
    db = tmp_path / "k.duckdb"
    other = tmp_path / "other.jsonl"
    other.write_text(LINES[0] + LINES[5])  # 2 requests; `trace` holds the first 4
    first = load(cli, trace, "--db", db)["traces"][0]
    second = load(cli, other, "--db", db)["traces"][0]
    assert second["status"] == "loaded" and second["trace_id"] != first["trace_id"]
    assert counts(db)["requests"] == 4 + 2 and counts(db)["traces"] == 2
    again = load(cli, trace, other, "--db", db)["traces"]  # both again, in one call: both unchanged
    assert [t["status"] for t in again] == ["unchanged", "unchanged"]
    assert [t["trace_id"] for t in again] == [first["trace_id"], second["trace_id"]]
    fresh = tmp_path / "fresh.duckdb"  # the one-call path agrees: two files, two traces
    both = load(cli, trace, other, "--db", fresh)["traces"]
    assert [t["status"] for t in both] == ["loaded", "loaded"] and counts(fresh)["requests"] == 6


def test_a_trace_that_moved_and_grew_keeps_its_identity(cli, trace, tmp_path):
    db = tmp_path / "k.duckdb"
    first = load(cli, trace, "--db", db)["traces"][0]
    moved = tmp_path / "archive.jsonl"
    moved.write_text(trace.read_text() + "".join(LINES[4:]))
    trace.unlink()
    again = load(cli, moved, "--db", db)["traces"][0]
    assert again["status"] == "replaced" and again["trace_id"] == first["trace_id"]
    assert counts(db)["requests"] == 6 and counts(db)["traces"] == 1


def test_the_database_may_not_be_one_of_the_traces(cli, trace, tmp_path):
    res = cli("db", "load", trace, "-o", trace)
    assert res.exit_code == 2 and "is also an input" in res.output
    assert trace.read_text() == "".join(LINES[:4])


def test_a_folder_of_agent_logs_is_one_trace_deduplicated_as_usage_reads_it(cli, tmp_path):
    """A subagent call appears in its own transcript and in its parent's progress line: loaded as a folder it
    is one row (the files loaded one by one would store it twice)."""
    project = tmp_path / "projects" / "-home-me-app"
    main = ClaudeTranscript("s1")
    main.turn(0, "r1", read=0, write=5_000)
    sub = ClaudeTranscript("s1")
    sub.turn(5, "sub1", read=0, write=3_000)
    call = dict(sub.lines[-1])
    main.lines.append({"type": "progress", "sessionId": "s1", "uuid": "p1", "timestamp": call["timestamp"],
                       "data": {"type": "agent_progress", "agentId": "a1", "message": call}})
    main.turn(20, "r2", read=5_000, write=300)
    main.write(project / "s1.jsonl")
    sub.write(project / "s1" / "subagents" / "agent-a1.jsonl")
    db = tmp_path / "k.duckdb"
    [result] = load(cli, project, "--db", db, "--no-fixes")["traces"]
    assert (result["status"], result["requests"]) == ("loaded", 3)  # r1, sub1, r2: sub1 once
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(DISTINCT request_id), count(*) FROM requests").fetchone() == (3, 3)
    again = load(cli, project, "--db", db, "--no-fixes")["traces"]
    assert again[0]["status"] == "unchanged"
