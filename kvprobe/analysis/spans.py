"""Volatile spans: the parts of a block's text that differ between versions whose rest is equal.

A timestamp in a system prompt's first sentence, a session id in a tool description, a counter in the first
user message: the block is the same but for a few characters, and those characters break every cache entry
after them. Given the versions of one block (within a session or across the sessions of a fleet), this finds
the spans, wherever they sit (start, middle, end), as whole words; where a span sits on a short line of its
own, the line is the unit (the whole line moves, as a person would move it).

Each version is compared with a reference (the most common version): the common prefix and suffix bound the
change (found by C-level slice comparison, not a character loop); what lies between is compared word by
word, so two spans far apart stay two spans and the text between them stays put. The spans of all versions
are merged in the reference's coordinates, so every version gives up the same holes and keeps the same
stable text.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from difflib import SequenceMatcher

from kvprobe.request.model import digest

K = TypeVar("K")
MAX_VOLATILE_FRACTION = 0.2  # more of a text than this changing: another text, not a volatile span
LABEL_CHARS = 40  # a line whose text besides its spans is at most this long (a label) moves whole
_WORDS = re.compile(r"\S+|\s+")


def common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, by bisection over slice comparisons (each compared in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix(a: str, b: str, limit: int) -> int:
    lo, hi = 0, min(len(a), len(b)) - limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _to_words(text: str, lo: int, hi: int) -> tuple[int, int]:
    """Widen [lo, hi) to whole whitespace-separated words."""
    while lo > 0 and not text[lo - 1].isspace():
        lo -= 1
    while hi < len(text) and not text[hi].isspace():
        hi += 1
    return lo, hi


Hole = tuple[int, int, int, int]  # (start, end) in the reference, (start, end) in the version


def _holes(ref: str, text: str) -> list[Hole]:
    """Where `text` differs from `ref`, as pairs of ranges, in order."""
    if ref == text:
        return []
    p = common_prefix(ref, text)
    q = common_suffix(ref, text, p)
    r0, r1 = _to_words(ref, p, len(ref) - q)
    t0 = r0  # the prefix is common: word starts agree
    t1 = len(text) - (len(ref) - r1)
    t1 = max(t1, t0)
    middle_ref, middle_text = ref[r0:r1], text[t0:t1]
    if len(middle_ref) < 400 or len(middle_text) < 400:
        return [(r0, r1, t0, t1)]
    return _word_holes(middle_ref, middle_text, r0, t0, MAX_VOLATILE_FRACTION * len(ref))


def _word_holes(ref: str, text: str, r_base: int, t_base: int, most: float) -> list[Hole]:
    """Several spans inside a changed region: compare word by word. When the words of `ref` that `text` lacks
    already come to more than `most` characters, so would the holes: the region is one hole (the texts are not
    versions of one block, `find_template`). That count is linear; aligning two unrelated texts word by word
    is not (three prompts of 10,000 characters with no word in common took minutes, their spaces matching)."""
    a, b = _WORDS.findall(ref), _WORDS.findall(text)
    lacking = Counter(a)
    lacking.subtract(b)
    if sum(len(word) * n for word, n in lacking.items() if n > 0) > most:
        return [(r_base, r_base + len(ref), t_base, t_base + len(text))]
    a_at, b_at = _offsets(a, r_base), _offsets(b, t_base)
    out: list[Hole] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        hole = (a_at[i1], a_at[i2], b_at[j1], b_at[j2])
        if out and out[-1][1] >= hole[0]:
            hole = (out[-1][0], hole[1], out[-1][2], hole[3])
            out.pop()
        out.append(hole)
    return out


def _offsets(words: list[str], base: int) -> list[int]:
    at = [base]
    for w in words:
        at.append(at[-1] + len(w))
    return at


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _line_units(ref: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A span on a line of its own beside only a label ("Current time: ...") takes the whole line (and its
    line break) with it; a span inside a line of other text moves alone."""
    out = []
    for lo, hi in spans:
        start = ref.rfind("\n", 0, lo) + 1
        end = ref.find("\n", hi)
        end = len(ref) if end < 0 else end
        others = (end - start) - sum(min(h, end) - max(l, start) for l, h in spans if l < end and h > start)
        if (start > 0 or end < len(ref)) and others <= LABEL_CHARS:
            lo, hi = start, (end + 1 if end < len(ref) else end)
            if hi == len(ref) and start > 0:  # the last line: take the break before it instead
                lo = start - 1
        out.append((lo, hi))
    return _merge(out)


@dataclass(frozen=True, slots=True)
class Split:
    """One version of a block: what stays in place and what moves after the last breakpoint."""

    stable: str
    moved: str


@dataclass(slots=True)
class Template:
    """The spans of one block across its versions; `split` gives each version's stable text and moved spans."""

    reference: str
    spans: list[tuple[int, int]]  # in the reference
    # per version, by `version_id`: a policy lives as long as the what-if, and a fleet's versions of a system
    # prompt (one or two per session) held by their texts cost kilobytes a request
    holes: dict[str, list[Hole]]

    def split(self, text: str) -> Split | None:
        holes = self.holes.get(version_id(text))
        if holes is None:
            return None
        cuts = [(self._at(lo, holes), self._at(hi, holes)) for lo, hi in self.spans]
        stable, moved, at = [], [], 0
        for lo, hi in cuts:
            stable.append(text[at:lo])
            moved.append(text[lo:hi].strip("\n"))
            at = hi
        stable.append(text[at:])
        return Split("".join(stable), "\n".join(m for m in moved if m))

    @staticmethod
    def _at(ref_index: int, holes: list[Hole]) -> int:
        """A reference position outside this version's holes (or at their ends), in the version."""
        shift = 0
        for r0, r1, t0, t1 in holes:
            if ref_index <= r0:
                break
            if ref_index >= r1:
                shift = t1 - r1
            else:  # inside: the merged spans contain the hole, so only its ends are asked
                return t0 if ref_index - r0 < r1 - ref_index else t1
        return ref_index + shift

    @property
    def sample(self) -> str:
        return " / ".join(self.reference[lo:hi].strip() for lo, hi in self.spans)


def find_template(versions: list[str], counts: Counter | None = None) -> Template | None:
    """The spans in which `versions` of one block differ, or None when they differ too much to be one block
    with volatile spans (or do not differ)."""
    counts = counts or Counter(versions)
    return template_of(list(dict.fromkeys(versions)), lambda text: text, counts.__getitem__)


def template_of(keys: list[K], text_of: Callable[[K], str], count_of: Callable[[K], int]) -> Template | None:
    """`find_template` of distinct versions known by key, each text asked for when it is compared (a fleet's
    thousands of versions of a system prompt are then never held together); count_of: how often each is
    sent (the reference is the most sent)."""
    if len(keys) < 2:
        return None
    # ties: the newest version (the index rides along: a list's `index` per version was quadratic)
    ref = text_of(max(enumerate(keys), key=lambda it: (count_of(it[1]), it[0]))[1])
    holes = {}
    for key in keys:
        text = text_of(key)
        holes[version_id(text)] = _holes(ref, text)
    spans = _merge([(h[0], h[1]) for hs in holes.values() for h in hs])
    changed = sum(hi - lo for lo, hi in spans)
    if not spans or changed > MAX_VOLATILE_FRACTION * len(ref):
        return None
    return Template(ref, _line_units(ref, spans), holes)



def version_id(text: str) -> str:
    """A version's identity without its text (128-bit: versions of one block do not collide)."""
    return digest(text.encode("utf-8", "surrogatepass"))
