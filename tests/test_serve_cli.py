"""`kvprobe serve` on the command line: options are checked before the model loads; DeepSeek emulation."""
from __future__ import annotations

import openai

from kvprobe.serve import start_server


def test_unknown_emulation_target_is_a_usage_error(cli):
    result = cli("serve", "--model", "tiny-random", "--emulate", "acme/acme-1")  # (gemini is emulated now)
    assert result.exit_code == 2 and "unknown provider 'acme'" in result.output
    result = cli("serve", "--cache", "maybe")
    assert result.exit_code == 2 and "--cache" in result.output


def test_unknown_model_is_a_usage_error(cli):
    result = cli("serve", "--model", "no-such-model", "--port", "0")
    assert result.exit_code == 2 and "no-such-model" in result.output


def test_deepseek_emulation_reports_hit_and_miss_tokens():
    with start_server(model="tiny-random", cache="emulate", emulate="deepseek/deepseek-chat", clock="virtual",
                      device="cpu", num_blocks=512) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
        messages = [{"role": "system", "content": "Answer in one word. " * 20}, {"role": "user", "content": "Why?"}]

        def usage(at: float):
            return client.chat.completions.create(model="deepseek-chat", max_tokens=2, messages=messages,
                                                  extra_headers={"X-Kvprobe-Clock": str(at)}).usage
        assert usage(1000).model_extra["prompt_cache_hit_tokens"] == 0
        second = usage(1010)
        hit, miss = second.model_extra["prompt_cache_hit_tokens"], second.model_extra["prompt_cache_miss_tokens"]
        assert hit > 0 and hit % 64 == 0 and hit + miss == second.prompt_tokens
