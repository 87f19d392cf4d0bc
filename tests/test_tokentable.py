"""Token counts from the shipped table (kvprobe.tokentable) are the tokenizer's own, and `diff` of two small
requests gets them without loading the tokenizer.

The reference is quicktok's cl100k_base (byte-identical to tiktoken), an independent implementation: every
text below is counted both ways. The texts are written here: prose and code, contractions (with the
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

REFERENCE = quicktok.get_encoding("cl100k_base")
EXAMPLES = ROOT / "examples"

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
]


def _class_edges() -> list[str]:
    """Texts around the first and last code point of each range of the table's letter, number and space
    classes (what the pattern's classes are made of)."""
    table = tokentable.table()
    texts = []
    for first, last in zip(table._ranges[::2], table._ranges[1::2]):
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


@pytest.mark.parametrize("text", TEXTS)
def test_counts_equal_the_tokenizers_on_written_texts(text):
    assert tokentable.table().count(text) == REFERENCE.count(text)


def test_a_few_counts_known_by_hand():
    table = tokentable.table()
    # cl100k_base: "hello" " world" | "Hello" "," " world" "!" | "don" "'t" | "123" "456" "7"
    assert [table.count(t) for t in ("hello world", "Hello, world!", "don't", "1234567")] == [2, 4, 2, 3]


def test_counts_equal_the_tokenizers_at_every_class_edge_and_on_random_mixes():
    table = tokentable.table()
    texts = _class_edges() + _random_texts(3000)
    wrong = [(t, table.count(t), REFERENCE.count(t)) for t in texts if table.count(t) != REFERENCE.count(t)]
    assert not wrong, wrong[:5]


def test_counts_of_the_example_requests_equal_the_tokenizers():
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
    table = tokentable.table()
    assert [table.count(t) for t in texts] == [REFERENCE.count(t) for t in texts]


def test_what_the_table_cannot_count_is_left_to_the_tokenizer():
    table = tokentable.table()
    assert table.count("x" + "a" * 600) is None  # one piece of 601 bytes: too long to merge in Python
    assert table.count("broken \ud800 surrogate") is None


def test_the_shipped_table_is_what_the_installed_tokenizer_builds(tmp_path):
    """A quicktok upgrade that changed a token or a character class shows here: rebuild the table with
    `python -m kvprobe.tokentable`."""
    fresh = tmp_path / "cl100k_base.kvtt"
    tokentable.build(fresh)
    assert fresh.read_bytes() == tokentable.TABLE.read_bytes()


def _run(code: str, given: str = "") -> list[str]:
    res = subprocess.run([sys.executable, "-c", code], input=given, capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()


def test_diff_of_two_small_requests_never_loads_the_tokenizer():
    code = ("import sys; from kvprobe.cli import main\n"
            f"sys.argv = ['kvprobe', 'diff', {str(EXAMPLES / 'request_a.json')!r}, "
            f"{str(EXAMPLES / 'request_b.json')!r}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('quicktok' in sys.modules)")
    lines = _run(code)
    assert lines[-1] == "False"
    # the figures the tokenizer gives these requests (3,265 and 3,348 tokens, first change at ≈277)
    assert "A: 3,265 tokens   B: 3,348 tokens (estimated)" in lines
    assert any("token ≈277" in line for line in lines)


def test_a_process_that_counts_more_loads_the_tokenizer_and_counts_the_same():
    """Past the table's budget the tokenizer counts: the counts of every text are the same either way."""
    texts = _random_texts(40) + [TEXTS[3] * 4000]  # the last one alone is over the budget
    code = ("import json, sys; from kvprobe.tokens import count_text\n"
            "texts = json.loads(sys.stdin.read())\n"
            "print(json.dumps([count_text(t) for t in texts])); print('quicktok' in sys.modules)")
    counts, loaded = _run(code, json.dumps(texts))
    assert json.loads(counts) == [REFERENCE.count(t) for t in texts]
    assert loaded == "True"
