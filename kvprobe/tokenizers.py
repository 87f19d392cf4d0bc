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
Where rs_bpe has no wheel (it is not installed there) or lacks the encoding, quicktok counts everything.
`$KVPROBE_TOKENIZER` (`quicktok` or `rs_bpe`) makes the choice instead of the input's size.
"""
from __future__ import annotations

ESTIMATE_ENCODING = "cl100k_base"  # loads 2-3x faster than o200k; close to Claude's vocabulary size
# the provider whose tokenizer is public: its records are counted with its own encodings (`tokens.TokenCounter`)
EXACT_PROVIDER = "openai"
# From this many bytes of input a process counts with quicktok: between a 39 MB fleet (level) and a 100 MB
# trace (quicktok 12% faster), measured in docs/benchmarks.md, stop 63.
LARGE_INPUT_BYTES = 48_000_000

FAST_LOADING = ("cl100k_base", "o200k_base")  # the encodings rs_bpe builds in

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


def _fast_load(name: str):  # noqa: ANN202 - None where rs_bpe is not installed or lacks the encoding
    if name not in FAST_LOADING:
        return None
    try:
        from rs_bpe.bpe import openai
    except ImportError:
        return None
    return getattr(openai, name)()
