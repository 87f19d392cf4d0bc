"""Token counts of short texts (cl100k_base, o200k_base) without loading the tokenizer.

Loading quicktok's cl100k_base takes ~0.1 s and o200k_base ~0.35 s (each builds its map of every token);
`kvprobe diff` of two small requests counts a few thousand tokens, so that load was a third of its run or
more. This module counts the same tokens from tables shipped in the package (`data/<encoding>.kvtt`) that
are memory-mapped, not parsed: opening one costs well under a millisecond, and a count is the same byte-pair
encoding in Python. The tables are made from quicktok itself (`build`, `python -m kvprobe.tokentable`):
every token's bytes by rank, an open-addressing hash index over them, and the character classes of the
encoding's split pattern (letters, numbers, white space; o200k's upper- and lower-case letter classes) as
quicktok's own data gives them, so counts are the tokenizer's to the token (tests/test_tokentable.py checks
them against quicktok, and the shipped tables against a fresh build).

Python counts at ~1.4-3 M characters/s where quicktok counts hundreds of MB/s, so `kvprobe.tokens` uses a
table only for the first `budget_chars` characters a process counts with it, then loads the tokenizer (since
`kvprobe.tokenizers` loads rs_bpe for small inputs, 25-45 ms, the table still wins where its budget holds all).

File layout (little-endian u32): magic b"KVTT", version, tokens, slots, blob bytes, classes; the number of
ranges of each class; the ranges (first, last code point); `slots` entries of rank + 1 (0: empty), indexed by
xxh3_64(token bytes) with linear probing; `tokens + 1` offsets into the blob; the blob (every token's bytes,
in rank order).
"""
from __future__ import annotations

import mmap
import re
import struct
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import xxhash

MAGIC, VERSION = b"KVTT", 2
_HEADER = struct.Struct("<4s5I")  # magic, version, tokens, slots, blob bytes, number of character classes
# A piece longer than this (a run of `=` or of letters thousands long) would cost seconds of Python merging:
# the text is left to the tokenizer instead.
MAX_PIECE_BYTES = 512
_NONE = 1 << 62  # the rank of a pair that is not a token: above every real rank
NARROW_PATTERNS = 16  # split patterns narrowed to a text's characters (Table._pattern) before the whole one
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"


@dataclass(frozen=True)
class Encoding:
    """How one encoding splits text before merging: its pattern over its character classes (in the order of
    quicktok's class file), and the same pattern over ASCII, which most prompts are."""

    name: str
    classes_file: str  # in quicktok's data folder
    classes: tuple[str, ...]
    pattern: str  # str.format'ed with each class's ranges
    ascii_pattern: str
    slots: int  # of the hash index: a power of two ~2.6 times the tokens, so probes stay short
    # characters a process counts from the table before it loads the tokenizer instead: about half of what
    # the table counts in the time the tokenizer takes to load (cl100k ~0.1 s, o200k ~0.35 s; the table
    # ~3 and ~1.4 M characters/s), so a process that goes on to load it anyway loses at most half a load
    budget_chars: int

    @property
    def table(self) -> Path:
        return Path(__file__).parent / "data" / f"{self.name}.kvtt"


ENCODINGS = {e.name: e for e in (
    # tiktoken's cl100k pattern (possessive form)
    Encoding("cl100k_base", "uniclass.bin", ("L", "N", "S"),
             r"'(?i:[sdmt]|ll|ve|re)|[^\r\n{L}{N}]?+[{L}]+|[{N}]{{1,3}}| ?[^{S}{L}{N}]++[\r\n]*|[{S}]*[\r\n]"
             r"|[{S}]+(?![^{S}])|[{S}]+",
             r"'(?i:[sdmt]|ll|ve|re)|[^\r\na-zA-Z0-9]?+[a-zA-Z]+|[0-9]{1,3}| ?[^\sa-zA-Z0-9]++[\r\n]*"
             r"|\s*[\r\n]|\s+(?!\S)|\s+", 1 << 18, 150_000),
    # tiktoken's o200k pattern: UPPER is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], LOWER [\p{Ll}\p{Lm}\p{Lo}\p{M}]
    Encoding("o200k_base", "uniclass_o200k.bin", ("L", "N", "S", "UPPER", "LOWER"),
             r"[^\r\n{L}{N}]?[{UPPER}]*[{LOWER}]+" + _CONTRACTION + r"|[^\r\n{L}{N}]?[{UPPER}]+[{LOWER}]*"
             + _CONTRACTION + r"|[{N}]{{1,3}}| ?[^{S}{L}{N}]+[\r\n/]*|[{S}]*[\r\n]+|[{S}]+(?![^{S}])|[{S}]+",
             r"[^\r\na-zA-Z0-9]?[A-Z]*[a-z]+" + _CONTRACTION + r"|[^\r\na-zA-Z0-9]?[A-Z]+[a-z]*" + _CONTRACTION
             + r"|[0-9]{1,3}| ?[^\sa-zA-Z0-9]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+", 1 << 19, 250_000),
)}


