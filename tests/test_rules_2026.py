"""The provider rules of the December 2026 lineup, each checked against the provider's own published figure.

Expected values are the published ones (pages and dates in the rule files' `source`), written here as data.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest

from kvprobe.analysis.costing import input_equivalent
from kvprobe.catalog import load_catalog, load_platforms, rules_for
from kvprobe.model_ids import canonical_model
from kvprobe.pricing import PriceBook
from kvprobe.request import render_request
from kvprobe.request.detect import infer_platform, infer_provider
from kvprobe.sim import cache_for
from kvprobe.tokens import TokenCounter
from kvprobe.trace import TraceRecord
from kvprobe.usage import Usage, normalize_usage

# (provider, model id, family, published minimum cacheable tokens)
LINEUP = [
    ("anthropic", "claude-opus-5", "claude-opus-5", 512),
    ("anthropic", "claude-opus-5-5", "claude-opus-5-5", 512),
    ("anthropic", "claude-sonnet-5-20260630", "claude-sonnet-5", 1024),
    ("anthropic", "claude-sonnet-5-5", "claude-sonnet-5-5", 512),
    ("anthropic", "claude-fable-5", "claude-fable-5 / mythos-5", 512),
    ("anthropic", "claude-fable-5-1", "claude-fable-5-1 / mythos-5-1", 512),
    ("anthropic", "claude-mythos-5-1", "claude-fable-5-1 / mythos-5-1", 512),
    ("anthropic", "claude-mythos-preview", "claude-mythos-preview", 2048),
    ("anthropic", "claude-opus-4-8", "claude-opus-4-8", 1024),
    ("anthropic", "claude-opus-4-7", "claude-opus-4-7", 2048),
    ("anthropic", "claude-opus-4-6", "claude-opus-4-6", 4096),
    ("anthropic", "claude-opus-4-1-20250805", "claude-opus-4-1", 1024),
    ("anthropic", "claude-opus-4-20250514", "claude-opus-4", 1024),
    ("anthropic", "claude-haiku-4-5-20251001", "claude-haiku-4-5", 4096),
    ("anthropic", "claude-3-5-haiku-20241022", "claude-haiku-3-5", 2048),
    ("gemini", "gemini-4-argon", "gemini-4", 4096),
    ("gemini", "gemini-3.8-flash", "gemini-3.5+ flash", 4096),
    ("gemini", "gemini-3.1-pro-preview", "gemini-3.1-pro", 4096),
    ("gemini", "gemini-2.5-flash", "gemini-2.5-flash", 2048),
    ("gemini", "gemini-2.5-pro", "gemini-2.5-pro", 2048),
    ("openai", "gpt-5.6-sol", "gpt-5.6", 1024),
    ("openai", "gpt-6.1-terra", "gpt-6.1 / gpt-6.2", 1024),
    ("openai", "gpt-6-luna", "gpt-6", 1024),
    ("openai", "gpt-5.5", "gpt-5 .. gpt-5.5", 1024),
    ("openai", "o3-mini", "gpt-4o / o1 / o3-mini", 1024),
]


@pytest.mark.parametrize("provider, model, family, minimum", LINEUP)
def test_each_model_of_the_lineup_has_its_own_family_and_published_minimum(provider, model, family, minimum):
    rules = rules_for(provider, model)
    assert (rules.family, rules.get("min_cacheable_tokens")) == (family, minimum)
    assert rules.fallback is None


def test_a_newer_version_is_never_matched_by_an_older_familys_pattern():
    """For every versioned stem of every rule file, its next minor version (-9 / .9) is no family's model."""
    for cat in load_catalog().values():
        for fam in cat.models:
            for stem in (s for s in fam.patterns if s[-1].isdigit() and not any(c in s for c in "*?[")):
                for newer in (f"{stem}-9", f"{stem}.9"):
                    found = cat.family_for(newer)
                    assert found is None or newer in found.patterns, (newer, found and found.family)
    assert rules_for("anthropic", "claude-sonnet-5-5").family == "claude-sonnet-5-5"  # not claude-sonnet-5
    assert rules_for("openai", "gpt-5.6-terra").family == "gpt-5.6"  # not gpt-5
    unknown = rules_for("anthropic", "claude-opus-5-7")
    assert unknown.family is None and unknown.fallback == "anthropic defaults (no rule names claude-opus-5-7)"


