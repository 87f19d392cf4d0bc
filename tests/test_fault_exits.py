"""Exit codes stay the documented ones when input or output fails (docs/contracts.md §8): 2 for bad input or
I/O, 130 for Ctrl-C, never 1 (for `gate`, 1 means a threshold failed) and never a traceback.

Seen before: a 1000-deep tool input or tool_choice was a RecursionError (exit 1) in report, gate, fix, html,
db load; stdout on /dev/full, or a reader that went away, printed a traceback (exit 1 or 120); Ctrl-C while
kvprobe started printed a traceback.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
REQUEST_A, REQUEST_B = ROOT / "examples" / "request_a.json", ROOT / "examples" / "request_b.json"
LINES = SAMPLE.read_text().splitlines()
DEEP = "[" * 1000 + "1" + "]" * 1000  # orjson reads up to 1024 levels: the deepest input there is
DEEP_OBJECT = '{"a": ' * 1000 + "1" + "}" * 1000


def _deep_trace(tmp_path, where: str):
    record = json.loads(LINES[0])
    if where == "tool_input":
        record["request"]["messages"].append({"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_9", "name": "grep", "input": {"pattern": "@@"}}]})
        value = DEEP
    elif where == "tool_choice":
        record["request"]["tool_choice"] = "@@"
        value = DEEP_OBJECT
    else:  # an unknown key of the record (kept as it is)
        record["task"] = "@@"
        value = DEEP_OBJECT
    path = tmp_path / f"{where}.jsonl"
    path.write_text(json.dumps(record).replace('"@@"', value) + "\n" + LINES[1] + "\n")
    return path


@pytest.mark.parametrize("where", ["tool_input", "tool_choice", "task"])
def test_a_thousand_deep_value_is_never_a_recursion_error(cli, tmp_path, where):
    trace = _deep_trace(tmp_path, where)
    for args in (["report", trace], ["gate", trace, "--min-hit-ratio", "0.1"],
                 ["fix", trace, "-o", tmp_path / "f.jsonl"], ["html", trace, "-o", tmp_path / "r.html"],
                 ["db", "load", trace, "--db", tmp_path / "k.duckdb"], ["lint", trace],
                 ["diff", trace, trace], ["baseline", trace, "-o", tmp_path / "b.json"], ["usage", trace]):
        res = cli(*args)
        assert res.exit_code in (0, 2), (args, res.exit_code, res.output)
        assert not isinstance(res.exception, RecursionError), (args, repr(res.exception))
        if res.exit_code == 2:  # the record cannot be rendered or written: it is named
            assert f"{where}.jsonl:1" in res.output or f"{where}.jsonl#req_1" in res.output, (args, res.output)


def _kvprobe(*args, **kw):
    return subprocess.run([sys.executable, "-m", "kvprobe", *map(str, args)], capture_output=True, text=True,
                          timeout=120, **kw)


@pytest.mark.parametrize("args", [["report", SAMPLE], ["report", SAMPLE, "--json"], ["usage", SAMPLE],
                                  ["gate", SAMPLE, "--min-hit-ratio", "0.9"], ["schema", "trace"], ["--help"],
                                  ["diff", REQUEST_A, REQUEST_B], ["usage", SAMPLE, "--json"]],
                         ids=["report", "report-json", "usage", "gate", "schema", "help", "diff", "usage-json"])
def test_stdout_on_a_full_disk_exits_2_with_one_line(args):
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "kvprobe", *map(str, args)], stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == "error: cannot write the output: No space left on device"


@pytest.mark.parametrize("args", [["usage", SAMPLE], ["usage", SAMPLE, "--json"], ["diff", REQUEST_A, REQUEST_B],
                                  ["--help"], ["report", SAMPLE], ["providers"]],
                         ids=["usage", "usage-json", "diff", "help", "report", "providers"])
def test_stdout_closed_at_start_exits_2_without_a_traceback(args):
    """`kvprobe usage >&-`: Python starts with no stdout at all (None); the first write was an AttributeError
    traceback, exit 1."""
    res = subprocess.run([sys.executable, "-m", "kvprobe", *map(str, args)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, timeout=120,
                         preexec_fn=lambda: os.close(1))
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "error: cannot write the output: Bad file descriptor"
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr


def test_a_command_that_writes_nothing_to_a_closed_stdout_runs(tmp_path):
    out = tmp_path / "t.jsonl"
    res = subprocess.run([sys.executable, "-m", "kvprobe", "import", str(SAMPLE), "-o", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120,
                         preexec_fn=lambda: os.close(1))
    assert res.returncode == 0, res.stderr
    assert len(out.read_text().splitlines()) == len(LINES)


@pytest.mark.parametrize("args", [["diff", REQUEST_A, REQUEST_B, "--json"], ["diff", REQUEST_A, "missing.json"],
                                  ["usage", SAMPLE, "--json"], ["--help"], []],
                         ids=["diff-json", "diff-missing", "usage-json", "help", "bare"])
def test_the_command_ends_with_main_s_output_and_exit_code(args):
    """`kvprobe` (and `python -m kvprobe`) ends the process as soon as a fast path has answered (`cli.entry`):
    the same bytes on stdout and stderr, and the same exit code, as `main()` ending as Python ends it."""
    ended = _kvprobe(*args)
    code = "import sys; from kvprobe.cli import main; sys.argv = ['kvprobe', *sys.argv[1:]]; main()"
    returned = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                              timeout=120)
    assert (ended.returncode, ended.stdout, ended.stderr) == (returned.returncode, returned.stdout, returned.stderr)
    assert ended.stdout or ended.stderr
    if "--json" in args:
        assert json.loads(ended.stdout)


def test_a_reader_that_went_away_is_exit_2_without_a_traceback():
    proc = subprocess.Popen([sys.executable, "-m", "kvprobe", "report", str(SAMPLE)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # like `kvprobe report t.jsonl | head -0`
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2 and b"Traceback" not in stderr and b"Exception ignored" not in stderr, stderr


def test_ctrl_c_while_kvprobe_starts_exits_130_without_a_traceback(monkeypatch, capsys):
    """A KeyboardInterrupt before any command runs (imports, building the CLI)."""
    import kvprobe.cli as cli_module

    def interrupted() -> None:
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_module, "_run", interrupted)
    with pytest.raises(SystemExit) as stop:
        cli_module.main()
    assert stop.value.code == 130 and capsys.readouterr().err == "interrupted\n"


def test_ctrl_c_while_typer_makes_the_command_s_context_says_interrupted(monkeypatch, capsys):
    """Typer turns an interrupt outside the command itself (making its context) into exit 130 and says
    nothing: seen as a report stopped by Ctrl-C with an empty stderr."""
    import kvprobe.cli as cli_module
    from kvprobe.cli.help import KvprobeGroup

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(KvprobeGroup, "make_context", interrupted)
    monkeypatch.setattr(sys, "argv", ["kvprobe", "providers"])
    with pytest.raises(SystemExit) as stop:
        cli_module.main()
    assert stop.value.code == 130 and capsys.readouterr().err == "interrupted\n"


def _wait_for_cpu(proc: subprocess.Popen, seconds: float) -> None:
    """Until the child has run `seconds` of CPU (or ended): on a loaded machine a wall-clock delay can end before
    the interpreter has even started, and a SIGINT there kills it by default (exit -2) whatever kvprobe does."""
    tick = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            return
        if (int(fields[11]) + int(fields[12])) / tick >= seconds:  # utime + stime
            return
        time.sleep(0.02)


@pytest.mark.parametrize("delay", [1.0])
def test_ctrl_c_during_a_report_exits_130_without_a_traceback(delay, tmp_path):
    import json

    lines = SAMPLE.read_text().splitlines()
    trace = tmp_path / "long.jsonl"  # 600 sessions of the sample: the report is still working after the delay
    with trace.open("w") as fh:
        for k in range(600):
            for line in lines:
                rec = json.loads(line)
                rec["id"], rec["session"] = f"s{k}-{rec['id']}", f"s{k}"
                fh.write(json.dumps(rec) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "kvprobe", "report", str(trace)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for_cpu(proc, delay)  # well into the report: kvprobe handles an interrupt from its first import on
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the report finished before the signal")
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr



# Python runs this at its start (PYTHONPATH): the first import of $INTERRUPT_AT raises a KeyboardInterrupt where a
# Ctrl-C can land: in code compiled from a string ("exec": dataclasses and typer make methods so), while a class
# names its attributes ("set_name": Python 3.11 makes it a RuntimeError caused by it), or in a weakref callback
# ("callback": importlib's module locks have one; Python prints it as "Exception ignored" and goes on).
_INTERRUPT_AT_IMPORT = """
import os
import sys
import weakref

