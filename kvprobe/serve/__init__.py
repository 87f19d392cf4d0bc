"""`kvprobe serve`: the local engine behind the Anthropic Messages and OpenAI Chat Completions APIs.

    from kvprobe.serve import start_server
    with start_server(model="tiny-random", cache="emulate", emulate="anthropic/claude-sonnet-4-5") as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x")
        ...                                    # OpenAI: openai.OpenAI(base_url=server.base_url + "/v1")

Usage reports either what the engine really reused (`cache="engine"`) or what a provider's rules would
report for the same prompts (`cache="emulate"`), optionally on a virtual clock set per request with the
`X-Kvprobe-Clock` header. Every response also carries a `kvprobe` object with the engine's ground truth
(cached tokens, prefill/decode seconds, time to first token).
"""
from __future__ import annotations

from kvprobe.serve.server import ServerHandle, start_server
from kvprobe.serve.service import CLOCK_HEADER, ServeConfig

__all__ = ["CLOCK_HEADER", "ServeConfig", "ServerHandle", "start_server"]
