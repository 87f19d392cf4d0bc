"""Token counts from the shipped tables (kvprobe.tokentable) are the tokenizer's own, and `diff` of two small
requests gets them without loading the tokenizer.

The reference is quicktok's cl100k_base and o200k_base (byte-identical to tiktoken), an independent
implementation: every text below is counted both ways, with both encodings. The texts are written here: prose and code, contractions (with the
non-ASCII letters that case-insensitive matching pairs with `s`), every kind of white space, numbers in
other scripts, emoji, CJK, combining marks, the first and last code point of each character class the
split pattern uses, and seeded random mixes of them.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import unicodedata

import pytest
import quicktok

from conftest import ROOT
from kvprobe import tokentable

ENCODINGS = ("cl100k_base", "o200k_base")
EXAMPLES = ROOT / "examples"


def reference(encoding: str):
    return quicktok.get_encoding(encoding)

TEXTS = [
    "Hello, world!", "hello world", "The quick brown fox jumps over the lazy dog.",
    "def f(x):\n    return [i**2 for i in range(100)]  # 1+2+3==6\n",
    "don't can't I'll we've they're 'tis 'TWAS 'Ll 'vE 'ſ 'ſs K'd İ'm",
    "   leading\n\ttabs and  spaces   \r\n windows lines \r\n\n\n  \n",
    "1234567890 3.14159 0xDEADBEEF 99.99% ١٢٣٤٥ ⅣⅫ ²³ 一二三",
    "café résumé naïve — Zürich Ω≈ç√∫ Икс हिन्दी 한국어 日本語のトークナイザー",
    "emoji \U0001f680\U0001f525\U0001f44d mixed 👩‍💻 flags 🇫🇷",
    "a\u00a0b\u2003c\u3000d\u0085e\u2028f\u000bg\u000ch\x1cx\x1dy",
    "<|endoftext|> special tokens are text here <|fim_prefix|>",
    "=" * 300 + "\n" + "-" * 80,
    "https://example.com/path?q=1&x=2#frag <html><body>x</body></html>",
    "a\u0301\u0302 e\u0308 combining \u0300\u0301",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 \U00010400\U00010428 \U0002a6d6",
    "HTTPServer getHTTPResponse camelCase XMLHttpRequest ǅungla ǈ x/y/z\n/ path/to/file.py\n\n//",
    "it's HE'S she'LL x'ſ Xſ'S ª º Ǆ ǅ ǆ ʰʱ ᵃ ⅰⅱ e\u0301\u0302 Ωμ",
]


def _class_edges(encoding: str) -> list[str]:
    """Texts around the first and last code point of each range of the table's character classes (what the
    pattern's classes are made of)."""
    texts = []
    for first, last in (r for ranges in tokentable.table(encoding).ranges for r in ranges):
        for cp in {first, last, first - 1, last + 1}:
            if 0 <= cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF:
                c = chr(cp)
                texts.append(f"a{c}b {c}{c}1 '{c} x{c}\n{c} ")
    return texts


def _random_texts(count: int) -> list[str]:
    rng = random.Random(41)
    pool = [chr(cp) for cp in [*range(0x20, 0x3000), *range(0xFF00, 0xFFEF), *range(0x1F300, 0x1F700),
                               *range(0x10000, 0x10100), 0x2FFFF, 0xE0001, 0x10FFFD]
            if unicodedata.category(chr(cp)) != "Cs"]
    common = " \n\r\t'sSdDtTlLvVrReE0123456789.,!?-_/()"
    return ["".join(rng.choice(pool) if rng.random() < 0.3 else rng.choice(common)
                    for _ in range(rng.randint(1, 60))) for _ in range(count)]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("text", TEXTS)
def test_counts_equal_the_tokenizers_on_written_texts(encoding, text):
    assert tokentable.table(encoding).count(text) == reference(encoding).count(text)


