"""The provider rules are kept parsed between runs (kvprobe.toml_cache, in the user's cache folder); the TOML
files stay the source of truth: an edit is seen by the next run, and a cache that is damaged or cannot be
written changes nothing but the time."""
from __future__ import annotations

import json
import marshal
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
    assert len(list(cache.glob("toml-*.marshal"))) == 1  # the parsed rules, kept
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
    (kept,) = cache.glob("toml-*.marshal")
    kept.write_bytes(b"\x00 not marshal data")
    assert _predicted(rules, cache) == WRITTEN
    assert kept.read_bytes() != b"\x00 not marshal data"


def test_a_cache_folder_that_cannot_be_made_changes_nothing(tmp_path):
    rules, blocker = _rules(tmp_path), tmp_path / "a file"
    blocker.write_text("not a folder")
    assert _predicted(rules, blocker / "cache") == WRITTEN
    assert blocker.read_text() == "not a folder"


def test_two_readers_of_one_folder_keep_each_other_s_files_parsed(tmp_path, monkeypatch):
    """The provider rules (catalog) and the credential shapes and price overlay (secrets, price_overlay) are read
    from one folder by different readers, each naming only its own files: a reader's write keeps the others'
    entries (each run would otherwise parse again what the other reader had kept), and drops a deleted file's."""
    from kvprobe import toml_cache

    monkeypatch.setenv("KVPROBE_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "providers"
    folder.mkdir()
    for name, value in (("a.toml", 1), ("b.toml", 2), ("c.toml", 3)):
        (folder / name).write_text(f"value = {value}\n", encoding="utf-8")
    parsed: list[str] = []

    def parse(path):
        parsed.append(path.name)
        return toml_cache.parse(path)

    assert toml_cache.read_all([folder / "a.toml", folder / "c.toml"], parse) == [{"value": 1}, {"value": 3}]
    assert toml_cache.read_all([folder / "b.toml"], parse) == [{"value": 2}]
    assert parsed == ["a.toml", "c.toml", "b.toml"]
    (folder / "c.toml").unlink()
    (folder / "b.toml").write_text("value = 20\n", encoding="utf-8")  # the other reader's file, edited
    assert toml_cache.read_all([folder / "a.toml"], parse) == [{"value": 1}]  # kept: parsed by nobody
    assert toml_cache.read_all([folder / "b.toml"], parse) == [{"value": 20}]  # stale: parsed again, written
    assert parsed == ["a.toml", "c.toml", "b.toml", "b.toml"]
    assert toml_cache.read_all([folder / "a.toml"], parse) == [{"value": 1}]  # still kept after that write
    assert parsed == ["a.toml", "c.toml", "b.toml", "b.toml"]
    (cache_file,) = (tmp_path / "cache").glob("toml-*.marshal")
    assert sorted(marshal.loads(cache_file.read_bytes())[2]) == ["a.toml", "b.toml"]  # c.toml's entry dropped
