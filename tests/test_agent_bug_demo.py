"""The README's regression demo (`AGENT_BUG=timestamp` in examples/agent.py) breaks the cache on every run.

The agent's five requests often fall within one second; a clock read to the second left most of them
identical, and the demo passed on some runs. Here an instant fake Messages API (the real SDK talks to it)
receives each run's requests as fast as the agent can send them, and every request's system prompt differs
from the one before, in its first line only, on every run.
"""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT
from fake_messages import messages_api

AGENT = ROOT / "examples" / "agent.py"


def run_agent(url: str, bug: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENT_BUG"} | {"ANTHROPIC_BASE_URL": url}
    if bug:
        env["AGENT_BUG"] = "timestamp"
    done = subprocess.run([sys.executable, str(AGENT)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_timestamp_bug_changes_every_request_of_every_run():
    for _ in range(3):
        with messages_api() as (url, bodies):
            run_agent(url, bug=True)
        systems = [b["system"][0]["text"] for b in bodies]
        assert len(systems) == 5
        assert len(set(systems)) == 5, systems  # no two requests of a run share their cached prefix
        assert all(s.startswith("Current time: ") for s in systems)
        assert len({s.split("\n", 1)[1] for s in systems}) == 1  # the rest of the prompt is unchanged


def test_without_the_bug_every_request_shares_the_system_prompt():
    with messages_api() as (url, bodies):
        run_agent(url, bug=False)
    assert len(bodies) == 5 and len({b["system"][0]["text"] for b in bodies}) == 1