def _interrupt(*_):
    raise KeyboardInterrupt

class _Named:
    def __set_name__(self, owner, name):
        _interrupt()

class _Gone:
    pass

_refs = []

class _Hook:
    def find_spec(self, name, path=None, target=None):
        if name != os.environ.get("INTERRUPT_AT"):
            return None
        sys.meta_path.remove(self)
        how = os.environ["INTERRUPT_HOW"]
        if how == "exec":
            exec("raise KeyboardInterrupt", {})
        elif how == "set_name":
            class Made:
                field = _Named()
        else:
            gone = _Gone()
            _refs.append(weakref.ref(gone, _interrupt))
            del gone
        return None

sys.meta_path.insert(0, _Hook())
"""


def _interrupted_at_import(tmp_path, module: str, how: str) -> subprocess.CompletedProcess:
    (tmp_path / "sitecustomize.py").write_text(_INTERRUPT_AT_IMPORT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "INTERRUPT_AT": module,
           "INTERRUPT_HOW": how}
    return subprocess.run([sys.executable, "-m", "kvprobe", "report", str(SAMPLE)], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.mark.parametrize("how", ["exec", "set_name"])
@pytest.mark.parametrize("module", ["kvprobe.cli", "kvprobe.cli.report_cmd", "kvprobe.economics.attribution"])
def test_ctrl_c_inside_a_class_being_made_exits_130(tmp_path, module, how):
    """CI saw a report print "interrupted" and exit -2: CPython marks an interrupt that ends code run from a
    string as unhandled even when a caller catches it, and under `python -m` then ends the process by SIGINT
    whatever exit code was chosen. Also seen: exit 1 and a traceback, the RuntimeError of an interrupt in
    `__set_name__`. At start-up (`python -m kvprobe`'s import), while the command's modules load, and during
    the report."""
    done = _interrupted_at_import(tmp_path, module, how)
    assert (done.returncode, done.stderr.strip()) == (130, "interrupted")


@pytest.mark.parametrize("module", ["kvprobe.cli.report_cmd", "kvprobe.economics.attribution"])
def test_ctrl_c_inside_a_callback_still_stops_the_command(tmp_path, module):
    """Seen: the report ran to its end (exit 0) after "Exception ignored in: <function _get_module_lock...>
    KeyboardInterrupt", a Ctrl-C that landed in importlib's weakref callback."""
    done = _interrupted_at_import(tmp_path, module, "callback")
    assert (done.returncode, done.stderr.strip()) == (130, "interrupted")
