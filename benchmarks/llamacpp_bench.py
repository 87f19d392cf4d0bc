"""kvprobe's engine beside llama.cpp (llama-cpp-python) on the same GGUF, threads and prompts, interleaved.

    uv run python benchmarks/llamacpp_bench.py                 # 5 rounds, 2 threads
    uv run python benchmarks/llamacpp_bench.py --rounds 3 --dtype float32

llama-cpp-python is not a dependency (building it takes about an hour on 2 cores). Install it into the
environment when you want this comparison, e.g.
    CMAKE_ARGS="-DGGML_NATIVE=ON" uv pip install llama-cpp-python
Without it this script says so and exits 0.

Each round runs, for both engines in turn (so load from other processes hits both alike):
- prefill of 512 and 2,048 random tokens from nothing;
- decode of 128 greedy tokens after a 2,048-token prompt (time from the first to the last new token);
- first token of a 4,096-token prompt whose first 3,840 tokens are cached, and the same prompt cold.
Medians over rounds are printed with kvprobe ÷ llama.cpp ratios (time per task: below 1 means kvprobe is
faster). Targets (issue 18): decode ≤ 1.5x llama.cpp's time; prefill ≥ 1.5x faster; cached ≥ 9x cold.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import statistics
import sys
import time

VOCAB_LOW = 17  # SmolLM2's special tokens come first


def ids(n: int, seed: int, vocab: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(VOCAB_LOW, vocab) for _ in range(n)]


class Ours:
    def __init__(self, dtype: str, threads: int, decode_weights: str = "auto") -> None:
        import torch

        from localengine import Engine

        torch.set_num_threads(threads)
        self.engine = Engine(device="cpu", dtype=dtype, decode_weights=decode_weights)
        self.vocab = self.engine.model_config.vocab_size
        self.label = f"kvprobe ({self.engine.kernels})"

    def prefill(self, prompt: list[int]) -> float:
        start = time.perf_counter()
        self.engine.logits(prompt, use_prefix_cache=False)
        return time.perf_counter() - start

    def decode(self, prompt: list[int], new: int) -> tuple[float, list[int]]:
        result = self.engine.generate(prompt, max_tokens=new + 1, ignore_eos=True)
        return result.decode_seconds, result.token_ids

    def cached(self, shared: list[int], suffix: list[int]) -> float:
        self.engine.clear_cache()
        self.engine.logits(shared + suffix[:1])  # publish the shared prefix
        start = time.perf_counter()
        out = self.engine.logits(shared + suffix)
        assert out.num_cached_tokens >= len(shared) - self.engine.block_manager.block_size
        return time.perf_counter() - start


class LlamaCpp:
    def __init__(self, path: str, threads: int, n_ctx: int) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                         n_batch=512, verbose=False)
        self.label = "llama.cpp"

    def _eval(self, tokens: list[int], keep: int = 0) -> None:
        self.llm.n_tokens = keep  # eval() drops the KV past n_tokens, then extends it
        self.llm.eval(tokens)

    def prefill(self, prompt: list[int]) -> float:
        start = time.perf_counter()
        self._eval(prompt)
        return time.perf_counter() - start

    def _next(self) -> int:
        """Greedy token from the last evaluated position (llama-cpp-python >= 0.3 keeps `scores` only with
        logits_all, so the logits are read from the context)."""
        import numpy as np

        logits = np.ctypeslib.as_array(self.llm._ctx.get_logits_ith(-1), shape=(self.llm.n_vocab(),))
        return int(np.argmax(logits))

    def decode(self, prompt: list[int], new: int) -> tuple[float, list[int]]:
        self._eval(prompt)
        token = self._next()
        out = [token]
        start = time.perf_counter()
        for _ in range(new):
            self.llm.eval([token])
            token = self._next()
            out.append(token)
        return time.perf_counter() - start, out

    def cached(self, shared: list[int], suffix: list[int]) -> float:
        self._eval(shared)
        start = time.perf_counter()
        self._eval(suffix, keep=len(shared))
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="auto", help="kvprobe's engine dtype (default: its fast path)")
    parser.add_argument("--also-decode-weights", choices=("int4", "int8", "dense"), action="append", default=[],
                        help="also time the engine with its single-token steps reading these weights (repeatable)")
    args = parser.parse_args()
    if importlib.util.find_spec("llama_cpp") is None:
        print("llama-cpp-python is not installed: comparison skipped. Install it (about an hour to build on 2 "
              "cores): CMAKE_ARGS=\"-DGGML_NATIVE=ON\" uv pip install llama-cpp-python")
        return 0
    from localengine.loader import default_model_path

    ours = Ours(args.dtype, args.threads)
    peer = LlamaCpp(str(default_model_path()), args.threads, n_ctx=8192)
    vocab = ours.vocab
    p512, p2048 = ids(512, 512, vocab), ids(2048, 2048, vocab)
    shared, suffix = ids(3840, 1, vocab), ids(256, 2, vocab)
    engines = {"ours": ours, "peer": peer}
    for choice in args.also_decode_weights:
        engines[f"ours, {choice} decode"] = Ours(args.dtype, args.threads, decode_weights=choice)
    times: dict[str, dict[str, list[float]]] = {k: {} for k in engines}
    agree: list[int] = []
    for r in range(args.rounds):
        for name, eng in engines.items():
            t = times[name]
            t.setdefault("prefill 512", []).append(eng.prefill(p512))
            t.setdefault("prefill 2,048", []).append(eng.prefill(p2048))
            seconds, tokens = eng.decode(p2048, 128)
            t.setdefault("decode 128 after 2,048", []).append(seconds)
            t.setdefault("first token, 3,840 of 4,096 cached", []).append(eng.cached(shared, suffix))
            t.setdefault("first token, 4,096 cold", []).append(eng.prefill(shared + suffix))
            if name == "ours":
                ours_tokens = tokens
            elif name == "peer":
                agree.append(next((i for i, (a, b) in enumerate(zip(ours_tokens, tokens)) if a != b), len(tokens)))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    load = os.getloadavg()
    print(f"medians of {args.rounds} interleaved rounds, {args.threads} threads, same GGUF "
          f"({os.path.basename(str(default_model_path()))}); load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"{'task':<38} {ours.label:>32} {'llama.cpp':>11} {'kvprobe ÷ llama.cpp':>20}")
    for task in times["ours"]:
        a, b = statistics.median(times["ours"][task]), statistics.median(times["peer"][task])
        print(f"{task:<38} {a:>30.2f} s {b:>9.2f} s {a / b:>19.2f}x")
    for extra in [k for k in times if k not in ("ours", "peer")]:
        a, b = statistics.median(times[extra]["decode 128 after 2,048"]), statistics.median(times["peer"]["decode 128 after 2,048"])
        print(f"{'decode 128 after 2,048 (' + extra + ')':<38} {a:>30.2f} s {b:>9.2f} s {a / b:>19.2f}x")
    dec_a = statistics.median(times["ours"]["decode 128 after 2,048"])
    dec_b = statistics.median(times["peer"]["decode 128 after 2,048"])
    print(f"decode: kvprobe {128 / dec_a:.1f} tok/s, llama.cpp {128 / dec_b:.1f} tok/s (target: ≤ 1.5x llama.cpp's time)")
    for name, label in (("ours", "kvprobe"), ("peer", "llama.cpp")):
        cold = statistics.median(times[name]["first token, 4,096 cold"])
        warm = statistics.median(times[name]["first token, 3,840 of 4,096 cached"])
        print(f"cached first token, {label}: {cold / warm:.1f}x faster than cold (target ≥ 9x)")
    print(f"greedy continuations agree for the first {min(agree)} of 129 tokens (worst round)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
