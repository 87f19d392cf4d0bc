"""The provider rules are kept parsed between runs (kvprobe.toml_cache, in the user's cache folder); the TOML
files stay the source of truth: an edit is seen by the next run, and a cache that is damaged or cannot be
written changes nothing but the time."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from conftest import ROOT

A, B = ROOT / "examples" / "request_a.json", ROOT / "examples" / "request_b.json"
# the example pair (claude-sonnet-4-5): B's 3,348 tokens are written whole at the family's 1,024-token minimum
MINIMUM = 'match = ["claude-sonnet-4-5"]\nmin_cacheable_tokens = { value = 1024,'
WRITTEN = {"cache_read_tokens": 0, "cache_write_tokens": 3348, "fresh_input_tokens": 0}
# at 4,096 (an edit of the same size: only the file's times and contents say it changed) nothing is cacheable
RAISED = MINIMUM.replace("1024", "4096")
NOT_WRITTEN = {"cache_read_tokens": 0, "cache_write_tokens": 0, "fresh_input_tokens": 3348}


def _predicted(rules, cache):
    env = {**os.environ, "KVPROBE_PROVIDERS_DIR": str(rules), "KVPROBE_CACHE_DIR": str(cache)}
    res = subprocess.run([sys.executable, "-m", "kvprobe", "diff", str(A), str(B), "--json"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    return {k: v for k, v in json.loads(res.stdout)["predicted"].items() if k in WRITTEN}


def _rules(tmp_path):
    rules = tmp_path / "providers"
    shutil.copytree(ROOT / "providers", rules)
    assert MINIMUM in (rules / "anthropic.toml").read_text(encoding="utf-8")
    return rules


def test_an_edited_rule_file_is_read_by_the_next_run(tmp_path):
    rules, cache = _rules(tmp_path), tmp_path / "cache"
    assert _predicted(rules, cache) == WRITTEN
    assert len(list(cache.glob("*.marshal"))) == 1  # the parsed rules, kept
    assert _predicted(rules, cache) == WRITTEN  # read from the cache
    anthropic = rules / "anthropic.toml"
    text = anthropic.read_text(encoding="utf-8")
    anthropic.write_text(text.replace(MINIMUM, RAISED), encoding="utf-8")
    assert anthropic.stat().st_size == len(text.encode())
    assert _predicted(rules, cache) == NOT_WRITTEN
    anthropic.write_text(text, encoding="utf-8")
    assert _predicted(rules, cache) == WRITTEN


def test_a_damaged_cache_is_parsed_again_and_replaced(tmp_path):
    rules, cache = _rules(tmp_path), tmp_path / "cache"
    assert _predicted(rules, cache) == WRITTEN
    (kept,) = cache.glob("*.marshal")
    kept.write_bytes(b"\x00 not marshal data")
    assert _predicted(rules, cache) == WRITTEN
    assert kept.read_bytes() != b"\x00 not marshal data"


def test_a_cache_folder_that_cannot_be_made_changes_nothing(tmp_path):
    rules, blocker = _rules(tmp_path), tmp_path / "a file"
    blocker.write_text("not a folder")
    assert _predicted(rules, blocker / "cache") == WRITTEN
    assert blocker.read_text() == "not a folder"
