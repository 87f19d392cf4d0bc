"""`kvprobe serve` under load: 8 clients sharing a 2k-token prefix, together vs one at a time.

    uv run python benchmarks/bench_serve.py                         # SmolLM2-135M, CPU float32
    uv run python benchmarks/bench_serve.py --model tiny-random     # the protocol path only
    uv run python benchmarks/bench_serve.py --device cuda --dtype bfloat16

Each client sends the same ~2,048-token system prompt (a cache breakpoint on it) and its own question through
the official Anthropic SDK, streaming, and reads the time to first token from the first text delta. Both runs
start from an empty cache. Target (the team's performance targets): aggregate prefill tokens/s with 8 concurrent
clients >= 3x one at a time. Prefill tokens/s counts every prompt token served (cached or computed).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import time

import anthropic

from kvprobe.serve import start_server

PREFIX_TOKENS = 2048


def shared_prefix(client: anthropic.Anthropic, model: str, target: int) -> str:
    """A system prompt of about `target` tokens for this model's tokenizer."""
    unit = "The agent reads each file before it edits it, runs the tests, and reports what changed. "

    def tokens(text: str) -> int:
        return client.messages.count_tokens(model=model, system=text,
                                            messages=[{"role": "user", "content": "x"}]).input_tokens
    per_unit = tokens(unit * 11) - tokens(unit)  # ten units
    return unit * max(1, round(target * 10 / per_unit))


def one(client: anthropic.Anthropic, system: str, i: int, max_tokens: int) -> dict:
    start = time.perf_counter()
    first = None
    with client.messages.stream(model="claude-sonnet-4-6", max_tokens=max_tokens,
                                system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
                                messages=[{"role": "user", "content": f"Question {i}: what should I check first?"}],
                                extra_body={"temperature": 0}) as stream:
        for event in stream:
            if first is None and event.type == "content_block_delta":
                first = time.perf_counter()
        msg = stream.get_final_message()
    end = time.perf_counter()
    u = msg.usage
    return {"ttft": (first or end) - start, "seconds": end - start, "output": u.output_tokens,
            "prompt": u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens,
            "cached": u.cache_read_input_tokens}


def run(handle, client, system: str, clients: int, concurrent: bool, max_tokens: int, prewarm: bool) -> dict:
    handle.clear_cache()
    if prewarm:  # the shared prefix is already cached: only batching differs between the two runs
        one(client, system, -1, 0)
    start = time.perf_counter()
    if concurrent:
        with concurrent_pool(clients) as pool:
            results = list(pool.map(lambda i: one(client, system, i, max_tokens), range(clients)))
    else:
        results = [one(client, system, i, max_tokens) for i in range(clients)]
    wall = time.perf_counter() - start
    ttfts = sorted(r["ttft"] for r in results)
    return {"wall": wall, "prompt_tps": sum(r["prompt"] for r in results) / wall,
            "output_tps": sum(r["output"] for r in results) / wall, "ttft_p50": statistics.median(ttfts),
            "ttft_max": ttfts[-1], "cached": sum(r["cached"] for r in results),
            "prompt": sum(r["prompt"] for r in results)}


def concurrent_pool(n: int) -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    with start_server(model=args.model, cache="engine", device=args.device, dtype=args.dtype,
                      num_blocks=2048) as handle:
        client = anthropic.Anthropic(base_url=handle.base_url, api_key="x", max_retries=0, timeout=600)
        prefix = min(PREFIX_TOKENS, handle.state.context_tokens // 2)  # the tiny model's context is short
        system = shared_prefix(client, args.model, prefix)
        one(client, system, -1, 2)  # warm up the code paths (not the cache: each run clears it)
        runs = {(warm, together): run(handle, client, system, args.clients, together, args.max_tokens, warm)
                for warm in (False, True) for together in (False, True)}
    print(f"serve: {args.clients} clients, {prefix}-token shared prefix, {args.max_tokens}-token replies, "
          f"{args.model} on {args.device} {args.dtype}")
    for warm in (False, True):
        print("  from an empty cache:" if not warm else "  with the shared prefix already cached:")
        serial, together = runs[(warm, False)], runs[(warm, True)]
        for name, r in (("one at a time", serial), (f"{args.clients} concurrent", together)):
            print(f"  {name:>16}: wall {r['wall']:6.2f} s  prompt {r['prompt_tps']:8.0f} tok/s  output "
                  f"{r['output_tps']:6.1f} tok/s  TTFT p50 {r['ttft_p50']:.3f} s max {r['ttft_max']:.3f} s  "
                  f"cached {r['cached']:,}/{r['prompt']:,}")
        ratio = together["prompt_tps"] / serial["prompt_tps"]
        print(f"    aggregate prefill tokens/s, concurrent vs one at a time: {ratio:.2f}x (target >= 3x)"
              f"{'' if ratio >= 3 else '  BELOW TARGET'}; output tokens/s "
              f"{together['output_tps'] / serial['output_tps']:.2f}x")


if __name__ == "__main__":
    main()