@pytest.mark.parametrize("spelling", [
    "claude-sonnet-5-5", "anthropic/claude-sonnet-5.5", "us.anthropic.claude-sonnet-5-5-v1:0",
    "global.anthropic.claude-sonnet-5-5", "claude-sonnet-5-5@20261007", "claude-sonnet-5-5[1m]",
    "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-5-5-v1:0",
])
def test_platform_spellings_of_a_model_id_reach_its_family(spelling):
    assert infer_provider({"model": spelling}) == "anthropic"
    assert rules_for("anthropic", spelling).family == "claude-sonnet-5-5"


@pytest.mark.parametrize("model, platform, minimum", [
    ("claude-opus-4-7", None, 2048), ("us.anthropic.claude-opus-4-7-v1:0", "bedrock", 4096),
    ("claude-mythos-preview", "vertex", 2048), ("claude-mythos-preview", "bedrock", 4096),
])
def test_the_platform_is_part_of_the_lookup(model, platform, minimum):
    rules = rules_for("anthropic", model, platform)
    assert rules.get("min_cacheable_tokens") == minimum
    assert rules.get("isolation") == ("workspace" if platform is None else "organisation")


def test_a_platform_without_rules_is_named_as_a_fallback():
    rules = rules_for("anthropic", "claude-opus-5-5", "azure")
    assert rules.known_model and rules.fallback == "anthropic's own rules (no rules for the azure platform)"
    assert set(load_platforms()) == {"bedrock", "vertex", "openrouter"}


@pytest.mark.parametrize("endpoint, model, response, extra, platform", [
    ("/v1/messages", "claude-sonnet-4-5", {"id": "msg_bdrk_01WuFzkDbE9KWgiWakMRNKcA"}, {}, "bedrock"),
    ("/v1/messages", "claude-sonnet-4-5", {"id": "msg_vrtx_011CfBLyuqQKtoph9kWhiUt5"}, {}, "vertex"),
    ("/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke", None, None, {}, "bedrock"),
    ("/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict",
     None, None, {}, "vertex"),
    ("https://openrouter.ai/api/v1/chat/completions", "anthropic/claude-sonnet-4.5", None, {}, "openrouter"),
    ("/v1/messages", "claude-sonnet-4-5", {"id": "msg_01XFDUDYJgAACzvnptvVoYEL"}, {}, None),
    ("/v1/messages", "claude-sonnet-4-5", {"id": "msg_bdrk_01"}, {"platform": "azure"}, "azure"),
    ("/v1/messages", "claude-sonnet-4-5", None, {"platform": "anthropic"}, None),
])
def test_trace_records_say_which_platform_served_them(endpoint, model, response, extra, platform):
    rec = TraceRecord("r1", "anthropic", 0.0, {"model": model} if model else {"messages": []}, response,
                      endpoint=endpoint, extra=dict(extra))
    assert rec.platform == platform
    if extra:
        assert rec.to_json()["platform"] == extra["platform"]  # kept as written


def test_read_multipliers_of_the_token_saving_updates():
    # token-saving updates (2026-09-01): 0.025 on Fable/Mythos 5.1; Opus 5.5 $0.20 of $4; Sonnet 5.5 $0.10 of $2
    figures = {"claude-fable-5-1": 0.025, "claude-mythos-5-1": 0.025, "claude-opus-5-5": 0.05,
               "claude-sonnet-5-5": 0.05, "claude-opus-5": 0.1, "claude-haiku-5-5": 0.1, "claude-sonnet-4-5": 0.1}
    assert {m: rules_for("anthropic", m).get("read_multiplier") for m in figures} == figures
    assert rules_for("anthropic", "claude-sonnet-5-5").rule("read_multiplier").alternatives == (0.1,)
    usage = Usage(input_tokens=10_000, cache_read_tokens=8_000, cache_write_5m_tokens=2_000)
    assert input_equivalent(usage, rules_for("anthropic", "claude-fable-5-1")) == 8000 * 0.025 + 2000 * 1.25


NOV = dt.datetime(2026, 11, 2, 12, tzinfo=dt.timezone.utc).timestamp()
SEPT = dt.datetime(2026, 9, 20, 12, tzinfo=dt.timezone.utc).timestamp()