class Table:
    """The memory-mapped table of one encoding: token ranks by bytes, and the ranges of its character classes."""

    def __init__(self, encoding: Encoding, path: Path) -> None:
        with open(path, "rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        magic, version, tokens, slots, _blob, classes = _HEADER.unpack_from(self._map, 0)
        if magic != MAGIC or version != VERSION or classes != len(encoding.classes):
            raise ValueError(f"{path}: not a kvprobe token table of version {VERSION} for {encoding.name}")
        sizes = struct.unpack_from(f"<{classes}I", self._map, _HEADER.size)
        at = _HEADER.size + 4 * classes
        ranges = struct.unpack_from(f"<{2 * sum(sizes)}I", self._map, at)
        at += 8 * sum(sizes)
        view = memoryview(self._map)
        self._slots = view[at:at + 4 * slots].cast("I")
        at += 4 * slots
        self._offsets = view[at:at + 4 * (tokens + 1)].cast("I")
        self._blob = at + 4 * (tokens + 1)
        self._mask = slots - 1
        self.encoding = encoding
        self.ranges: tuple[tuple[tuple[int, int], ...], ...] = tuple(_split(ranges, sizes))
        self._ascii = re.compile(encoding.ascii_pattern, re.ASCII)
        self._unicode: re.Pattern[str] | None = None
        self._narrow: dict[frozenset[str], re.Pattern[str]] = {}
        self._memo: dict[str, int] = {}

    def _pattern(self, text: str) -> re.Pattern[str]:
        """The split pattern for `text`. Its character classes spelled whole take 7 ms (cl100k) to 16 ms (o200k)
        to compile, a fifth of a `diff` whose prompts hold one "…" or "é": the first `NARROW_PATTERNS` sets of
        non-ASCII characters get the pattern with each class narrowed to its ASCII part and the characters of
        the set (~0.3 ms). A pattern tests one character at a time against a class, so on a text whose
        non-ASCII characters are all in the set it splits exactly as the whole pattern does."""
        if text.isascii():
            return self._ascii
        if self._unicode is not None:
            return self._unicode
        wide = frozenset(c for c in set(text) if c > "\x7f")
        found = self._narrow.get(wide)
        if found is None:
            if len(self._narrow) >= NARROW_PATTERNS:  # a process counting many kinds of text: the whole classes
                self._unicode = re.compile(self.encoding.pattern.format(**self._spelled(None)))
                return self._unicode
            found = self._narrow[wide] = re.compile(self.encoding.pattern.format(**self._spelled(wide)))
        return found

    def _spelled(self, wide: frozenset[str] | None) -> dict[str, str]:
        """Each class as the inside of a `[...]`: whole (None), or its ASCII part and the members among `wide`."""
        if wide is None:
            return {name: "".join(_span(*r) for r in ranges) for name, ranges in zip(self.encoding.classes,
                                                                                      self.ranges)}
        spelled = {}
        for name, ranges in zip(self.encoding.classes, self.ranges):
            ordered = sorted(ranges)
            starts = [first for first, _ in ordered]
            ascii_part = "".join(_span(first, min(last, 0x7F)) for first, last in ordered if first <= 0x7F)
            members = "".join(re.escape(c) for c in sorted(wide) if _within(ord(c), ordered, starts))
            spelled[name] = ascii_part + members
        return spelled if all(spelled.values()) else self._spelled(None)  # (`[]` would not be an empty class)

    def rank(self, piece: bytes) -> int | None:
        slots, offsets, data, mask, blob = self._slots, self._offsets, self._map, self._mask, self._blob
        at = xxhash.xxh3_64_intdigest(piece) & mask
        size = len(piece)
        while rank := slots[at]:
            start = blob + offsets[rank - 1]
            if offsets[rank] - offsets[rank - 1] == size and data[start:start + size] == piece:
                return rank - 1
            at = (at + 1) & mask
        return None

    def count(self, text: str) -> int | None:
        """Tokens of `text`, or None when it is not for this table (a piece too long, a lone surrogate)."""
        memo, total = self._memo, 0
        for piece in self._pattern(text).findall(text):
            found = memo.get(piece)
            if found is None:
                try:
                    encoded = piece.encode()
                except UnicodeEncodeError:  # a lone surrogate: the tokenizer decides what that is
                    return None
                if len(encoded) > MAX_PIECE_BYTES:
                    return None
                found = memo[piece] = self._merge(encoded)
            total += found
        return total

    def _merge(self, piece: bytes) -> int:
        """Tokens of one piece by byte-pair merging: the lowest-ranked adjacent pair first, leftmost on ties."""
        if len(piece) == 1 or self.rank(piece) is not None:
            return 1
        parts = [piece[i:i + 1] for i in range(len(piece))]
        pairs = [self._pair(parts[i] + parts[i + 1]) for i in range(len(parts) - 1)]
        while pairs:
            best = min(pairs)
            if best == _NONE:
                break
            i = pairs.index(best)
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
            del pairs[i]
            if i < len(pairs):
                pairs[i] = self._pair(parts[i] + parts[i + 1])
            if i > 0:
                pairs[i - 1] = self._pair(parts[i - 1] + parts[i])
        return len(parts)

    def _pair(self, joined: bytes) -> int:
        rank = self.rank(joined)
        return _NONE if rank is None else rank


def _split(ranges: tuple[int, ...], sizes: tuple[int, ...]) -> list[tuple[tuple[int, int], ...]]:
    """Flat (first, last, first, last, ...) values into each class's ranges."""
    out, at = [], 0
    for size in sizes:
        out.append(tuple(zip(ranges[2 * at:2 * (at + size):2], ranges[2 * at + 1:2 * (at + size):2])))
        at += size
    return out


def _within(cp: int, ordered: list[tuple[int, int]], starts: list[int]) -> bool:
    at = bisect_right(starts, cp) - 1
    return at >= 0 and cp <= ordered[at][1]


def _span(first: int, last: int) -> str:
    return re.escape(chr(first)) if first == last else f"{re.escape(chr(first))}-{re.escape(chr(last))}"


@lru_cache(maxsize=4)
def table(encoding: str) -> Table | None:
    """The shipped table of an encoding, or None where there is none (another encoding, a checkout without
    the file): then the tokenizer counts everything, as before."""
    found = ENCODINGS.get(encoding)
    if found is None:
        return None
    try:
        return Table(found, found.table)
    except (OSError, ValueError):
        return None


def build(encoding: Encoding, path: Path) -> None:
    """Write the table of an encoding from the installed quicktok (its token bytes and its class ranges)."""
    import quicktok

    tokenizer = quicktok.get_encoding(encoding.name)
    tokens: list[bytes] = []
    while True:
        try:
            tokens.append(tokenizer.decode_single_token_bytes(len(tokens)))
        except KeyError:
            break
    mask = encoding.slots - 1
    slots = [0] * encoding.slots
    for rank, token in enumerate(tokens):
        at = xxhash.xxh3_64_intdigest(token) & mask
        while slots[at]:
            at = (at + 1) & mask
        slots[at] = rank + 1
    offsets = [0]
    for token in tokens:
        offsets.append(offsets[-1] + len(token))
    classes = _quicktok_classes(Path(quicktok.__file__).parent / "data" / encoding.classes_file, encoding)
    ranges = [value for ranges_ in classes for pair in ranges_ for value in pair]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(_HEADER.pack(MAGIC, VERSION, len(tokens), encoding.slots, offsets[-1], len(classes)))
        fh.write(struct.pack(f"<{len(classes)}I", *(len(c) for c in classes)))
        fh.write(struct.pack(f"<{len(ranges)}I", *ranges))
        fh.write(struct.pack(f"<{encoding.slots}I", *slots))
        fh.write(struct.pack(f"<{len(offsets)}I", *offsets))
        fh.write(b"".join(tokens))


def _quicktok_classes(path: Path, encoding: Encoding) -> list[list[tuple[int, int]]]:
    """quicktok's character classes of the encoding's split pattern: per class a u32 count of ranges, then
    (first, last) u32 pairs. Read from its data so the split is the one its counts use, to the code point
    (its Unicode version is not this Python's)."""
    data, at, classes = path.read_bytes(), 0, []
    while at < len(data):
        (size,) = struct.unpack_from("<I", data, at)
        pairs = struct.unpack_from(f"<{2 * size}I", data, at + 4)
        classes.append(list(zip(pairs[::2], pairs[1::2])))
        at += 4 + 8 * size
    if len(classes) != len(encoding.classes):
        raise ValueError(f"{path}: expected {len(encoding.classes)} character classes "
                         f"({', '.join(encoding.classes)}), found {len(classes)}")
    return classes


if __name__ == "__main__":
    for known in ENCODINGS.values():
        build(known, known.table)
        print(f"wrote {known.table} ({known.table.stat().st_size:,} bytes)")
