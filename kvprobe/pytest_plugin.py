"""kvprobe's pytest plugin (entry point `pytest11`, active wherever kvprobe is installed).

    def test_agent_keeps_its_cache(kvprobe_cache):
        run_agent()                                        # real SDK calls, e.g. to `kvprobe serve --emulate`
        kvprobe_cache.assert_stable(min_hit_ratio=0.8)
        kvprobe_cache.assert_no_miss(kinds=["prefix_changed"])

This module is imported by every pytest session of anyone who installs kvprobe, so it imports nothing
heavy: the recording machinery (SDK interception, analysis) loads only when a test uses the fixture.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kvprobe.testing import CacheRecording


@pytest.fixture
def kvprobe_cache(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CacheRecording]:
    """Records every Anthropic/OpenAI SDK call of the test (one session per test) for cache assertions:
    `assert_stable(min_hit_ratio=0.8)`, `assert_no_miss(kinds=[...])`, `hit_ratio`, `results`, `report()`."""
    from kvprobe.testing import CacheRecording

    with CacheRecording(tmp_path / "kvprobe-trace.jsonl", session=request.node.name) as recording:
        yield recording
