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