def test_a_few_counts_known_by_hand():
    cl100k, o200k = tokentable.table("cl100k_base"), tokentable.table("o200k_base")
    # cl100k_base: "hello" " world" | "Hello" "," " world" "!" | "don" "'t" | "123" "456" "7"
    assert [cl100k.count(t) for t in ("hello world", "Hello, world!", "don't", "1234567")] == [2, 4, 2, 3]
    # o200k_base keeps a contraction with its word and splits camel case: "don't" | "HTTP" "Server"
    assert [o200k.count(t) for t in ("don't", "HTTPServer")] == [1, 2]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_counts_equal_the_tokenizers_at_every_class_edge_and_on_random_mixes(encoding):
    table, ref = tokentable.table(encoding), reference(encoding)
    texts = _class_edges(encoding) + _random_texts(3000)
    wrong = [(t, table.count(t), ref.count(t)) for t in texts if table.count(t) != ref.count(t)]
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_counts_of_the_example_requests_equal_the_tokenizers(encoding):
    texts: list[str] = []

    def walk(value):
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for name in ("request_a.json", "request_b.json"):
        walk(json.loads((EXAMPLES / name).read_text()))
    table = tokentable.table(encoding)
    assert [table.count(t) for t in texts] == [reference(encoding).count(t) for t in texts]


def test_what_a_table_cannot_count_is_left_to_the_tokenizer():
    table = tokentable.table("cl100k_base")
    assert table.count("x" + "a" * 600) is None  # one piece of 601 bytes: too long to merge in Python
    assert table.count("broken \ud800 surrogate") is None
    assert tokentable.table("p50k_base") is None  # no table: counted by the tokenizer


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_shipped_table_is_what_the_installed_tokenizer_builds(encoding, tmp_path):
    """A quicktok upgrade that changed a token or a character class shows here: rebuild the tables with
    `python -m kvprobe.tokentable`."""
    known = tokentable.ENCODINGS[encoding]
    fresh = tmp_path / f"{encoding}.kvtt"
    tokentable.build(known, fresh)
    assert fresh.read_bytes() == known.table.read_bytes()


