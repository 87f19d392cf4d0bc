"""What the commands users type most load before they answer: `diff` of two requests and `usage` of a small
folder start in about a tenth of a second because they import nothing they do not use (issue #41: `diff`
went from 0.37 to ~0.12 s once the tokenizer stayed unloaded). A heavy dependency that creeps onto their
import path (a tokenizer, a database, an HTTP or server stack, a process pool) shows here as a failure, not
only as a slower benchmark."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

EXAMPLES = ROOT / "examples"
CLAUDE = ROOT / "tests" / "fixtures" / "importers" / "claude"
# each of these costs milliseconds to hundreds of them to import or load (quicktok's cl100k map ~0.25 s, rs_bpe's
# ~25 ms)
HEAVY = ("quicktok", "rs_bpe", "sqlite3", "duckdb", "pandas", "numpy", "httpx", "anthropic", "openai", "starlette",
         "uvicorn", "multiprocessing", "asyncio")

_RUN = ("import sys; from kvprobe.cli import main\n"
        "sys.argv = ['kvprobe', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit as done:\n    code = done.code\nelse:\n    code = 0\n"
        f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))")


@pytest.mark.parametrize("args", [
    ("diff", EXAMPLES / "request_a.json", EXAMPLES / "request_b.json"),
    ("diff", EXAMPLES / "request_a.json", EXAMPLES / "request_b.json", "--json"),
    ("usage", CLAUDE, "--json"),
    ("usage", CLAUDE),
], ids=["diff", "diff --json", "usage --json", "usage"])
def test_the_commands_typed_most_import_no_heavy_dependency(args, tmp_path):
    """Measured on the second run: the first one writes the price cache (kvprobe.pricing), as a user's first
    run does, and that reads the genai-prices package (asyncio with it)."""
    env = {**os.environ, "KVPROBE_CACHE_DIR": str(tmp_path)}
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", _RUN, *map(str, args)], capture_output=True, text=True,
                             timeout=120, cwd=ROOT, env=env)
        assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "0 []"


def test_diff_of_two_request_bodies_loads_no_importer_and_not_typing(tmp_path):
    """A request body could be an agent log, so `diff` asks, from a table of tests that imports no importer
    (importers.formats): loading them all to ask was ~3 ms of diff's ~45. typing, never needed at run time
    (annotations are strings), was ~2 ms: together what kept diff behind cachelint (issue #41)."""
    code = ("import sys, io, contextlib; from kvprobe.cli import main\n"
            "sys.argv = ['kvprobe', 'diff', *sys.argv[1:]]\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('typing', 'kvprobe.importers.loading', 'kvprobe.importers.claude_code')"
            " if m in sys.modules))")
    env = {**os.environ, "KVPROBE_CACHE_DIR": str(tmp_path)}
    for _ in range(2):  # the second run: the first parses the provider rules (tomllib imports typing) and keeps them
        res = subprocess.run([sys.executable, "-c", code, str(EXAMPLES / "request_a.json"),
                              str(EXAMPLES / "request_b.json")], capture_output=True, text=True, timeout=120,
                             cwd=ROOT, env=env)
        assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("folder", [CLAUDE, ROOT / "tests" / "fixtures" / "importers" / "codex"], ids=["claude", "codex"])
def test_usage_json_of_a_folder_imports_neither_typing_nor_tomllib(tmp_path, folder):
    """`usage --json` reads its price overlay and credential shapes through the kept-parsed TOML cache
    (kvprobe.toml_cache) and names types only in annotations: tomllib, and typing behind it, were ~7 ms of its
    ~70 ms start, parsed again on every run. The first run parses and keeps them; the second imports neither."""
    code = ("import sys, io, contextlib; from kvprobe.cli import main\n"
            "sys.argv = ['kvprobe', 'usage', sys.argv[1], '--json']\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('typing', 'tomllib') if m in sys.modules))")
    env = {**os.environ, "KVPROBE_CACHE_DIR": str(tmp_path)}
    seen = []
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=120,
                             cwd=ROOT, env=env)
        assert res.returncode == 0, res.stderr
        seen.append(res.stdout.strip().splitlines()[-1])
    assert seen == ["['tomllib', 'typing']", "[]"]
