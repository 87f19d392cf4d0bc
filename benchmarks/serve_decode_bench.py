"""Decode speed through `kvprobe serve` (what `run-probe` and every SDK client see) beside the engine called
directly, each in a fresh process, in alternation.

    uv run --extra engine python benchmarks/serve_decode_bench.py
    uv run --extra engine python benchmarks/serve_decode_bench.py --rounds 5 --tokens 96

Three ways, same prompt (~4,300 tokens, cached after the first request of each process, as `run-probe`'s
requests 2 and 3), greedy, `--tokens` new tokens:
- engine: `Engine.generate` on the main thread (the engine benchmark's setting);
- serve: `start_server` (the engine built on its own loop thread, as the CLI does), Anthropic SDK, streaming;
- serve, engine loaded by the caller: `start_server(engine=Engine())`, the engine built on the main thread
  and stepped on the loop thread. With more threads holding OpenMP pools than cores, libgomp's workers sleep
  between ops; on 2 cores this ran decode 40-50% slower (the reason the CLI loads on the loop thread).
Prints milliseconds per decoded token (median of the rounds) and the ratios to the engine.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WAYS = ("engine", "serve", "serve-caller-loaded")

CHILD = r"""
import sys, time
way, tokens = sys.argv[1], int(sys.argv[2])
doc = open(sys.argv[3]).read()
question = "Retell the document above at length, section by section."
if way == "engine":
    from localengine import Engine
    engine = Engine()
    ids = engine.apply_chat_template([{"role": "user", "content": question}], system=doc)
    engine.generate(ids, max_tokens=1)
    start = time.perf_counter()
    result = engine.generate(ids, max_tokens=tokens, ignore_eos=True)
    n = len(result.token_ids)
else:
    import anthropic
    from kvprobe.serve import start_server
    kwargs = {}
    if way == "serve-caller-loaded":
        from localengine import Engine
        kwargs["engine"] = Engine()
    with start_server(cache="engine", port=0, dtype="auto", **kwargs) as handle:
        client = anthropic.Anthropic(api_key="local", base_url=handle.base_url, max_retries=0)
        body = dict(model="claude-sonnet-5", system=doc, messages=[{"role": "user", "content": question}],
                    extra_body={"temperature": 0})
        client.messages.create(max_tokens=1, **body)
        start = time.perf_counter()
        with client.messages.stream(max_tokens=tokens, **body) as stream:
            for _ in stream.text_stream:
                pass
            n = stream.get_final_message().usage.output_tokens
print(f"{(time.perf_counter() - start) / max(n, 1) * 1000:.2f} {n}")
"""


def run(way: str, tokens: int, document: Path) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, way, str(tokens), str(document)], capture_output=True,
                         text=True, cwd=ROOT, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{way} failed:\n{out.stderr[-2000:]}")
    ms, n = out.stdout.split()[-2:]
    return float(ms), int(n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--document", type=Path, default=ROOT / "examples" / "public_notes.txt")
    args = parser.parse_args()
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    started = time.perf_counter()
    for r in range(args.rounds):
        for way in WAYS:
            ms, n = run(way, args.tokens, args.document)
            times[way].append(ms)
            print(f"round {r + 1} {way:<20} {ms:6.1f} ms/token ({n} tokens)", flush=True)
    base = statistics.median(times["engine"])
    print(f"\nmedian of {args.rounds} rounds, {time.perf_counter() - started:.0f} s in all:")
    for way in WAYS:
        med = statistics.median(times[way])
        print(f"  {way:<20} {med:6.1f} ms/token  {1000 / med:5.1f} tok/s  {med / base:4.2f}x the engine")


if __name__ == "__main__":
    main()