def _run(code: str, given: str = "") -> list[str]:
    res = subprocess.run([sys.executable, "-c", code], input=given, capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()


_DIFF = ("import json, sys; from kvprobe.cli import main\n"
         "if sys.argv[1] == 'tokenizer':\n"
         "    import kvprobe.tokens  # every table's budget spent: the tokenizer counts\n"
         "    kvprobe.tokens._spent.update(cl100k_base=10**12, o200k_base=10**12)\n"
         "sys.argv = ['kvprobe', 'diff', *sys.argv[2:]]\n"
         "try:\n    main()\nexcept SystemExit:\n    pass\n"
         "print(any(m in sys.modules for m in ('quicktok', 'rs_bpe')))")


def _diff(counting: str, a, b, *flags: str) -> tuple[str, bool]:
    res = subprocess.run([sys.executable, "-c", _DIFF, counting, str(a), str(b), *flags], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    printed, _, loaded = res.stdout.rstrip("\n").rpartition("\n")
    return printed, loaded == "True"


def test_diff_of_the_example_requests_never_loads_the_tokenizer():
    printed, loaded = _diff("table", EXAMPLES / "request_a.json", EXAMPLES / "request_b.json")
    assert not loaded
    # the figures the tokenizer gives these requests (3,265 and 3,348 tokens, first change at ≈277)
    assert "A: 3,265 tokens   B: 3,348 tokens (estimated)" in printed
    assert "token ≈277" in printed


def _openai_pair(tmp_path):
    """Two Chat Completions requests to gpt-4o (o200k_base, exact counts): B's system prompt differs in one
    word in its middle."""
    system = ("You are Atlas, a coding agent. You read files, run tests and explain what you changed. "
              "Prefer small commits; never push to main. Answer in English — or in the user's language. ") * 30
    half = len(system) // 2
    paths = []
    for name, word in (("a", "staging"), ("b", "production")):
        body = {"model": "gpt-4o",
                "messages": [{"role": "system", "content": system[:half] + f" Deploy to {word}. " + system[half:]},
                             {"role": "user", "content": "Why does test_login fail on CI but not here? 🙃"}]}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(body, ensure_ascii=False))
        paths.append(path)
    return paths


@pytest.mark.parametrize("pair", ["anthropic", "openai"])
def test_diff_from_the_tables_says_what_it_says_from_the_tokenizer(pair, tmp_path):
    """Token totals, the first change's token position and the prediction: the same, byte for byte."""
    a, b = (EXAMPLES / "request_a.json", EXAMPLES / "request_b.json") if pair == "anthropic" else \
        _openai_pair(tmp_path)
    from_tables, loaded = _diff("table", a, b, "--json")
    from_tokenizer, tokenizer_loaded = _diff("tokenizer", a, b, "--json")
    assert not loaded and tokenizer_loaded
    assert from_tables == from_tokenizer
    assert json.loads(from_tables)["first_change"]["token_position"] > 0


def test_a_process_that_counts_more_loads_the_tokenizer_and_counts_the_same():
    """Past the table's budget the tokenizer counts: the counts of every text are the same either way."""
    texts = _random_texts(40) + [TEXTS[3] * 4000]  # the last one alone is over the budget
    code = ("import json, sys; from kvprobe.tokens import count_text\n"
            "texts = json.loads(sys.stdin.read())\n"
            "print(json.dumps([count_text(t) for t in texts]))\n"
            "print(any(m in sys.modules for m in ('quicktok', 'rs_bpe')))")
    counts, loaded = _run(code, json.dumps(texts))
    assert json.loads(counts) == [reference("cl100k_base").count(t) for t in texts]
    assert loaded == "True"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_patterns_narrowed_to_each_texts_characters_count_what_the_tokenizer_counts(encoding, monkeypatch):
    """A process's first texts with non-ASCII characters are split by the pattern narrowed to their characters
    (the whole pattern takes 7-16 ms to compile); here every text is, and the counts are still quicktok's."""
    monkeypatch.setattr(tokentable, "NARROW_PATTERNS", 1 << 30)
    known = tokentable.ENCODINGS[encoding]
    table, ref = tokentable.Table(known, known.table), reference(encoding)
    texts = TEXTS + _class_edges(encoding)[::5] + _random_texts(1000)
    wrong = [(t, table.count(t), ref.count(t)) for t in texts if table.count(t) != ref.count(t)]
    assert not wrong, wrong[:5]
    assert table._unicode is None  # (no text was split by the whole pattern)


def test_texts_counted_elsewhere_travel_together(monkeypatch):
    """`tokens.count_texts` where another process counts for this one (the report's helper, after the parse):
    the long texts go in one round trip, the short ones are counted from the table here, and every count is
    the tokenizer's; an answer of None (the helper ended) has this process count them itself."""
    from kvprobe import tokens

    monkeypatch.setattr(tokens, "_LOADED", set())
    monkeypatch.setattr(tokens, "_spent", {})
    trips: list[list[str]] = []

    def elsewhere(texts: list[str], encoding: str) -> list[int]:
        trips.append(list(texts))
        return [reference(encoding).count(t) for t in texts]
    monkeypatch.setattr(tokens, "_elsewhere", elsewhere)
    long_a, long_b = "x = 1\n" * 400, "The quick brown fox. " * 100  # 2,400 and 2,100 characters
    texts = [long_a, "short one", "", long_b, "don't stop"]
    assert tokens.count_texts(texts, "cl100k_base") == [reference("cl100k_base").count(t) for t in texts]
    assert trips == [[long_a, long_b]]
    monkeypatch.setattr(tokens, "_elsewhere", lambda texts, encoding: None)
    assert tokens.count_texts([long_a], "cl100k_base") == [reference("cl100k_base").count(long_a)]
    assert tokens._elsewhere is None  # it is not asked again
