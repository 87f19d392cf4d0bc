"""Generate a synthetic agent trace: sessions whose requests resend tools + system + a growing history.

Shape follows the team's reference trace: sessions of 14 requests, each repeating the session's history, with tool
results of a few thousand tokens. Usage is Anthropic-shaped so `report` has observed figures to compare.
Usage: uv run python benchmarks/gen_trace.py OUT.jsonl --mb 100
       uv run python benchmarks/gen_trace.py OUT.jsonl --fleet 3000   (a fleet: benchmarks/gen_fleet.py)

These sessions share nothing and have no misses: they measure reading and simulating only. A fleet — many
sessions of one product sharing tools and system, each with breakers — is what the what-if is measured on.
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

import orjson

WORDS = ("the quick brown fox jumps over a lazy dog while parsing json logs and fixing flaky tests in "
         "a large repository with many modules functions classes and comments").split()


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def session_records(session: int, rng: random.Random, requests: int, start: float,
                    result_words: tuple[int, int] = (500, 4000)):
    tools = [{"name": f"tool_{i}", "description": _text(rng, 60), "input_schema": {"type": "object"}}
             for i in range(12)]
    system = [{"type": "text", "text": _text(rng, 2500), "cache_control": {"type": "ephemeral"}}]
    messages: list[dict] = [{"role": "user", "content": _text(rng, 80)}]
    t = start
    for i in range(requests):
        for m in messages:
            if isinstance(m["content"], list):
                for part in m["content"]:
                    part.pop("cache_control", None)
        if isinstance(messages[-1]["content"], list):
            messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        body = {"model": "claude-sonnet-4-5", "max_tokens": 4096, "tools": tools, "system": system,
                "messages": messages}
        history = sum(len(orjson.dumps(m)) for m in messages) // 4
        usage = {"input_tokens": 50, "cache_read_input_tokens": 4000 + history if i else 0,
                 "cache_creation_input_tokens": 900 if i else 4000 + history, "output_tokens": 300}
        yield {"kvprobe": 1, "id": f"s{session}-r{i}", "session": f"s{session}", "agent": "main",
               "started_at": t, "first_token_at": t + 1.5, "finished_at": t + 6.0, "request": body,
               "response": {"usage": usage}}
        t += rng.uniform(8, 40)
        call = f"toolu_{session}_{i}"
        messages = messages + [
            {"role": "assistant", "content": [{"type": "text", "text": _text(rng, 40)},
                                              {"type": "tool_use", "id": call, "name": "tool_1", "input": {"q": i}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                          "content": _text(rng, rng.randint(*result_words))}]}]


def generate(out: Path, megabytes: float, requests_per_session: int = 14, seed: int = 0,
             max_requests: int | None = None, result_words: tuple[int, int] = (500, 4000)) -> int:
    """Write sessions until the file reaches `megabytes` (or `max_requests` requests); returns bytes written."""
    rng = random.Random(seed)
    limit = int(megabytes * 1_000_000)
    written, session, count = 0, 0, 0
    with out.open("wb") as fh:
        while written < limit and (max_requests is None or count < max_requests):
            for rec in session_records(session, rng, requests_per_session, 1_757_498_875.0 + session * 3600,
                                       result_words):
                if max_requests is not None and count >= max_requests:
                    break
                line = orjson.dumps(rec) + b"\n"
                fh.write(line)
                written += len(line)
                count += 1
            session += 1
    return written


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--fleet", type=int, metavar="REQUESTS", help="write a fleet of this many requests instead")
    args = parser.parse_args()
    if args.fleet:
        from gen_fleet import generate as fleet

        size = fleet(args.out, args.fleet)
    else:
        size = generate(args.out, args.mb)
    print(f"wrote {size / 1e6:.1f} MB to {args.out}")


if __name__ == "__main__":
    main()
