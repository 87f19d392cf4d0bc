"""Volatile spans (kvprobe.analysis.spans) at the edge of the rule that tells a version from another text.

Rule (`kvprobe.analysis.spans.MAX_VOLATILE_FRACTION`, the stabilize_prefix fix of the README): versions of one
block differ in spans; when the spans come to more than a fifth of the reference text, the texts are not versions
of one block and no template is made (no span is moved). The texts below are 1,000 characters: 91 words of 10
characters and 90 spaces, so a fifth is 200 characters, 20 words. The changed words sit at both ends (10 and 10),
so the text between them is compared word by word.
"""
from __future__ import annotations

import pytest

from kvprobe.analysis.spans import find_template

WORDS = [f"word{i:06d}" for i in range(91)]  # 10 characters each
REFERENCE = " ".join(WORDS)


def changed(n: int) -> str:
    """The reference with its first n // 2 and last n - n // 2 words replaced by words of the same length."""
    words = list(WORDS)
    for i in [*range(n // 2), *range(91 - (n - n // 2), 91)]:
        words[i] = f"CHANGED{i:03d}"
    return " ".join(words)


@pytest.mark.parametrize("words, template", [(19, True), (20, True), (21, False)])
def test_a_version_may_differ_in_at_most_a_fifth_of_its_text(words, template):
    assert len(REFERENCE) == 1_000
    # the reference is the most common version
    found = find_template([REFERENCE, REFERENCE, changed(words)])
    assert (found is not None) == template
    if template:
        assert found.spans == [(11 * i, 11 * i + 10) for i in range(words // 2)] + \
            [(11 * i, 11 * i + 10) for i in range(91 - (words - words // 2), 91)]


def test_prompts_with_no_word_in_common_are_not_versions():
    """Three system prompts of 600 words each, no word shared (only the spaces between them): no template. (Aligned
    word by word, they took seconds; 1,500 words, minutes.)"""
    prompts = [" ".join(f"{name}{i % 50}" for i in range(600)) for name in ("alpha", "beta", "gamma")]
    assert find_template(prompts) is None


def test_versions_held_as_changes_of_the_first_read_back_whole():
    """The span proposals hold a block's versions as what each changes of the first one seen (a fleet's
    thousands of versions of a system prompt are never held together); each reads back as it was, whatever
    it shares with the first: nothing, all of it, a repeated letter at the seam, or more or less text."""
    from kvprobe.whatif.propose_content import _Texts

    versions = ["Today is 2026-12-05. Be brief.", "Today is 2026-12-06. Be brief.", "", "Today is", "aXa", "aa",
                "Today is 2026-12-05. Be brief.", "Be brief.", "Today is 2026-12-05. Be brief. And kind.",
                "zzz", "Today is 2026-12-05. Be brief.Be brief."]
    texts = _Texts()
    for body, text in enumerate(versions):
        texts.add(body, text)
    assert [texts[body] for body in range(len(versions))] == versions
    assert list(texts.items()) == list(enumerate(versions)) and 3 in texts and 99 not in texts


def test_a_template_of_versions_read_one_at_a_time_is_the_template_of_the_list():
    """`template_of` (versions by key, each text fetched when compared) finds what `find_template` finds of
    the list: the same reference (the most sent), spans and the split of every version."""
    from kvprobe.analysis.spans import template_of

    versions = [changed(4), REFERENCE, changed(2), changed(6)]
    sent = {0: 1, 1: 3, 2: 1, 3: 2}
    whole = find_template([REFERENCE] * 3 + [changed(4), changed(2), changed(6), changed(6)])
    by_key = template_of(list(sent), versions.__getitem__, sent.__getitem__)
    assert by_key is not None and (by_key.reference, by_key.spans) == (whole.reference, whole.spans) == (
        REFERENCE, whole.spans)
    assert [by_key.split(v) for v in versions] == [whole.split(v) for v in versions]
