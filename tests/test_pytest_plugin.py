"""The pytest plugin: a small agent runs in a pytest session of its own (pytester) against `serve --emulate`;
the `kvprobe_cache` fixture records its real SDK calls, a stable agent passes, and one that puts a clock in
its system prompt fails with a message naming the request, the changed path and the before/after text."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kvprobe.serve import start_server

pytest_plugins = ["pytester"]

AGENT = textwrap.dedent('''
    import asyncio
    import os

    import anthropic
    import openai

    # 623 characters, one token each for the served model's byte tokenizer: above claude-opus-5's minimum
    # of 512, and the whole prompt within the tiny model's 1,024-token context
    SYSTEM = ("You are a careful coding agent. Read the files before you edit them. Repository map:\\n"
              + "".join(f"src/app/m{i}.py:{i * 7}: def f{i}(a, b) -> int\\n" for i in range(14)))

    def marked(messages):
        out = [{"role": m["role"], "content": [dict(p) for p in m["content"]]} for m in messages]
        out[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        return out

    def run(clock_in_prompt=False, steps=3):
        client = anthropic.Anthropic(base_url=os.environ["KV_ANTHROPIC"], api_key="x", max_retries=0)
        messages = [{"role": "user", "content": [{"type": "text", "text": "Fix the bug."}]}]
        for step in range(steps):
            system = (f"Clock: 10:0{step}:00. " if clock_in_prompt else "") + SYSTEM
            client.messages.create(model="claude-opus-5", max_tokens=1, messages=marked(messages),
                                   system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}])
            messages += [{"role": "assistant", "content": [{"type": "text", "text": f"Step {step} done."}]},
                         {"role": "user", "content": [{"type": "text", "text": "Go on."}]}]

    async def run_openai_async():
        client = openai.AsyncOpenAI(base_url=os.environ["KV_DEEPSEEK"] + "/v1", api_key="x", max_retries=0)
        for question in ("What is 2+2?", "And 3+3?"):
            await client.chat.completions.create(model="deepseek-chat", max_tokens=1, messages=[
                {"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])
''')

TESTS = textwrap.dedent('''
    import asyncio

    from agent import run, run_openai_async

    def test_stable_agent(kvprobe_cache):
        run()
        assert len(kvprobe_cache.results) == 3
        kvprobe_cache.assert_stable(min_hit_ratio=0.8)
        kvprobe_cache.assert_no_miss(kinds=["prefix_changed"])

    def test_clock_in_the_system_prompt(kvprobe_cache):
        run(clock_in_prompt=True)
        kvprobe_cache.assert_no_miss(kinds=["prefix_changed"])

    def test_async_openai_client_is_recorded(kvprobe_cache):
        asyncio.run(run_openai_async())
        first, second = kvprobe_cache.results
        assert first.usage.cache_read_tokens == 0 and second.usage.cache_read_tokens >= 512

    def test_nothing_recorded_is_a_failure_not_a_pass(kvprobe_cache):
        kvprobe_cache.assert_stable()
''')


@pytest.fixture(scope="module")
def servers():
    with start_server(model="tiny-random", cache="emulate", emulate="anthropic/claude-opus-5", device="cpu") as a, \
            start_server(model="tiny-random", cache="emulate", emulate="deepseek/deepseek-chat", device="cpu") as d:
        yield a, d


def test_agent_tests_pass_and_a_clock_in_the_prompt_fails_naming_the_path(pytester, servers, monkeypatch):
    monkeypatch.setenv("KV_ANTHROPIC", servers[0].base_url)
    monkeypatch.setenv("KV_DEEPSEEK", servers[1].base_url)
    pytester.makepyfile(agent=AGENT, test_agent=TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--durations=0")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "*kvprobe: 2 request(s) missed the cache (prefix_changed)*",
        "*request 2 (req_*): prefix_changed at system[[]0]*a timestamp near the start of the system prompt changed*",
        "*- Clock: 10:00:00. You are a careful*",
        "*+ Clock: 10:01:00. You are a careful*",
        "*what to do (prefix_changed): keep the content before the last breakpoint byte-identical*",
    ])
    result.stdout.fnmatch_lines(["*kvprobe recorded no model call during this test*"])
    result.stdout.fnmatch_lines(["FAILED test_agent.py::test_clock_in_the_system_prompt - *",
                                 "FAILED test_agent.py::test_nothing_recorded_is_a_failure_not_a_pass - *"])
    assert "kvprobe_cache.assert_no_miss(kinds=[\"prefix_changed\"])" in result.stdout.str()  # the test's line
    assert "def _fail" not in result.stdout.str()  # kvprobe's own frames are hidden from the traceback


def test_the_plugin_is_registered_and_imports_nothing_heavy():
    """On in every pytest session of whoever installs kvprobe: it must not load the SDKs or the analysis."""
    code = ("import sys, importlib.metadata as m;"
            "ep = [e for e in m.entry_points(group='pytest11') if e.name == 'kvprobe'][0];"
            "ep.load();"
            "heavy = [n for n in ('anthropic', 'openai', 'httpx2', 'kvprobe.report', 'kvprobe.capture', 'orjson')"
            " if n in sys.modules];"
            "print(ep.value, heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "kvprobe.pytest_plugin []"
