"""The smaller defects of the second reliability pass, each as a user met it."""
from __future__ import annotations

import json
import os

import pytest

from conftest import ROOT

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
FIRST = json.loads(SAMPLE.read_text().splitlines()[0])


def test_usage_until_the_last_day_there_is(cli):
    res = cli("usage", SAMPLE, "--until", "9999-12-31", "--json")  # was OverflowError (a traceback)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["totals"]["requests"] == 6


@pytest.mark.parametrize(("window", "named"), [
    (["--since", "2030-01-01"], "field '--since': none of the 6 requests read is in --since 2030-01-01"),
    (["--since", "2020-01-01", "--until", "2021-01-01"],
     "none of the 6 requests read is in --since 2020-01-01 and --until 2021-01-01"),
])
def test_an_empty_usage_window_is_exit_2_as_in_report(cli, window, named):
    res = cli("usage", SAMPLE, *window)  # was an empty table and exit 0
    assert res.exit_code == 2 and named in " ".join(res.output.split())
    assert cli("report", SAMPLE, "--since", "2030-01-01").exit_code == 2


def test_lint_on_a_body_whose_model_is_a_number(cli, tmp_path):
    body = tmp_path / "body.json"
    body.write_text(json.dumps({**FIRST["request"], "model": 5}))
    res = cli("lint", body)  # was a TypeError traceback
    assert res.exit_code == 2 and "body.json field 'model': expected the model name as a string, got int" in \
        " ".join(res.output.split())


@pytest.mark.parametrize(("version", "newer"), [(99, True), (0, False), ("1", False)])
def test_a_trace_format_this_kvprobe_does_not_read_is_refused(cli, tmp_path, version, newer):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({**FIRST, "kvprobe": version}) + "\n")
    res = cli("report", trace)  # 99 was read as format 1, silently
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "t.jsonl:1 field 'kvprobe': trace format" in text
    assert ("a newer kvprobe wrote it" in text) == newer


def test_a_truncated_har_names_the_line(cli, tmp_path):
    source = ROOT / "tests" / "fixtures" / "importers" / "har" / "session.har"
    har = tmp_path / "cut.har"
    lines = source.read_text().splitlines(keepends=True)
    har.write_text("".join(lines[:15]))
    res = cli("import", har, "-o", tmp_path / "t.jsonl")  # was "not a recognised trace or log", no line
    assert res.exit_code == 2 and "cut.har:15: not valid HAR JSON (cut short?" in res.output
    folder = tmp_path / "logs"
    folder.mkdir()
    har.rename(folder / "cut.har")
    data = json.loads(cli("usage", folder, source, "--json").stdout)  # in a folder: a counted skip, with the line
    assert data["import"]["skipped_reasons"]["HAR file is not valid JSON (cut short?)"] == 1
    assert any(e.endswith("cut.har:15: HAR file is not valid JSON (cut short?)")
               for s in data["import"]["sources"] for e in s["examples"])


def test_a_read_only_output_folder_is_said_before_any_work(cli, tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(locked)
                        else real_access(p, mode, **kw))  # (root may write anywhere: the denial is faked)
    calls = []
    monkeypatch.setattr("kvprobe.cli.fix_cmd.evaluate", lambda *a, **k: calls.append(a))
    res = cli("fix", SAMPLE, "-o", locked / "f.jsonl")
    assert res.exit_code == 2 and calls == []
    assert f"f.jsonl field '--output': cannot write in its folder ({locked}): permission denied" in \
        " ".join(res.output.split())


def test_a_failed_temp_file_names_the_target_not_the_temp_file(tmp_path, monkeypatch):
    from kvprobe.errors import InputError
    from kvprobe.output import write_bytes_atomic

    real_open = os.open

    def refuse_temp(path, flags, *args):
        if ".kvprobe-" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)
    monkeypatch.setattr(os, "open", refuse_temp)
    with pytest.raises(InputError) as err:
        write_bytes_atomic(tmp_path / "out.json", b"{}")
    assert str(err.value) == f"{tmp_path / 'out.json'} field '--output': cannot write it: Permission denied"


@pytest.mark.parametrize("query", ["COPY (SELECT 1 AS x) TO '{out}'", "EXPORT DATABASE '{out}'",
                                   "SELECT * FROM read_csv('{src}')"])
def test_sql_is_read_only_for_files_too(cli, tmp_path, query):
    out = tmp_path / "copied.csv"
    src = tmp_path / "secret.csv"
    src.write_text("a\n1\n")
    res = cli("sql", query.format(out=out, src=src), "--trace", SAMPLE)  # COPY ... TO wrote the file
    assert res.exit_code == 2 and "disabled" in res.output
    assert not out.exists()
