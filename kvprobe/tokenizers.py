"""The byte-pair encodings token counts are made with, and the one that estimates the tokenizers that are not
public. A module that imports nothing at its top: the report's helper process loads an encoding here before it
imports anything else (`analysis.helper`), the load being the longest fixed cost of a small report.

Two implementations of the same encodings count the same tokens (tests/test_tokenizers.py holds them to each
other), and a process picks one by how much it will count:
- rs_bpe (GitHub's `bpe` crate, its encodings built into the wheel) loads cl100k_base in ~25 ms and o200k_base in
  ~45 ms, and counts English prose at ~15-20 ns a character;
- quicktok (the vocabularies ship in its wheel) takes ~0.25 s to load cl100k_base (~0.5 s o200k_base), then
  counts ~4 ns a character.
A process that reads less than `LARGE_INPUT_BYTES` loads rs_bpe: its whole count of a few MB takes less than
quicktok's load (a 300-request fleet's report 0.59 -> 0.48 s). A larger input's report loads quicktok, whose
load the parse hides and whose counting keeps up with the parse (a 100 MB trace: 0.51 s, 0.58 with rs_bpe).
Where rs_bpe is not installed (the dependency's marker leaves it out on CPython 3.14 and PyPy, which it has no
wheels for) or lacks the encoding, quicktok counts everything. `$KVPROBE_TOKENIZER` (`quicktok` or `rs_bpe`)
makes the choice instead of the input's size.

The two differ on one thing: the characters Unicode 17.0 added (CJK Extension J, new Tangut and Latin letters,
...) are letters to quicktok's split pattern, as to the shipped tables, and not to rs_bpe's (4,657 code points in
cl100k_base, 4,699 in o200k_base, found by counting every code point in context with both: `UNICODE_17_RANGES`).
A text holding any of them is counted by quicktok, so a count never depends on which one loaded.
"""
from __future__ import annotations

ESTIMATE_ENCODING = "cl100k_base"  # loads 2-3x faster than o200k; close to Claude's vocabulary size
# the provider whose tokenizer is public: its records are counted with its own encodings (`tokens.TokenCounter`)
EXACT_PROVIDER = "openai"
# From this many bytes of input a process counts with quicktok: between a 39 MB fleet (level) and a 100 MB
# trace (quicktok 12% faster), measured in docs/benchmarks.md, stop 63.
LARGE_INPUT_BYTES = 48_000_000

FAST_LOADING = ("cl100k_base", "o200k_base")  # the encodings rs_bpe builds in
# The code points rs_bpe 0.1.0 splits differently from quicktok (both encodings together; tests/test_tokenizers.py
# counts every code point of them, and in a slow test every code point there is, both ways).
UNICODE_17_RANGES = (
    (0x088F, 0x088F), (0x0C5C, 0x0C5C), (0x0CDC, 0x0CDC), (0x1ACF, 0x1ADD), (0x1AE0, 0x1AEB), (0xA7CE, 0xA7CF),
    (0xA7D2, 0xA7D2), (0xA7D4, 0xA7D4), (0xA7F1, 0xA7F1), (0x10940, 0x10959), (0x10EC5, 0x10EC7),
    (0x10EFA, 0x10EFB), (0x11B60, 0x11B67), (0x11DB0, 0x11DDB), (0x11DE0, 0x11DE9), (0x16EA0, 0x16EB8),
    (0x16EBB, 0x16ED3), (0x16FF2, 0x16FF6), (0x187F8, 0x187FF), (0x18D09, 0x18D1E), (0x18D80, 0x18DF2),
    (0x1E6C0, 0x1E6DE), (0x1E6E0, 0x1E6F5), (0x1E6FE, 0x1E6FF), (0x2B73A, 0x2B73F), (0x2CEA2, 0x2CEAD),
    (0x323B0, 0x33479),
)

_large_input = False
_loaded: dict[str, object] = {}


def expect_input(total_bytes: int) -> None:
    """Say how many bytes this process (and the processes it forks from now on) will read to count: from
    `LARGE_INPUT_BYTES` on, an encoding loaded after this is quicktok's. Said by `report` for the traces it
    reads (`report._build_report`) and by the parse's helper for the files it was given (`analysis.helper`)."""
    global _large_input
    _large_input = total_bytes >= LARGE_INPUT_BYTES


def _wants_fast() -> bool:
    import os

    chosen = os.environ.get("KVPROBE_TOKENIZER", "").strip().lower()
    if chosen in ("quicktok", "rs_bpe"):
        return chosen == "rs_bpe"
    return not _large_input


def load(name: str):  # noqa: ANN201 - rs_bpe's or quicktok's tokenizer (importing either would load it)
    """The encoding `name`, loaded once a process; it has `count(text)`, the tokens of the text as ordinary text
    (a special token's spelling counts as the text it is)."""
    found = _loaded.get(name)
    if found is None:
        found = _fast_load(name) if _wants_fast() else None
        if found is None:
            import quicktok

            found = quicktok.get_encoding(name)
        _loaded[name] = found
    return found


def _fast_load(name: str) -> _FastLoaded | None:  # None where rs_bpe is not installed or lacks the encoding
    if name not in FAST_LOADING:
        return None
    try:
        from rs_bpe.bpe import openai
    except ImportError:
        return None
    return _FastLoaded(name, getattr(openai, name)())


class _FastLoaded:
    """rs_bpe's encoding, but a text holding a character Unicode 17.0 added goes to quicktok's (loaded then)."""

    __slots__ = ("_name", "_tokenizer", "_newer")

    def __init__(self, name: str, tokenizer) -> None:  # noqa: ANN001 - rs_bpe's Tokenizer
        self._name, self._tokenizer, self._newer = name, tokenizer, None

    def count(self, text: str) -> int:
        if not text.isascii():
            if self._newer is None:
                import re

                self._newer = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in UNICODE_17_RANGES)
                                         + "]")
            if self._newer.search(text):
                import quicktok

                return quicktok.get_encoding(self._name).count(text)
        return self._tokenizer.count(text)