@pytest.mark.parametrize("model, when, usage, usd, source", [
    # Mythos 5.1 at Fable 5.1's rates (overlay): 1M reads $0.25, 1M 5m writes $12.50, 1M output $50
    ("claude-mythos-5-1", NOV, Usage(2_000_000, 1_000_000, 1_000_000, 0, 1_000_000), 0.25 + 12.5 + 50,
     "kvprobe-overlay"),
    ("claude-mythos-5", NOV, Usage(1_000_000, 1_000_000), 1.0, "kvprobe-overlay"),  # reads $1.00 before 5.1
    ("claude-sonnet-5-5", SEPT, Usage(1_000_000, 1_000_000), 0.20, "kvprobe-overlay"),  # before the cut
    ("claude-sonnet-5-5", NOV, Usage(1_000_000, 1_000_000), 0.10, "genai-prices"),  # after 2026-10-07
    ("claude-fable-5-1", NOV, Usage(1_000_000, 1_000_000), 0.25, "genai-prices"),
    ("claude-haiku-5-5", NOV, Usage(100_000, 0), 0.01, "genai-prices"),  # $0.10 / MTok up to 100,000
    ("claude-haiku-5-5", NOV, Usage(100_001, 0), 100_001 * 0.5 / 1e6, "genai-prices"),  # $0.50 above
])
def test_prices_from_genai_prices_and_the_dated_overlay(model, when, usage, usd, source):
    cost = PriceBook().cost("anthropic", model, usage, when)
    assert cost.usd == pytest.approx(usd) and cost.source == source


def test_a_platform_served_request_is_priced_at_the_platforms_list_price():
    book = PriceBook()
    usage = Usage(1_000_000, 0)
    assert book.cost("anthropic", "global.anthropic.claude-opus-5-5", usage, NOV, "bedrock").usd == pytest.approx(4.0)
    assert book.cost("anthropic", "anthropic/claude-opus-5.5", usage, NOV, "openrouter").usd == pytest.approx(4.0)
    assert book.cost("anthropic", "claude-opus-5-5@20260923", usage, NOV, "vertex").usd == pytest.approx(4.0)
    assert book.cost("qwen", "qwen3-max", usage, NOV).usd is None and "qwen3-max" in book.unknown_models


def anthropic_body(**extra) -> dict:
    eph = {"type": "ephemeral"}
    return {"model": "claude-opus-5-5", "max_tokens": 100,
            "tools": [{"name": "read", "description": "read a file", "input_schema": {"type": "object"},
                       "cache_control": eph}],
            "system": [{"type": "text", "text": "You are an agent.", "cache_control": eph}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Go.", "cache_control": eph}]}],
            **extra}


def reread(before: dict, after: dict, headers: dict | None = None) -> int:
    """Tokens the second body reads after the first wrote: tools 1,000, system 1,000, messages 1,000."""
    cache = cache_for("breakpoints")
    rules = rules_for("anthropic", "claude-opus-5-5")
    for i, body in enumerate((before, after)):
        req = render_request(body, headers=headers)
        for block in req.blocks:
            block.tokens = 1000
        pred = cache.process(req, rules, f"r{i}", i * 10.0, i * 10.0 + 1)
    return pred.cache_read_tokens


@pytest.mark.parametrize("before, after, headers, read", [
    ({}, {"speed": "fast"}, None, 1000),  # speed: system and messages lost, tools kept
    ({}, {"output_config": {"effort": "high"}}, None, 2000),  # effort: messages lost
    ({}, {"output_config": {"effort": "medium"}}, None, 3000),  # Opus 5.5's default effort: no change
    ({}, {"output_config": {"effort": "high"}}, {"anthropic-beta": "mid-conversation-output-config-2026-07-01"},
     3000),  # the beta keeps the cache through an effort change
    ({}, {"tool_choice": {"type": "auto"}}, None, 2000),
])
def test_invalidation_by_speed_and_effort(before, after, headers, read):
    assert reread(anthropic_body(**before), anthropic_body(**after), headers) == read


def test_openai_identity_parameters_from_the_api_reference():
    base = {"model": "gpt-5.6-sol", "input": "hi", "reasoning": {"effort": "low"}, "text": {"verbosity": "low"}}
    params = render_request(base).params
    assert {"reasoning.effort", "text.verbosity", "service_tier", "parallel_tool_calls"} <= set(params)
    changed = render_request({**base, "reasoning": {"effort": "high"}})
    assert changed.blocks[0].cache_key != render_request(base).blocks[0].cache_key


@pytest.mark.parametrize("provider, usage, expect", [
    # GPT-5.6 Responses: writes in input_tokens_details.cache_write_tokens
    ("openai", {"input_tokens": 9055, "output_tokens": 12,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 9055}},
     Usage(9055, 0, 9055, 0, 12)),
    # Gemini Interactions API: usage.total_cached_tokens within total_input_tokens
    ("gemini", {"total_input_tokens": 5000, "total_cached_tokens": 4096, "total_output_tokens": 20},
     Usage(5000, 4096, 0, 0, 20)),
    # Bedrock Converse: inputTokens excludes cacheRead/WriteInputTokens
    ("anthropic", {"inputTokens": 12, "outputTokens": 5, "cacheReadInputTokens": 1000,
                   "cacheWriteInputTokens": 300}, Usage(1312, 1000, 300, 0, 5)),
    # Model Studio's second-turn example: 1,524 input, 1,305 cached, 213 written (explicit cache)
    ("qwen", {"input_tokens": 1524, "output_tokens": 1, "input_tokens_details": {
        "cached_tokens": 1305, "cache_creation_input_tokens": 213, "cache_type": "ephemeral"}},
     Usage(1524, 1305, 213, 0, 1)),
    # docs.mistral.ai example: 1,013 prompt tokens, 1,008 cached
    ("mistral", {"prompt_tokens": 1013, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 1008}},
     Usage(1013, 1008, 0, 0, 30)),
])
def test_new_usage_fields(provider, usage, expect):
    assert normalize_usage(provider, usage) == expect


