"""Emulated provider usage on a virtual clock: Anthropic breakpoints, minimum length, lookback, TTL and
readability; OpenAI's minimum and 128-token steps; DeepSeek's 64-token units. Token counts are the served
prompt's (the tiny model's byte-level tokenizer, 1,024-token context)."""
from __future__ import annotations

import anthropic
import openai
import pytest

from conftest import ROOT
from kvprobe.serve import start_server

MODEL = "claude-opus-5"  # minimum cacheable prefix: 512 tokens
LONG = "You are a careful coding agent. Read the files before you edit them. " * 9  # ~620 byte tokens
T0 = 1_800_000_000.0


@pytest.fixture(scope="module")
def server():
    with start_server(model="tiny-random", cache="emulate", emulate="anthropic", clock="virtual",
                      device="cpu", num_blocks=2048) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)


def call(client, at: float, system: str = LONG, messages=None, ttl: str | None = None, **extra):
    marker = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    reply = client.messages.create(
        model=MODEL, max_tokens=2, system=[{"type": "text", "text": system, "cache_control": marker}],
        messages=messages or [{"role": "user", "content": "Go on."}],
        extra_headers={"X-Kvprobe-Clock": str(at)}, **extra)
    u = reply.usage
    return u.input_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens


def test_write_then_read_with_exact_counts(client):
    total = client.messages.count_tokens(model=MODEL, system=[{"type": "text", "text": LONG + "a"}],
                                         messages=[{"role": "user", "content": "Go on."}]).input_tokens
    fresh, write, read = call(client, T0, LONG + "a")
    assert read == 0 and write > 512 and fresh + write == total
    assert call(client, T0 + 10, LONG + "a") == (fresh, 0, write)


def test_below_the_minimum_nothing_is_cached_and_no_error(client):
    short = "Be brief."
    assert call(client, T0, short)[1:] == (0, 0)
    assert call(client, T0 + 10, short)[1:] == (0, 0)


def test_ttl_five_minutes_refreshed_by_each_read(client):
    system = LONG + "ttl"
    _, write, _ = call(client, T0, system)
    assert call(client, T0 + 299, system)[2] == write  # read: the lifetime restarts at T0 + 299
    assert call(client, T0 + 299 + 299, system)[2] == write
    assert call(client, T0 + 598 + 301, system)[1:] == (write, 0)  # expired: written again


