"""Where replay's time goes: `kvprobe replay` of a trace on the local engine beside the same prompts sent
straight to the engine, in one process, one after the other (so machine load hits both alike).

    uv run python benchmarks/replay_bench.py                          # traces/sample_session.jsonl
    uv run python benchmarks/replay_bench.py TRACE --dtype float32

Prints per request the prompt and cached tokens, replay's prefill seconds and the direct engine's, then the
totals and their ratio (target, issue 18: replay's total prefill within 1.3x of the engine's own), the
time replay spends outside the engine (rendering, tokenizing, the provider simulation), process CPU
seconds, and the load average.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", nargs="?", default=str(ROOT / "traces" / "sample_session.jsonl"))
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--limit", type=int, default=None, help="only the first N records")
    args = parser.parse_args()

    from kvprobe.replay import LocalTarget, Timing, replay_trace
    from kvprobe.replay.plan import plan
    from kvprobe.serve.prompt import build_prompt
    from kvprobe.trace import read_trace
    from localengine import Engine

    start = time.perf_counter()
    # built and stepped on the engine's own thread, as `kvprobe replay` does (see EngineLoop)
    target = LocalTarget(None, args.max_tokens, load=lambda: Engine(device="cpu", dtype=args.dtype))
    engine = target.engine
    print(f"engine loaded in {time.perf_counter() - start:.1f} s ({engine.kernels})")
    records = list(read_trace(args.trace))[: args.limit]
    cpu, wall = time.process_time(), time.perf_counter()
    report = replay_trace(records, target, timing=Timing.parse("fast"), max_tokens=args.max_tokens)
    replay_wall, replay_cpu = time.perf_counter() - wall, time.process_time() - cpu
    rows = [r.measured for r in report.baseline.rows]

    target.reset()
    direct: list[float] = []
    cpu, wall = time.process_time(), time.perf_counter()
    for item, m in zip(plan(records), rows):
        if m.status != "replayed":
            direct.append(0.0)
            continue
        ids = build_prompt(item.rendered, engine.tokenizer).token_ids[: m.prompt_tokens]
        new = max(m.output_tokens, 1)
        result = target.loop.call(lambda e, ids=ids, new=new: e.generate(ids, max_tokens=new, ignore_eos=True)).result()
        assert result.num_cached_tokens == m.cached_tokens, (item.id, result.num_cached_tokens, m.cached_tokens)
        direct.append(result.prefill_seconds)
    direct_wall, direct_cpu = time.perf_counter() - wall, time.process_time() - cpu
    target.stop()

    print(f"{'request':<10} {'prompt':>7} {'cached':>7} {'replay prefill s':>17} {'engine prefill s':>17}")
    for m, d in zip(rows, direct):
        print(f"{m.id:<10} {m.prompt_tokens:>7} {m.cached_tokens or 0:>7} {m.prefill_seconds or 0:>17.2f} {d:>17.2f}")
    a, b = sum(m.prefill_seconds or 0 for m in rows), sum(direct)
    fresh = sum(m.fresh_tokens for m in rows if m.status == "replayed")
    print(f"total prefill: replay {a:.2f} s, engine {b:.2f} s -> {a / b:.2f}x (target <= 1.3x); "
          f"{fresh:,} uncached tokens, {fresh / a:.0f} tok/s in replay")
    print(f"whole replay {replay_wall:.1f} s wall / {replay_cpu:.1f} s CPU (simulation and tokenizing included); "
          f"direct {direct_wall:.1f} s wall / {direct_cpu:.1f} s CPU; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