def test_per_generation_token_estimates_for_claude():
    ratios = {"claude-sonnet-4-5": 1.15, "claude-opus-4-7": 1.52, "claude-opus-4-8": 1.52, "claude-fable-5": 1.52,
              "claude-sonnet-5": 1.62, "claude-sonnet-5-5": 1.62}
    for model, ratio in ratios.items():
        counter = TokenCounter(rules_for("anthropic", model))
        assert counter.effective_ratio == ratio and counter.scale(1000) == round(1000 * ratio), model
    assert rules_for("anthropic", "claude-opus-4-7").rule("tokenizer").value == "claude-2026-04"


def test_canonical_ids_keep_what_distinguishes_models():
    assert canonical_model("gpt-4o-2024-08-06") == "gpt-4o-2024-08-06"
    assert canonical_model("models/gemini-2.5-pro") == "gemini-2.5-pro"
    assert canonical_model("regional.openai.gpt-6.1-sol") == "gpt-6.1-sol"
    assert rules_for("openai", "gpt-4o-2024-08-06").family == "gpt-4o / o1 / o3-mini"


def test_providers_command_shows_a_model_as_a_platform_serves_it(cli):
    [view] = json.loads(cli("providers", "claude-opus-4-7", "--platform", "bedrock", "--json").stdout)
    assert (view["platform"], view["platform_family"]) == ("bedrock", "claude-opus-4-7 (Bedrock)")
    assert view["rules"]["min_cacheable_tokens"]["value"] == 4096
    assert view["rules"]["min_cacheable_tokens"]["scope"] == "bedrock:claude-opus-4-7 (Bedrock)"
    bad = cli("providers", "claude-opus-4-7", "--platform", "nowhere")
    assert bad.exit_code == 2 and "unknown platform" in bad.output and "--platform" in bad.output


@pytest.mark.parametrize("provider, model, platform, setting", [
    ("anthropic", "claude-opus-5-5", None, '"ttl": "1h"'),
    ("anthropic", "us.anthropic.claude-opus-5-5", "bedrock", '"ttl": "1h"'),
    ("openai", "gpt-5.5", None, '"prompt_cache_retention": "24h"'),
    ("openai", "gpt-5.6-sol", None, None),  # prompt_cache_options.ttl takes only 30m
    ("openai", "gpt-6.1-terra", None, None),
    ("xai", "grok-4.7", None, None), ("mistral", "mistral-large-latest", None, None),
    ("moonshot", "kimi-k3", None, None), ("qwen", "qwen3-max", None, None),
])
def test_each_provider_names_its_own_longer_lifetime_setting_or_none(provider, model, platform, setting):
    from kvprobe.economics.keep_alive import longer_lifetime
    found = longer_lifetime(rules_for(provider, model, platform))
    assert (found["setting"].split(" on ")[0].split(" (")[0] if found else None) == setting


def test_import_notes_say_which_platforms_have_rules_of_their_own():
    from kvprobe.importers.base import platform_note
    assert platform_note("bedrock", 3) == ("3 requests served through Amazon Bedrock: ruled by providers/bedrock.toml "
                                           "and priced at its list prices where the price data has them")
    assert "a caveat" in platform_note("azure", 2)
