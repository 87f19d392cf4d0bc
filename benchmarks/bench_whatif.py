"""Default `report` (what-if fixes on) on multi-session traces of 300 / 600 / 3,000 requests: time per request.

Target (issue 14): 3,000 requests in < 15 s here, and time per request flat from 300 to 3,000 (within 1.5x).
Each session of 14 requests has the misses fixes are proposed for: a timestamp line in the system prompt that
changes mid-session, a 7-minute pause, and a tool_choice flip and back. Sessions come in groups of four that
share tools and system prompt and start 10 minutes apart (one cache segment per group), so pricing a fix
must re-simulate the group, never the whole trace. Sizes are interleaved, three runs each, median reported.
Usage: uv run python benchmarks/bench_whatif.py [--requests 300 600 3000] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

WORDS = ("cache prefix token agent tool result repository module function test build deploy review patch "
         "diff log trace request response session model prompt system message").split()
GROUP, PER_SESSION = 4, 14


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _session(sid: int, rng: random.Random, start: float, tools: list, system: str):
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": _text(rng, 60)}]}]
    t = start
    for i in range(PER_SESSION):
        stamp = "10:00" if i < 5 else "10:05"  # the system prompt's clock line changes once, mid-session
        for m in messages:
            for part in m["content"]:
                part.pop("cache_control", None)
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        system_block = {"type": "text", "text": f"{system}\nclock {stamp}", "cache_control": {"type": "ephemeral"}}
        body = {"model": "claude-sonnet-4-5", "max_tokens": 2048, "tools": tools, "system": [system_block],
                "messages": messages}
        if i == 11:
            body["tool_choice"] = {"type": "any"}
        yield {"kvprobe": 1, "id": f"s{sid}-r{i}", "session": f"s{sid}", "agent": "main", "started_at": t,
               "first_token_at": t + 1.5, "finished_at": t + 5.0, "request": orjson.loads(orjson.dumps(body))}
        t += 420.0 if i == 8 else rng.uniform(5, 30)  # one 7-minute pause: the 5-minute TTL runs out
        call = f"toolu_{sid}_{i}"
        messages = messages + [
            {"role": "assistant", "content": [{"type": "tool_use", "id": call, "name": "read", "input": {"i": i}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                          "content": _text(rng, rng.randint(150, 600))}]}]


def generate(path: Path, requests: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    sessions = -(-requests // PER_SESSION)
    with path.open("wb") as fh:
        for sid in range(sessions):
            if sid % GROUP == 0:
                tools = [{"name": f"t{sid}_{k}", "description": _text(rng, 30), "input_schema": {"type": "object"}}
                         for k in range(6)]
                system = _text(rng, 1500)
            start = 1_757_498_875.0 + (sid // GROUP) * 86_400 + (sid % GROUP) * 600
            for rec in _session(sid, rng, start, tools, system):
                fh.write(orjson.dumps(rec) + b"\n")


def run_once(path: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child): on a shared machine CPU time is the steadier figure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kvprobe", "report", str(path), "--json"], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, nargs="+", default=[300, 600, 3000])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {n: Path(tmp) / f"whatif_{n}.jsonl" for n in args.requests}
        for n, p in paths.items():
            generate(p, n)
        walls: dict[int, list[float]] = {n: [] for n in args.requests}
        cpus: dict[int, list[float]] = {n: [] for n in args.requests}
        for _ in range(args.runs):  # interleaved: load changes hit every size alike
            for n, p in paths.items():
                wall, cpu = run_once(p)
                walls[n].append(wall)
                cpus[n].append(cpu)
        first = args.requests[0]
        base = statistics.median(cpus[first]) / first
        print(f"load average {os.getloadavg()[0]:.1f}; medians of {args.runs} interleaved runs")
        for n in args.requests:
            cpu, wall = statistics.median(cpus[n]), statistics.median(walls[n])
            print(f"report (fixes on) {n:>5} requests, {paths[n].stat().st_size / 1e6:5.1f} MB: CPU {cpu:6.2f} s, "
                  f"wall {wall:6.2f} s; {1000 * cpu / n:5.2f} ms CPU/request ({cpu / n / base:.2f}x the "
                  f"{first}-request rate)")


if __name__ == "__main__":
    main()
