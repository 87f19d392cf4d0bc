"""`kvprobe diff A B` is answered before Typer loads (kvprobe.cli.fastdiff: ~20 ms of a ~0.1 s start-up, issue
#41), printing what the full command prints, byte for byte; any other command line, and any comparison that
fails, is the full command's, which answers as it always has."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

A, B = ROOT / "examples" / "request_a.json", ROOT / "examples" / "request_b.json"
TRACE = ROOT / "traces" / "sample_session.jsonl"
CLAUDE = ROOT / "tests" / "fixtures" / "importers" / "claude" / "projects" / "-home-me-app"

# runs the installed entry point's main() and says, after the output, whether Typer was imported
_RUN = ("import sys; from kvprobe.cli import main\n"
        "sys.argv = ['kvprobe', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit as done:\n    code = done.code\nelse:\n    code = 0\n"
        "sys.stdout.flush()\n"
        "sys.stderr.write(f'\\n{code} {\"typer\" in sys.modules}\\n')")


def _kvprobe(*args):
    """(exit code, stdout, stderr without the last line, whether Typer loaded) of one `kvprobe ...` process."""
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("NO_COLOR", None)
    res = subprocess.run([sys.executable, "-c", _RUN, *map(str, args)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=env)
    *said, last = res.stderr.rstrip("\n").split("\n")
    code, typer_loaded = last.split(" ")
    return int(code), res.stdout, "\n".join(said), typer_loaded == "True"


@pytest.mark.parametrize("args, code", [
    ((A, B), 0),
    ((A, B, "--json"), 0),
    (("--no-content", A, B), 0),
    ((A, B, "--json", "--no-content"), 0),
    ((A, B, "--exit-code"), 1),  # B's system prompt changed at char 29: B cannot reuse A
    ((A, A, "--exit-code"), 0),
    ((f"{TRACE}#req_2", f"{TRACE}#req_3"), 0),
], ids=["text", "json", "no content first", "json without content", "exit code, a change", "exit code, same",
        "two records of a trace"])
def test_diff_loads_no_typer_and_prints_what_the_full_command_prints(args, code, cli):
    full = cli("diff", *args)  # the full command (Typer's), in this process
    assert full.exit_code == code, full.output
    got, out, said, typer_loaded = _kvprobe("diff", *args)
    assert (got, said, typer_loaded) == (code, "", False)
    assert out == full.output
    assert "kvprobe diff" in out or '"first_change"' in out


@pytest.mark.parametrize("args, message", [
    ((A, ROOT / "nowhere.json"), "nowhere.json: file does not exist"),
    ((A, CLAUDE / "1f0c-sess.jsonl"), "logs usage, not request bodies, so there is nothing to diff"),
    ((f"{TRACE}#req_2", f"{TRACE}#no_such"), "no record with id 'no_such'"),
], ids=["missing file", "usage-only log", "unknown record"])
def test_a_diff_that_fails_is_the_full_commands_error(args, message):
    """Exit 2 and one line naming what is wrong, nothing on stdout: the full command's, as before."""
    code, out, said, typer_loaded = _kvprobe("diff", *args)
    assert (code, out, typer_loaded) == (2, "", True)
    assert message in said


@pytest.mark.parametrize("args", [("--help",), (A,), (A, B, A), (A, B, "--jsn")],
                         ids=["help", "one request", "three", "unknown flag"])
def test_other_command_lines_are_typers(args):
    code, out, said, typer_loaded = _kvprobe("diff", *args)
    assert typer_loaded
    assert (code, "--exit-code" in out) == (0, True) if args == ("--help",) else code == 2


def test_the_fast_path_knows_every_flag_diff_has():
    """A flag added to `diff` and not to the fast path would be left to Typer (slow, not wrong); one the fast
    path knows that `diff` lacks would be accepted where Typer refuses it."""
    import typer.main

    from kvprobe.cli import build_app, fastdiff

    command = typer.main.get_command(build_app("diff")).commands["diff"]
    options = {(name, p.is_flag) for p in command.params if p.param_type_name == "option" for name in p.opts}
    options.discard(("--help", True))
    assert options == {(name, True) for name in fastdiff.FLAGS}