def test_one_hour_ttl(client):
    system = LONG + "hour"
    _, write, _ = call(client, T0, system, ttl="1h")
    reply = client.messages.create(model=MODEL, max_tokens=2, extra_headers={"X-Kvprobe-Clock": str(T0 + 3000)},
                                   system=[{"type": "text", "text": system,
                                            "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
                                   messages=[{"role": "user", "content": "Go on."}])
    assert reply.usage.cache_read_input_tokens == write
    fresh = call(client, T0 + 9000, system, ttl="1h")
    assert fresh[2] == 0


def test_requests_started_together_all_miss(client):
    system = LONG + "together"
    first = call(client, T0, system)
    second = call(client, T0, system)  # started before the first response began
    assert first[2] == second[2] == 0 and second[1] == first[1]
    assert call(client, T0 + 5, system)[2] == first[1]


def _turns(n: int, start: int = 0) -> list[dict]:
    return [{"type": "text", "text": f"note {i}: ok"} for i in range(start, start + n)]


@pytest.mark.parametrize("new_blocks, reads", [(19, True), (20, False)])
def test_lookback_window_of_twenty_blocks(client, new_blocks, reads):
    base = [{"type": "text", "text": LONG + str(new_blocks)}] + _turns(4)
    marked = base[:-1] + [{**base[-1], "cache_control": {"type": "ephemeral"}}]
    first = call(client, T0, "Be brief.", messages=[{"role": "user", "content": marked}])
    assert first[1] > 512
    more = _turns(new_blocks, 5)
    more[-1]["cache_control"] = {"type": "ephemeral"}
    later = call(client, T0 + 10, "Be brief.", messages=[{"role": "user", "content": base + more}])
    # The earlier breakpoint's block is position new_blocks + 1 counting back from the new breakpoint
    # (its own block is position 1): 20 is inside the window, 21 is not, and then nothing is read.
    if reads:
        assert later[2] == first[1]
    else:
        assert later[2] == 0 and later[1] > first[1]


@pytest.fixture(scope="module")
def openai_server(tmp_path_factory):
    """The tiny model's 1,024-token context cannot hold a prompt over OpenAI's 1,024-token minimum, so this
    server reads a copy of the rules catalog with the minimum at 512 (rules are data: the 128-token step,
    retention and matching are the shipped ones)."""
    catalog = tmp_path_factory.mktemp("providers")
    for path in (ROOT / "providers").glob("*.toml"):
        text = path.read_text()
        if path.name == "openai.toml":
            assert "[rules.min_cacheable_tokens]\nvalue = 1024" in text
            text = text.replace("[rules.min_cacheable_tokens]\nvalue = 1024", "[rules.min_cacheable_tokens]\nvalue = 512")
        (catalog / path.name).write_text(text)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KVPROBE_PROVIDERS_DIR", str(catalog))
        with start_server(model="tiny-random", cache="emulate", emulate="openai/gpt-4o", clock="virtual",
                          device="cpu", num_blocks=1024) as handle:
            yield handle


def test_openai_cached_tokens_follow_the_128_token_rule(openai_server):
    client = openai.OpenAI(base_url=openai_server.base_url + "/v1", api_key="x", max_retries=0)

    def cached(at: float, messages: list[dict]) -> tuple[int, int]:
        r = client.chat.completions.create(model="gpt-4o", max_tokens=2, messages=messages,
                                           extra_headers={"X-Kvprobe-Clock": str(at)})
        return r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens
    history = [{"role": "system", "content": LONG}, {"role": "user", "content": "First question?"}]
    total, hit = cached(T0, history)
    assert hit == 0
    total, hit = cached(T0 + 5, history)
    assert hit % 128 == 0 and total - 128 - 16 < hit < total  # all but the assistant prompt, rounded down
    longer = history + [{"role": "assistant", "content": "Answer."}, {"role": "user", "content": "More?"}]
    total2, hit2 = cached(T0 + 10, longer)
    assert hit2 % 128 == 0 and total - 128 < hit2 <= total  # the shared history, rounded down
    short = [{"role": "user", "content": "short prompt"}]
    cached(T0, short)
    assert cached(T0 + 5, short)[1] == 0  # under the minimum: never cached
    assert cached(T0 + 10 + 601, longer)[1] == 0  # retention (in memory, ~10 min) ran out


def test_cache_diagnostics_name_what_changed(client):
    def ask(at: float, system: str, user: str, previous: str | None, tools=None):
        return client.messages.create(
            model=MODEL, max_tokens=2, system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": user}], tools=tools or [], diagnostics={"previous_message_id": previous},
            extra_headers={"X-Kvprobe-Clock": str(at)})
    first = ask(T0, LONG + "diag", "Hi", None)
    assert first.diagnostics is None
    same = ask(T0 + 5, LONG + "diag", "Hi", first.id)
    assert same.diagnostics is None and same.usage.cache_read_input_tokens > 0
    changed = ask(T0 + 10, "Today is Friday. " + LONG + "diag", "Hi", first.id)
    reason = changed.diagnostics.cache_miss_reason
    assert reason.type == "system_changed"
    assert reason.cache_missed_input_tokens == first.usage.cache_creation_input_tokens
    tools = [{"name": "grep", "description": "Search", "input_schema": {"type": "object"}}]
    assert ask(T0 + 15, LONG + "diag", "Hi", first.id, tools).diagnostics.cache_miss_reason.type == "tools_changed"
    assert ask(T0 + 20, LONG + "diag", "Hi", "msg_unknown").diagnostics.cache_miss_reason.type == \
        "previous_message_not_found"
