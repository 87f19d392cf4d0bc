"""Generate a fleet: many sessions of one agent product sharing its tools and system prompt, with breakers.

What real team logs look like (anthropics/claude-code#94815, openclaw#143017): every session resends the same
12 tools and a ~1,800-word system prompt, and every session hits the same few cache breakers:
* a volatile span inside a line: the system prompt's first sentence carries the time, set when the session
  starts and refreshed at request 5 (the rest of that line is the shared prompt);
* a pause: 6 to 7 minutes before request 9 (the 5-minute entries expire);
* a parameter flip: `tool_choice` set to `any` at request 12 and unset again at 13;
* a tool inserted mid-list (an MCP server connecting) at request 7 in every third session;
* concurrent subagents: at request 10 of every fourth session, three subagents start within 100 ms with the
  main agent's history and a repository map, each with its own task.
Sessions start `--spacing` seconds apart (default 25 minutes), so sessions could share their prefix only
through entries that outlive the gap.

Usage is what Anthropic would report, computed by this file's own model of the published rules (entries
at breakpoints, 5-minute lifetime from the start of the last request that used them, 20-position lookback,
tool_choice invalidating messages, entries readable once the writing response has begun) with its own
token count (4 characters a token): kvprobe's estimator and simulator are not used.
Usage: uv run python benchmarks/gen_fleet.py OUT.jsonl --requests 3000 [--spacing 1500] [--seed 0]
"""
from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

WORDS = ("cache prefix token agent tool result repository module function test build deploy review patch "
         "diff log trace request response session model prompt system message file error retry plan "
         "search index query schema config branch commit merge release").split()
