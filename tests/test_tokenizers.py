"""The two tokenizers counts are made with (kvprobe.tokenizers) count the same tokens, and a process loads the one
its input calls for: rs_bpe (loads in ~25 ms) below `LARGE_INPUT_BYTES`, quicktok (counts ~4x faster) from there.

The texts are the ones tests/test_tokentable.py holds the shipped tables to (prose, code, contractions, every
kind of white space, other scripts' numbers, emoji, CJK, combining marks, each character class's edges, seeded
random mixes), long runs that stress the merge, and every string of the repository's own traces and examples.
"""
from __future__ import annotations

import json
import subprocess
import sys

import orjson
import pytest
import quicktok

from conftest import ROOT
from test_tokentable import TEXTS, _class_edges, _random_texts

rs_bpe_openai = pytest.importorskip("rs_bpe.bpe").openai

ENCODINGS = ("cl100k_base", "o200k_base")
LONG = ["a" * 20_000, " " * 20_000, "\n" * 5_000 + "x", "1234567890" * 2_000, "日本語" * 3_000,
        "\U0001f680\u200d" * 2_000, "ab" * 10_000 + "=" * 5_000, "\r\n \t" * 3_000]


def _strings(value: object, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out)


def _repository_strings() -> list[str]:
    out: list[str] = []
    for path in sorted([*(ROOT / "traces").glob("*.jsonl"), *(ROOT / "examples").rglob("*.jsonl")]):
        for line in path.read_bytes().splitlines():
            try:
                _strings(orjson.loads(line), out)
            except orjson.JSONDecodeError:  # the examples of malformed input
                continue
    return list(dict.fromkeys(out))


def _contexts(cp: int) -> list[str]:
    c = chr(cp)
    return [f"{c}'s", f"a{c}b", f" {c}{c}1", f"'{c}", f"A{c}a", f"1{c}2", f"{c} x", f"x{c}\n", f"\t{c}A", c * 40]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_characters_unicode_17_added_are_counted_as_quicktok_counts_them(encoding):
    """rs_bpe does not take them for letters (the example: U+088F, 5 tokens before 's where quicktok counts 4);
    the fast-loading tokenizer hands a text holding one to quicktok, every other text to rs_bpe."""
    from kvprobe.tokenizers import UNICODE_17_RANGES, _fast_load

    raw, fast, reference = getattr(rs_bpe_openai, encoding)(), _fast_load(encoding), quicktok.get_encoding(encoding)
    assert raw.count("\u088f's") == 5 and reference.count("\u088f's") == 4
    # code points Unicode 17.0 added, the first and last of each run (written here, not read from the module)
    added = [0x088F, 0x0C5C, 0x0CDC, 0x1ACF, 0x1AEB, 0xA7CE, 0xA7D2, 0xA7D4, 0xA7F1, 0x10940, 0x10959, 0x10EC5,
             0x10EFA, 0x11B60, 0x11B67, 0x11DB0, 0x11DE9, 0x16EA0, 0x16ED3, 0x16FF2, 0x187F8, 0x18D09, 0x18D80,
             0x18DF2, 0x1E6C0, 0x1E6FF, 0x2B73A, 0x2CEA2, 0x2CEAD, 0x323B0, 0x33479]
    texts = [t for cp in added for t in _contexts(cp)]
    texts += [t for a, b in UNICODE_17_RANGES for cp in range(a, b + 1) for t in _contexts(cp)]
    texts += [f"long English text, then {chr(0x323B0)} once at its end" * 50, "ASCII only's", "é's naïve"]
    assert [fast.count(t) for t in texts] == [reference.count(t) for t in texts]


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_rs_bpe_differs_from_quicktok_only_on_the_listed_characters(encoding):
    """Every code point, in contexts that tell a letter, a number, white space and a case apart (~20 s each)."""
    from kvprobe.tokenizers import UNICODE_17_RANGES

    raw, reference = getattr(rs_bpe_openai, encoding)(), quicktok.get_encoding(encoding)
    listed = {cp for a, b in UNICODE_17_RANGES for cp in range(a, b + 1)}
    differing = {cp for cp in range(0x80, 0x110000) if not 0xD800 <= cp <= 0xDFFF
                 and any(raw.count(t) != reference.count(t) for t in _contexts(cp)[:9])}
    assert differing <= listed and len(differing) > 4_000


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_rs_bpe_counts_what_quicktok_counts(encoding):
    texts = [*TEXTS, *LONG, *_class_edges(encoding), *_random_texts(3_000), *_repository_strings()]
    assert len(texts) > 4_000
    fast, reference = getattr(rs_bpe_openai, encoding)(), quicktok.get_encoding(encoding)
    differing = [(t[:60], fast.count(t), reference.count(t)) for t in texts if fast.count(t) != reference.count(t)]
    assert differing == []


def test_a_few_counts_known_by_hand():
    cl100k, o200k = rs_bpe_openai.cl100k_base(), rs_bpe_openai.o200k_base()
    # cl100k_base: "hello" " world" | "don" "'t" | "123" "456" "7" | "<" "|" "endo" "ft" "ext" "|" ">" (the special
    # token's spelling as ordinary text: "<|" is one piece of the split and no token, so two)
    assert [cl100k.count(t) for t in ("hello world", "don't", "1234567", "<|endoftext|>")] == [2, 2, 3, 7]
    assert o200k.count("hello world") == 2


