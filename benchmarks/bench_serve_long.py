"""Time to answer Claude Code-shaped requests of 20k and 200k tokens on `kvprobe serve` (accounting mode).

    flock /work/bench.lock uv run --extra engine python benchmarks/bench_serve_long.py [--window 2048]

Starts serve (the bundled model, `--emulate anthropic`), then sends, through the anthropic SDK, streamed:
a cold 20k-token request, its next turns (one exchange more each: the ledger reads the earlier prompt), one
of them with Claude Code's max_tokens 64000 (served at the reply limit), then a cold 200k-token request and
its next turn; the others asking 16 tokens.
Prints the time to the first text event and to the end, and what the kvprobe object says. The bodies are
built here: Claude Code's shape (tools, system blocks with a breakpoint, a user turn, a mid-conversation
system message), its sizes from tool descriptions and a history of exchanges. Rough on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import time

import anthropic

from kvprobe.serve import start_server

MODEL = "claude-opus-5-5"
WORDS = "read the file then edit the function and run the tests again before you commit ".split()


def _text(n_words: int, seed: int) -> str:
    return " ".join(WORDS[(i * 7 + seed) % len(WORDS)] for i in range(n_words))


def body(tokens: int, turns: int = 0) -> dict:
    """About `tokens` prompt tokens: 12 tools (~40%), the system prompt, then history exchanges."""
    tools = [{"name": f"Tool{i}", "description": _text(tokens // 40, i), "input_schema": {"type": "object"}}
             for i in range(12)]
    history = []
    for i in range(max(1, tokens // 2000)):
        history += [{"role": "user", "content": _text(300, 100 + i)},
                    {"role": "assistant", "content": _text(300, 200 + i)}]
    for i in range(turns):
        history += [{"role": "user", "content": f"and then step {i}"}, {"role": "assistant", "content": "done"}]
    return {"model": MODEL, "max_tokens": 64000,
            "system": [{"type": "text", "text": "You are a Claude agent."},
                       {"type": "text", "text": _text(1500, 7), "cache_control": {"type": "ephemeral"}}],
            "tools": tools,
            "messages": [*history, {"role": "user", "content": [
                {"type": "text", "text": "Fix the failing test.", "cache_control": {"type": "ephemeral"}}]},
                {"role": "system", "content": "# Environment\n - cwd: /work"}]}


def ask(client: anthropic.Anthropic, request: dict, max_tokens: int) -> dict:
    start = time.perf_counter()
    first = None
    with client.messages.stream(**{**request, "max_tokens": max_tokens}) as stream:
        for event in stream:
            if first is None and event.type == "content_block_delta":
                first = time.perf_counter() - start
        final = stream.get_final_message()
    usage = final.usage
    return {"prompt_tokens": usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens,
            "cache_read": usage.cache_read_input_tokens, "output_tokens": usage.output_tokens,
            "first_text_s": round(first or 0.0, 2), "total_s": round(time.perf_counter() - start, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=int, default=2048)
    args = parser.parse_args()
    started = time.perf_counter()
    with start_server(cache="emulate", emulate="anthropic", dtype="auto", model_window=args.window) as server:
        print(f"serve started in {time.perf_counter() - started:.1f} s (model window {args.window})")
        client = anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0, timeout=900)
        runs = [("20k cold", body(20_000), 16), ("20k next turn", body(20_000, 1), 16),
                ("20k turn after, max_tokens 64000 (served at the reply limit)", body(20_000, 2), 64000),
                ("200k cold", body(200_000), 16), ("200k next turn", body(200_000, 1), 16)]
        for name, request, max_tokens in runs:
            print(f"{name}:", json.dumps(ask(client, request, max_tokens)), flush=True)


if __name__ == "__main__":
    main()