EPH = {"type": "ephemeral"}
MODEL = "claude-sonnet-4-5"
PER_SESSION = 15
T0 = 1_790_000_000.0
TTL, LOOKBACK = 300.0, 20


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _tokens(value) -> int:
    return max(1, len(value if isinstance(value, str) else orjson.dumps(value)) // 4)


@dataclass
class _Entry:
    tokens: int
    expires: float
    readable: float


@dataclass
class AnthropicModel:
    """Entries at breakpoints keyed by the chain of block keys (tool_choice mixed in at the messages)."""

    entries: dict[tuple, _Entry] = field(default_factory=dict)

    def usage(self, body: dict, start: float, first_token: float, output: int) -> dict:
        blocks = self._blocks(body)
        keys, sizes, marks, chain, total = [], [], [], (), 0
        for key, tokens, marked in blocks:
            chain = (hash((chain, key)),)
            total += tokens
            keys.append(chain)
            sizes.append(total)
            if marked:
                marks.append(len(keys) - 1)
        read_at = -1
        for bp in marks:
            for pos in range(bp, max(bp - LOOKBACK, -1), -1):
                entry = self.entries.get(keys[pos])
                if entry and entry.expires >= start and entry.readable <= start and pos > read_at:
                    read_at = pos
                    break
        read = sizes[read_at] if read_at >= 0 else 0
        if read_at >= 0:
            self.entries[keys[read_at]].expires = start + TTL
        end = sizes[marks[-1]] if marks else 0
        for bp in marks:
            entry = self.entries.get(keys[bp])
            if entry is None or entry.expires < start:
                self.entries[keys[bp]] = _Entry(sizes[bp], start + TTL, first_token)
            else:
                entry.expires = start + TTL
        write = max(end - read, 0)
        return {"input_tokens": total - end, "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
                "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0},
                "output_tokens": output}

    @staticmethod
    def _blocks(body: dict) -> Iterator[tuple]:
        for tool in body["tools"]:
            yield ("tool", orjson.dumps(tool)), _tokens(tool), bool(tool.get("cache_control"))
        for part in body["system"]:
            yield ("system", part["text"]), _tokens(part["text"]), bool(part.get("cache_control"))
        choice = orjson.dumps(body.get("tool_choice"))
        for i, msg in enumerate(body["messages"]):
            for part in msg["content"]:
                plain = {k: v for k, v in part.items() if k != "cache_control"}
                yield ("msg", msg["role"], orjson.dumps(plain), choice if i == 0 else b""), \
                    _tokens(plain.get("text") or plain.get("content") or plain), bool(part.get("cache_control"))


@dataclass
class Product:
    """What every session of the product shares."""

    tools: list[dict]
    system: str  # "{now}" marks the volatile span inside its first line
    mcp_tool: dict
    repo_map: str


def product(rng: random.Random) -> Product:
    tools = [{"name": f"tool_{k}", "description": _text(rng, 70),
              "input_schema": {"type": "object", "properties": {"arg": {"type": "string"}}}} for k in range(12)]
    system = ("You are the coding agent of Acme; the current time is {now} and every answer you give follows "
              "the rules below. " + _text(rng, 1_800))
    mcp = {"name": "mcp__search", "description": _text(rng, 60), "input_schema": {"type": "object"}}
    return Product(tools, system, mcp, _text(rng, 6_000))


def _clock(t: float) -> str:
    minutes = int(t // 60)
    return f"2026-11-{2 + minutes // 1440:02d} {minutes // 60 % 24:02d}:{minutes % 60:02d} UTC"


def _body(p: Product, now: str, tools: list[dict], messages: list[dict], **extra) -> dict:
    msgs = [{"role": m["role"], "content": [dict(c) for c in m["content"]]} for m in messages]
    msgs[-1]["content"][-1]["cache_control"] = EPH
    return {"model": MODEL, "max_tokens": 4096, "tools": tools,
            "system": [{"type": "text", "text": p.system.format(now=now), "cache_control": EPH}],
            "messages": msgs, **extra}


def session_records(sid: int, p: Product, rng: random.Random, start: float, cache: AnthropicModel) -> list[dict]:
    out: list[dict] = []
    messages = [{"role": "user", "content": [{"type": "text", "text": _text(rng, 80)}]}]
    tools = list(p.tools)
    now, t = _clock(start), start

    def emit(rid: str, body: dict, begin: float, agent: str = "main", ttft: float = 1.5) -> None:
        usage = cache.usage(body, begin, begin + ttft, rng.randint(80, 400))
        out.append({"kvprobe": 1, "id": rid, "session": f"s{sid:05d}", "agent": agent, "provider": "anthropic",
                    "endpoint": "/v1/messages", "started_at": begin, "first_token_at": begin + ttft,
                    "finished_at": begin + ttft + 4.0, "request": body, "response": {"type": "message",
                                                                                      "usage": usage}})
    for i in range(1, PER_SESSION + 1):
        if i == 5:
            now = _clock(t)  # the prompt's clock is refreshed: the first line of system[0] changes
        if i == 7 and sid % 3 == 0:
            tools = tools[:6] + [p.mcp_tool] + tools[6:]  # an MCP server connects: a tool inserted mid-list
        extra = {"tool_choice": {"type": "any"}} if i == 12 else {}
        emit(f"s{sid:05d}-r{i:02d}", _body(p, now, tools, messages, **extra), t)
        if i == 10 and sid % 4 == 0:  # three subagents fan out together with the history and a repo map
            fan_out = {"role": "assistant", "content": [{"type": "text", "text": _text(rng, 30)}]}
            for k in range(3):
                task = messages + [fan_out,
                                   {"role": "user", "content": [{"type": "text", "text": p.repo_map},
                                                                {"type": "text", "text": _text(rng, 120)}]}]
                emit(f"s{sid:05d}-sub{k + 1}", _body(p, now, tools, task), t + 2.0 + 0.05 * k, f"explore-{k + 1}",
                     ttft=3.0)
        call = f"toolu_{sid}_{i}"
        messages = messages + [
            {"role": "assistant", "content": [{"type": "tool_use", "id": call, "name": "tool_1", "input": {"i": i}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                          "content": _text(rng, rng.randint(60, 500))}]}]
        t += rng.uniform(360, 420) if i == 8 else rng.uniform(8, 40)
    return out


def generate(path: Path, requests: int, spacing: float = 1500.0, seed: int = 0) -> int:
    """Write sessions of the fleet until `requests` main-agent requests are written; returns bytes."""
    rng = random.Random(seed)
    shared = product(rng)
    cache = AnthropicModel()
    written = 0
    with path.open("wb") as fh:
        for sid in range(-(-requests // PER_SESSION)):
            for rec in session_records(sid, shared, rng, T0 + sid * spacing, cache):
                line = orjson.dumps(rec) + b"\n"
                fh.write(line)
                written += len(line)
    return written


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--spacing", type=float, default=1500.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    size = generate(args.out, args.requests, args.spacing, args.seed)
    print(f"wrote {size / 1e6:.1f} MB to {args.out}")


if __name__ == "__main__":
    main()
