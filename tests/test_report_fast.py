"""`kvprobe report PATH... --json` is answered before Typer, click or rich load (kvprobe.cli.fastreport: ~35 ms of
a small report's ~0.17 s, issue #41), its JSON the full command's byte for byte; anything else on its command
line, and any report that fails, is the full command's, which answers as it always has."""
from __future__ import annotations

import json

import pytest

from cli_process import fast_json_is_the_full_commands, run_kvprobe
from conftest import ROOT

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
CLAUDE = ROOT / "tests" / "fixtures" / "importers" / "claude"


WATCHED = ("typer", "rich", "click", "kvprobe.cli.report_cmd")  # what the fast path must not load


def _kvprobe(tmp_path, *args, **environ):
    """(exit code, stdout, stderr without the last line, modules loaded) of one `kvprobe ...` process, without
    $KVPROBE_CLUSTER unless a test sets it."""
    return run_kvprobe(tmp_path, WATCHED, *args, **{"KVPROBE_CLUSTER": None, **environ})


@pytest.mark.parametrize("args", [
    (SAMPLE,),
    (SAMPLE, "--no-fixes"),
    (SAMPLE, "--what-if", "--predicted"),
    (SAMPLE, CLAUDE),
], ids=["a trace", "no fixes", "what-if, predicted", "a trace and agent logs"])
def test_report_json_loads_neither_typer_nor_rich_and_prints_what_the_full_command_prints(args, cli, tmp_path):
    out = fast_json_is_the_full_commands(cli, tmp_path, WATCHED, "report", *args, KVPROBE_CLUSTER=None)
    assert json.loads(out)["totals"]["requests"] >= 5


@pytest.mark.parametrize("args", [
    (SAMPLE, "--json", "--top", "3"),
    (SAMPLE, "--json", "--session", "nobody"),
    (SAMPLE,),
], ids=["another option", "a filter that matches nothing", "the text report"])
def test_any_other_command_line_is_the_full_commands(args, cli, tmp_path):
    code, out, said, loaded = _kvprobe(tmp_path, "report", *args)
    assert "typer" in loaded
    full = cli("report", *args)
    assert code == full.exit_code
    if code == 0 and "--json" in args:
        assert out == full.output


@pytest.mark.parametrize("name, content, message", [
    ("missing.jsonl", None, "file or directory does not exist"),
    ("empty.jsonl", "", "no requests found"),
    ("bad.jsonl", '{"id": "r1", "request": {"model": 5}}\n', "expected the model name as a string"),
], ids=["a missing file", "an empty file", "a malformed line"])
def test_a_report_that_fails_is_said_by_the_full_command(name, content, message, tmp_path):
    """Exit 2, the full command's message, nothing on stdout: the fast path printed nothing first."""
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    code, out, said, loaded = _kvprobe(tmp_path, "report", path, "--json")
    assert (code, out) == (2, "")
    assert message in said and "typer" in loaded


def test_a_cluster_named_in_the_environment_is_the_full_commands(tmp_path):
    """$KVPROBE_CLUSTER is the full command's --cluster: an address it cannot reach is its usage error (a scheme
    Dask does not know: said at once, where a port nothing listens at is waited on for 10 s)."""
    code, out, said, loaded = _kvprobe(tmp_path, "report", SAMPLE, "--json", KVPROBE_CLUSTER="nope://host:1")
    assert (code, out) == (2, "") and "--cluster" in said and "typer" in loaded


def test_the_fast_flags_are_flags_of_the_full_command():
    """Every flag the fast path takes is a boolean option of `report` (renamed or removed there, this fails)."""
    import typer.main

    from kvprobe.cli import build_app
    from kvprobe.cli.fastreport import FLAGS

    command = typer.main.get_command(build_app("report"))
    report = command.commands["report"]  # type: ignore[attr-defined]
    flags = {opt for p in report.params if getattr(p, "is_flag", False) for opt in p.opts}
    assert set(FLAGS) <= flags
