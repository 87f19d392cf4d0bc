"""Permission errors for real, as a user without privileges: root reads and writes everything, so where these
tests run as root (CI here does) kvprobe runs as `nobody` (uid 65534) through util-linux `setpriv`, and as
the current user anywhere else. The files are the user's own, with their permission bits taken away, as a
user would meet them: an input they cannot read, an output folder they cannot write, a log folder one of whose
parts they cannot list.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT

SAMPLE = ROOT / "traces" / "sample_session.jsonl"
NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]


def _prefix() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without util-linux setpriv: no way to drop the privileges")
    return AS_NOBODY


@pytest.fixture
def home():
    """A folder the unprivileged user owns, outside pytest's own (root's, mode 0700, re-made by every run)."""
    made = Path(tempfile.mkdtemp(prefix="kvprobe-unprivileged-"))
    _own(made)
    yield made
    for path in made.rglob("*"):  # what the test locked, unlocked, so the folder can go
        path.chmod(0o700)
    shutil.rmtree(made)


def _own(path: Path) -> Path:
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    return path


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return _own(path)


def folder(path: Path) -> Path:
    path.mkdir()
    return _own(path)


def kvprobe(home: Path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "KVPROBE_CACHE_DIR": str(home / "cache"), "NO_COLOR": "1"}
    done = subprocess.run([*_prefix(), sys.executable, "-m", "kvprobe", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env, cwd=home)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_the_user_really_is_unprivileged(home):
    done = subprocess.run([*_prefix(), sys.executable, "-c", "import os; print(os.geteuid())"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() != "0", done.stderr


def test_an_unreadable_input_file_is_exit_2_naming_it(home):
    trace = write(home / "t.jsonl", SAMPLE.read_text())
    trace.chmod(0)
    res = kvprobe(home, "report", trace)
    assert res.returncode == 2 and str(trace) in res.stderr and "not readable" in res.stderr
    assert kvprobe(home, "usage", trace, "--json").returncode == 2


def test_a_read_only_output_folder_is_exit_2_and_nothing_is_left_in_it(home):
    locked = folder(home / "locked")
    locked.chmod(0o555)
    res = kvprobe(home, "fix", SAMPLE, "-o", locked / "f.jsonl")
    assert res.returncode == 2 and "permission denied" in res.stderr.lower() and ".kvprobe-" not in res.stderr
    assert list(locked.iterdir()) == []


def test_an_unreadable_part_of_a_log_folder_is_counted_and_named(home):
    lines = SAMPLE.read_text().splitlines(keepends=True)
    logs = folder(home / "logs")
    for name, part in (("a", lines[:3]), ("locked", lines[3:]), ("b", lines[3:])):
        write(folder(logs / name) / "t.jsonl", "".join(part))
    (logs / "locked").chmod(0)
    res = kvprobe(home, "usage", logs, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["import"]["skipped_reasons"] == {"folder cannot be read (Permission denied)": 1}
    assert data["totals"]["requests"] == 6  # a's 3 and b's 3
    (logs / "locked").chmod(0o755)
    (logs / "b" / "t.jsonl").chmod(0)
    res = kvprobe(home, "usage", logs, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["import"]["skipped_reasons"] == {"file cannot be read (Permission denied)": 1}
    assert data["totals"]["requests"] == 6  # a's 3 and locked's 3
