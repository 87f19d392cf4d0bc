"""Cache assertions in an agent repository's own test suite, spending nothing: the agent (examples/agent.py)
runs against `kvprobe serve --emulate`, and the `kvprobe_cache` fixture (on once kvprobe is installed)
records its SDK calls and checks them with kvprobe's analysis.

    uv run kvprobe serve --emulate anthropic/claude-opus-5 --port 8089 &
    ANTHROPIC_BASE_URL=http://127.0.0.1:8089 uv run pytest examples/test_agent_cache.py

Without ANTHROPIC_BASE_URL the fixture below starts the same server in-process (needs `kvprobe[engine]`).
Break the agent (AGENT_BUG=timestamp puts the clock at the top of its system prompt) and the test fails with
kvprobe's diagnosis: which request missed, at which path (system[0]), what changed, and what to do.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import agent  # noqa: E402  (examples/agent.py: a scripted five-step coding agent on the Anthropic SDK)


@pytest.fixture(scope="module")
def api_base_url():
    if os.environ.get("ANTHROPIC_BASE_URL"):
        yield os.environ["ANTHROPIC_BASE_URL"]
        return
    from kvprobe.serve import start_server

    with start_server(cache="emulate", emulate="anthropic/claude-opus-5") as server:
        yield server.base_url


def test_agent_keeps_its_prompt_cache(api_base_url, kvprobe_cache, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api_base_url)
    agent.main()
    # every request after the first reads at least 80% of its input from cache ...
    kvprobe_cache.assert_stable(min_hit_ratio=0.8)
    # ... and none lost cached tokens to a change in its prefix or its parameters
    kvprobe_cache.assert_no_miss(kinds=["prefix_changed", "params_changed"])
