"""Shared fixtures: request bodies in each provider format, and a CLI runner."""
from __future__ import annotations

import copy
import json
import os
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvprobe.cli import app

ROOT = Path(__file__).resolve().parent.parent


_OWN_CACHE = pytest.StashKey[str]()  # the cache folder this run made (none when the caller named one)


_RUN_CACHE = "KVPROBE_TEST_RUN_CACHE"  # the folder a run made, as its xdist workers inherit it


def pytest_configure(config):
    # the price-dataset cache (kvprobe.pricing) goes to a folder of this run, not the user's ~/.cache; each
    # xdist worker gets one of its own (what one test keeps or counts there is not another's at that instant)
    inherited = os.environ.get("KVPROBE_CACHE_DIR")
    if inherited is None or (inherited == os.environ.get(_RUN_CACHE) and os.environ.get("PYTEST_XDIST_WORKER")):
        config.stash[_OWN_CACHE] = os.environ["KVPROBE_CACHE_DIR"] = tempfile.mkdtemp(prefix="kvprobe-test-cache-")
        if inherited is None:
            os.environ[_RUN_CACHE] = os.environ["KVPROBE_CACHE_DIR"]


def pytest_unconfigure(config):
    """The run's cache folder removed (by the run that made it, not a pytest run inside a test): left
    behind, every run and every pytest a test starts added one to the temporary folder (28,000 of them,
    which also slowed every Python started there: its first import path entry is that folder)."""
    import shutil

    folder = config.stash.get(_OWN_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get("KVPROBE_CACHE_DIR") == folder:
            del os.environ["KVPROBE_CACHE_DIR"]
        if os.environ.get(_RUN_CACHE) == folder:
            del os.environ[_RUN_CACHE]


@pytest.fixture
def fake():
    """A local fake Anthropic/OpenAI upstream speaking the real wire protocol (SSE included)."""
    from kvprobe.capture.testing import FakeProvider  # imported here: most test files never start one

    provider = FakeProvider()
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory):
    """The wheel as a user's installer gets it, built once per session (packaging and CI end-to-end tests)."""
    import shutil
    import subprocess

    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (the README's commands install it)")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([uv, "build", "--wheel", "--out-dir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (path,) = out.glob("kvprobe-*.whl")
    return path


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, [str(a) for a in args])
    return invoke


@pytest.fixture
def write_json(tmp_path):
    def write(name: str, data) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps(data))
        return path
    return write


LONG_SYSTEM = "You are a careful coding agent. " * 200  # ~1,400 tokens: above every minimum


def anthropic_body(**overrides) -> dict:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "tools": [
            {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}},
            {"name": "grep", "description": "Search", "input_schema": {"type": "object"}},
        ],
        "system": [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Fix the login bug."},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Let me look.", "signature": "sig"},
                {"type": "text", "text": "Reading the file."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "def login(): pass",
                 "cache_control": {"type": "ephemeral"}}]},
        ],
    }
    body.update(overrides)
    return copy.deepcopy(body)


def openai_chat_body(**overrides) -> dict:
    body = {
        "model": "gpt-4o",
        "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "system", "content": LONG_SYSTEM},
            {"role": "user", "content": [{"type": "text", "text": "What is in this image?"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 400}}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "file contents"},
        ],
    }
    body.update(overrides)
    return copy.deepcopy(body)


def responses_body(**overrides) -> dict:
    body = {
        "model": "gpt-5",
        "instructions": LONG_SYSTEM,
        "tools": [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}],
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Summarise the file."},
                                         {"type": "input_image", "image_url": "https://example.invalid/x.png"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "contents"},
        ],
    }
    body.update(overrides)
    return copy.deepcopy(body)


def json_spots(value):
    """Every (container, key) inside a decoded JSON value: the places a fuzz test can replace or remove."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield value, k
            yield from json_spots(v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield value, i
            yield from json_spots(v)
