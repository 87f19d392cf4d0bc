"""cl100k token counts of short texts without loading the tokenizer.

Loading quicktok's cl100k_base takes ~0.1 s (it builds a 100k-entry map); `kvprobe diff` of two small
requests counts a few thousand tokens, so that load was a third of its run. This module counts the same
tokens from a table shipped in the package (`data/cl100k_base.kvtt`) that is memory-mapped, not parsed:
opening it costs well under a millisecond, and a count is the same byte-pair encoding in Python. The table
is made from quicktok itself (`build`, `python -m kvprobe.tokentable`): every token's bytes by rank, an
open-addressing hash index over them, and the character classes of cl100k's split pattern (letters,
numbers, white space) as quicktok's own data gives them, so counts are the tokenizer's to the token
(tests/test_tokentable.py checks it against quicktok over stress texts and the shipped table against a
fresh build).

Python counts at ~2-3 MB/s where quicktok counts at hundreds, so `kvprobe.tokens` uses this only for the
first `BUDGET_CHARS` characters a process counts, then loads the tokenizer.

File layout (little-endian u32 unless said): magic b"KVTT", version, tokens, slots, blob bytes, then the
counts of letter, number and space ranges; the ranges (first, last code point); `slots` entries of rank + 1
(0: empty), indexed by xxh3_64(token bytes) with linear probing; `tokens + 1` offsets into the blob; the
blob (every token's bytes, in rank order).
"""
from __future__ import annotations

import mmap
import re
import struct
from functools import lru_cache
from pathlib import Path

import xxhash

ENCODING = "cl100k_base"
TABLE = Path(__file__).parent / "data" / f"{ENCODING}.kvtt"
MAGIC, VERSION = b"KVTT", 1
_HEADER = struct.Struct("<4s7I")
SLOTS = 1 << 18  # 100,256 tokens at ~38% load: probes stay short
# A piece longer than this (a run of `=` or of letters thousands long) would cost seconds of Python merging:
# the text is left to the tokenizer instead.
MAX_PIECE_BYTES = 512
_NONE = 1 << 62  # the rank of a pair that is not a token: above every real rank

# cl100k's split pattern (tiktoken's, possessive form), with \p{L}, \p{N} and \s spelled as classes
_PATTERN = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n{L}{N}]?+[{L}]+|[{N}]{{1,3}}| ?[^{S}{L}{N}]++[\r\n]*|[{S}]*[\r\n]"
            r"|[{S}]+(?![^{S}])|[{S}]+")
# the same over ASCII (most prompts): a small pattern, compiled in well under a millisecond
_ASCII = re.compile(r"'(?i:[sdmt]|ll|ve|re)|[^\r\na-zA-Z0-9]?+[a-zA-Z]+|[0-9]{1,3}| ?[^\sa-zA-Z0-9]++[\r\n]*"
                    r"|\s*[\r\n]|\s+(?!\S)|\s+", re.ASCII)


class Table:
    """The memory-mapped table of one encoding: token ranks by bytes, and its split pattern."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        magic, version, tokens, slots, blob, *sizes = _HEADER.unpack_from(self._map, 0)
        if magic != MAGIC or version != VERSION:
            raise ValueError(f"{path}: not a kvprobe token table of version {VERSION}")
        view, at = memoryview(self._map), _HEADER.size
        ranges = struct.unpack_from(f"<{2 * sum(sizes)}I", self._map, at)
        at += 8 * sum(sizes)
        self._slots = view[at:at + 4 * slots].cast("I")
        at += 4 * slots
        self._offsets = view[at:at + 4 * (tokens + 1)].cast("I")
        self._blob = at + 4 * (tokens + 1)
        self._mask = slots - 1
        self._ranges = ranges
        self._sizes = sizes
        self._memo: dict[str, int] = {}

    @property
    def unicode_pattern(self) -> re.Pattern[str]:
        """The full split pattern (~10 ms to compile: only texts with non-ASCII characters need it)."""
        return _unicode_pattern(self._ranges, tuple(self._sizes))

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
        pattern = _ASCII if text.isascii() else self.unicode_pattern
        memo, total = self._memo, 0
        for piece in pattern.findall(text):
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


@lru_cache(maxsize=1)
def _unicode_pattern(ranges: tuple[int, ...], sizes: tuple[int, int, int]) -> re.Pattern[str]:
    classes, at = [], 0
    for size in sizes:
        pairs = ranges[2 * at:2 * (at + size)]
        classes.append("".join(_span(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)))
        at += size
    letters, numbers, spaces = classes
    return re.compile(_PATTERN.format(L=letters, N=numbers, S=spaces))


def _span(first: int, last: int) -> str:
    return re.escape(chr(first)) if first == last else f"{re.escape(chr(first))}-{re.escape(chr(last))}"


@lru_cache(maxsize=1)
def table() -> Table | None:
    """The shipped table, or None where it is missing (a checkout that has not built it): then the tokenizer
    counts everything, as before."""
    try:
        return Table(TABLE)
    except (OSError, ValueError):
        return None


def build(path: Path) -> None:
    """Write the table of cl100k_base from the installed quicktok (its token bytes and its class ranges)."""
    import quicktok

    encoding = quicktok.get_encoding(ENCODING)
    tokens: list[bytes] = []
    while True:
        try:
            tokens.append(encoding.decode_single_token_bytes(len(tokens)))
        except KeyError:
            break
    slots = [0] * SLOTS
    for rank, token in enumerate(tokens):
        at = xxhash.xxh3_64_intdigest(token) & (SLOTS - 1)
        while slots[at]:
            at = (at + 1) & (SLOTS - 1)
        slots[at] = rank + 1
    offsets = [0]
    for token in tokens:
        offsets.append(offsets[-1] + len(token))
    classes = _quicktok_classes(Path(quicktok.__file__).parent / "data" / "uniclass.bin")
    ranges = [value for ranges_ in classes for pair in ranges_ for value in pair]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(_HEADER.pack(MAGIC, VERSION, len(tokens), SLOTS, offsets[-1], *(len(c) for c in classes)))
        fh.write(struct.pack(f"<{len(ranges)}I", *ranges))
        fh.write(struct.pack(f"<{SLOTS}I", *slots))
        fh.write(struct.pack(f"<{len(offsets)}I", *offsets))
        fh.write(b"".join(tokens))


def _quicktok_classes(path: Path) -> list[list[tuple[int, int]]]:
    """quicktok's letter, number and space classes of the split pattern: per class a u32 count of ranges,
    then (first, last) u32 pairs. Read from its data so the split is the one its counts use, to the code
    point (its Unicode version is not this Python's)."""
    data, at, classes = path.read_bytes(), 0, []
    while at < len(data):
        (size,) = struct.unpack_from("<I", data, at)
        pairs = struct.unpack_from(f"<{2 * size}I", data, at + 4)
        classes.append(list(zip(pairs[::2], pairs[1::2])))
        at += 4 + 8 * size
    if len(classes) != 3:
        raise ValueError(f"{path}: expected 3 character classes (letters, numbers, spaces), found {len(classes)}")
    return classes


if __name__ == "__main__":
    build(TABLE)
    print(f"wrote {TABLE} ({TABLE.stat().st_size:,} bytes)")
