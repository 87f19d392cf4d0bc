"""One `kvprobe ...` process run through the installed entry point's `main()`, saying after its output which of
the watched modules it imported: what the fast paths' tests (test_usage_fast, test_report_fast) check, that a
command line was answered before Typer or rich loaded."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

# runs main() and writes, as stderr's last line, its exit code and which of the modules named in argv[1] it
# imported (sorted)
_RUN = ("import sys; from kvprobe.cli import main\n"
        "watched = sys.argv[1].split(',')\n"
        "sys.argv = ['kvprobe', *sys.argv[2:]]\n"
        "try:\n    main()\nexcept SystemExit as done:\n    code = done.code\nelse:\n    code = 0\n"
        "sys.stdout.flush()\n"
        "sys.stderr.write(f'\\n{code} {sorted(m for m in watched if m in sys.modules)}\\n')")


def run_kvprobe(tmp_path: Path, watched: tuple[str, ...], *args: object, **environ: str
                ) -> tuple[int, str, str, str]:
    """(exit code, stdout, stderr without the last line, the watched modules it loaded) of one process, with its
    own cache folder and 200 columns; `environ` adds or, given as None, removes variables."""
    env = {**os.environ, "KVPROBE_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"}
    for name, value in environ.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    res = subprocess.run([sys.executable, "-c", _RUN, ",".join(watched), *map(str, args)], capture_output=True,
                         text=True, timeout=300, cwd=ROOT, env=env)
    *said, last = res.stderr.rstrip("\n").split("\n")
    code, loaded = last.split(" ", 1)
    return int(code), res.stdout, "\n".join(said), loaded


def fast_json_is_the_full_commands(cli, tmp_path: Path, watched: tuple[str, ...], command: str, *args: object,
                                   **environ: str | None) -> str:
    """`kvprobe COMMAND ARGS --json` answered in its own process without loading any of `watched` (a fast path)
    prints what the full command (Typer's, run in this process by the `cli` fixture) prints; returns it."""
    full = cli(command, *args, "--json")
    assert full.exit_code == 0, full.output
    code, out, said, loaded = run_kvprobe(tmp_path, watched, command, *args, "--json", **environ)
    assert (code, said, loaded) == (0, "", "[]")
    assert out == full.output
    return out