def _loaded_in_a_process(code: str, env: dict[str, str] | None = None) -> dict:
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", **(env or {})})
    return json.loads(run.stdout)


_WHICH = ("import json, sys; from kvprobe import tokenizers as t; {setup}; found = t.load('{encoding}'); "
          "print(json.dumps({{'module': type(found).__module__, 'quicktok': 'quicktok' in sys.modules, "
          "'count': found.count('hello world')}}))")


@pytest.mark.parametrize(("setup", "env", "module", "quicktok_loaded"), [
    ("pass", None, "kvprobe.tokenizers", False),  # nothing said: a small input
    ("t.expect_input(t.LARGE_INPUT_BYTES - 1)", None, "kvprobe.tokenizers", False),
    ("t.expect_input(t.LARGE_INPUT_BYTES)", None, "quicktok._quicktok", True),
    ("t.expect_input(t.LARGE_INPUT_BYTES)", {"KVPROBE_TOKENIZER": "rs_bpe"}, "kvprobe.tokenizers", False),
    ("pass", {"KVPROBE_TOKENIZER": "quicktok"}, "quicktok._quicktok", True),
])
def test_the_input_size_picks_the_tokenizer(setup, env, module, quicktok_loaded):
    """rs_bpe's tokenizer comes wrapped (`tokenizers._FastLoaded`); quicktok's is its extension's class."""
    got = _loaded_in_a_process(_WHICH.format(setup=setup, encoding="cl100k_base"), env)
    assert got == {"module": module, "quicktok": quicktok_loaded, "count": 2}


def test_an_encoding_rs_bpe_lacks_is_quicktoks():
    got = _loaded_in_a_process(_WHICH.format(setup="pass", encoding="llama3"))
    assert got["module"] == "quicktok._quicktok" and got["quicktok"]


def _review_session() -> list[dict]:
    """OpenAI records (counted exactly with o200k_base) after Claude ones (estimated on cl100k_base), each with a
    new diff to review: ~350,000 characters of new text, past the shipped tables' budgets."""
    out, history = [], [{"role": "system", "content": "You review pull requests for a payments service. " * 80}]
    for turn in range(5):
        diff = "".join(f"+    ledger_{turn}_{line} = settle(account_{line}, amount={line * 7})  # {turn}\n"
                       for line in range(1200))
        history = history + [{"role": "user", "content": f"Review change {turn}:\n{diff}"}]
        out.append({"id": f"o{turn}", "session": "review", "provider": "openai",
                    "started_at": f"2026-11-02T11:{turn:02d}:00Z", "request": {"model": "gpt-4o", "messages": history},
                    "response": {"usage": {"prompt_tokens": 900 + 20 * turn, "completion_tokens": 30,
                                           "prompt_tokens_details": {"cached_tokens": 896 if turn else 0}}}})
        history = history + [{"role": "assistant", "content": f"Change {turn} looks right."}]
    return out


_REPORT = ("import json, sys\nfrom kvprobe.cli import main\ntry:\n    main()\nfinally:\n"
           "    print(json.dumps(sorted(m for m in ('quicktok', 'rs_bpe') if m in sys.modules)), file=sys.stderr)")


@pytest.mark.parametrize("split", ["1", "1000000000"])  # counted by the helper / in this process
def test_a_report_is_the_same_whichever_tokenizer_counts(tmp_path, split):
    from test_split_parse import _records, _write

    trace = _write(tmp_path / "t.jsonl", _records(turns=4) + _review_session())
    outputs = {}
    for tokenizer in ("quicktok", "rs_bpe"):
        run = subprocess.run([sys.executable, "-c", _REPORT, "report", str(trace), "--what-if", "--json"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT,
                             env={"PATH": "/usr/bin:/bin", "KVPROBE_TOKENIZER": tokenizer,
                                  "KVPROBE_SPLIT_MIN_BYTES": split})
        assert run.returncode == 0, run.stderr
        if split != "1":  # counted here: past the tables' budgets, the tokenizer asked for was loaded
            assert json.loads(run.stderr.strip().splitlines()[-1]) == [tokenizer]
        outputs[tokenizer] = run.stdout
    assert outputs["rs_bpe"] == outputs["quicktok"]
    report = json.loads(outputs["rs_bpe"])
    assert {r["provider"] for r in report["requests"]} == {"anthropic", "openai"}


_REPORT_SIZED = ("import json, sys\nimport kvprobe.tokenizers\n"
                 "kvprobe.tokenizers.LARGE_INPUT_BYTES = int(sys.argv.pop(1))\n" + _REPORT)


@pytest.mark.parametrize(("large_from", "loaded"), [(10**9, ["rs_bpe"]), (1_000, ["quicktok"])])
def test_a_report_picks_its_tokenizer_by_the_traces_size_in_one_process_too(tmp_path, large_from, loaded):
    """Without the parse's helper (one core, or a trace under its size) the report's own process counts: with
    the tokenizer the trace's bytes call for."""
    from test_split_parse import _records, _write

    trace = _write(tmp_path / "t.jsonl", _records(turns=4) + _review_session())
    run = subprocess.run([sys.executable, "-c", _REPORT_SIZED, str(large_from), "report", str(trace), "--json"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "KVPROBE_SPLIT_MIN_BYTES": "1000000000"})
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stderr.strip().splitlines()[-1]) == loaded
