"""Local engine benchmark: matmul peak, prefill throughput, cached-prefix speedup, decode, concurrency,
and the same model in Hugging Face transformers when it is importable (it is not a dependency).

    uv run python benchmarks/engine_bench.py                     # the default fast path (dtype auto)
    uv run python benchmarks/engine_bench.py --dtype float32     # the float32 reference path
    uv run python benchmarks/engine_bench.py --quick             # fewer repetitions
    uv run python benchmarks/engine_bench.py --device cuda --dtype bfloat16 --quick

Every figure is the best of a few repetitions, and figures that are compared (ours vs the matmul peak,
ours vs transformers, cold vs cached) are measured in alternation, so that load from other processes on
a shared machine hits both sides alike. Targets (issue 5 and the team's performance targets) are printed beside
each figure.
"""

from __future__ import annotations

import argparse
import os
import random
import time
import warnings

import torch

from localengine import Engine

VOCAB_LOW = 17  # skip the special tokens


def interleaved(reps: int, **fns) -> dict[str, float]:
    """Best seconds of each function, running them in turn: a, b, a, b, ..."""
    best = {name: float("inf") for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


PEAK_N = 2048


def matmul_fns(device: torch.device, dtype: torch.dtype) -> dict:
    """A 2048^3 matmul through the BLAS (and oneDNN on CPU, which the engine uses): the peak is the faster."""
    n = PEAK_N
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    fns = {"peak_blas": lambda: (a @ b, sync(device))}
    if device.type == "cpu" and dtype == torch.float32:
        packed = torch.ops.mkldnn._reorder_linear_weight(b, n)
        fns["peak_onednn"] = lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], "")
    return fns


def peak_of(best: dict[str, float]) -> tuple[float, str]:
    name, seconds = min(((k, v) for k, v in best.items() if k.startswith("peak_")), key=lambda kv: kv[1])
    return 2 * PEAK_N**3 / seconds / 1e9, name.removeprefix("peak_")


def prompt(n: int, seed: int, vocab: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(VOCAB_LOW, vocab) for _ in range(n)]


def prefill_flops(engine: Engine, n: int, cached: int = 0) -> float:
    """Decoder matmuls for the computed tokens + causal attention + the head for the last token."""
    cfg = engine.model_config
    computed = n - cached
    attention = 2 * 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * sum(range(cached + 1, n + 1))
    return 2 * computed * cfg.num_non_embedding_params + attention + 2 * cfg.vocab_size * cfg.hidden_size


def bench_prefill(engine: Engine, n: int, reps: int, peak_fns: dict, hf=None) -> float:
    """Prefill throughput, alternating with the matmul peak (and transformers, when given)."""
    ids = prompt(n, seed=n, vocab=engine.model_config.vocab_size)
    engine.logits(ids[:64], use_prefix_cache=False)  # warm-up
    fns = dict(peak_fns, ours=lambda: engine.logits(ids, use_prefix_cache=False))
    if hf is not None:
        x = torch.tensor([ids], device=engine.device)
        fns["transformers"] = lambda: (hf(x, logits_to_keep=1), sync(engine.device))
    best = interleaved(reps, **fns)
    peak, kernel = peak_of(best)
    seconds = best["ours"]
    gflops = prefill_flops(engine, n) / seconds / 1e9
    line = (
        f"prefill {n:>5} tokens: {n / seconds:6.0f} tok/s  {seconds:6.2f} s  {gflops:6.1f} GFLOP/s "
        f"= {gflops / peak:5.1%} of the matmul peak ({peak:.0f} GFLOP/s, {kernel})"
    )
    if hf is not None:
        line += f"; transformers {n / best['transformers']:6.0f} tok/s -> {best['transformers'] / seconds:.2f}x"
    print(line)
    return n / seconds


def bench_cached_prefix(engine: Engine, reps: int) -> None:
    vocab = engine.model_config.vocab_size
    shared = prompt(3840, seed=1, vocab=vocab)
    engine.generate(shared + [VOCAB_LOW], max_tokens=0)  # publish the 3,840-token prefix
    cached_tokens = []

    def warm():  # a new 256-token suffix each time: only the shared prefix can hit
        out = engine.logits(shared + prompt(256, seed=random.randrange(10**9), vocab=vocab))
        cached_tokens.append(out.num_cached_tokens)

    best = interleaved(
        max(2, reps - 1),
        cold=lambda: engine.logits(shared + prompt(256, seed=2, vocab=vocab), use_prefix_cache=False),
        warm=warm,
    )
    cold, seconds = best["cold"], best["warm"]
    print(
        f"4,096-token prompt, first token: cold {cold:.2f} s, with {cached_tokens[-1]:,} cached {seconds:.3f} s "
        f"-> {cold / seconds:.1f}x faster (targets: >= 8x issue, >= 9x team target)"
    )


def kv_bytes_read(engine: Engine, context: int) -> int:
    cfg = engine.model_config
    return cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * context * engine.dtype.itemsize


def weight_bytes(engine: Engine) -> int:
    cfg = engine.model_config
    head = cfg.vocab_size * cfg.hidden_size * (1 if "int8 head" in engine.kernels else engine.dtype.itemsize)
    return cfg.num_non_embedding_params * engine.dtype.itemsize + head


def hf_decode_seconds(model, ids: list[int], new_tokens: int, device: torch.device) -> float:
    x = torch.tensor([ids], device=device)
    out = model(x, use_cache=True, logits_to_keep=1)
    cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    sync(device)
    start = time.perf_counter()
    for _ in range(new_tokens):
        out = model(token, past_key_values=cache, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    sync(device)
    return time.perf_counter() - start


def bench_decode(engine: Engine, context: int, new_tokens: int, reps: int, hf=None) -> None:
    ids = prompt(context, seed=3, vocab=engine.model_config.vocab_size)
    best = {"ours": float("inf"), "transformers": float("inf")}
    for _ in range(reps):
        result = engine.generate(ids, max_tokens=new_tokens + 1, ignore_eos=True)
        best["ours"] = min(best["ours"], result.decode_seconds)
        if hf is not None:
            with torch.inference_mode():
                best["transformers"] = min(best["transformers"], hf_decode_seconds(hf, ids, new_tokens, engine.device))
    rate = new_tokens / best["ours"]
    gbs = rate * (weight_bytes(engine) + kv_bytes_read(engine, context + new_tokens // 2)) / 1e9
    line = f"decode at {context:,} context: {rate:6.1f} tok/s, {gbs:5.1f} GB/s of weights + K/V read (target >= 30 tok/s)"
    if hf is not None:
        hf_rate = new_tokens / best["transformers"]
        line += f"; transformers {hf_rate:5.1f} tok/s -> {rate / hf_rate:.2f}x"
    print(line)


def bench_concurrent(engine: Engine, n: int, prefix: int, suffix: int) -> None:
    vocab = engine.model_config.vocab_size
    shared = prompt(prefix, seed=4, vocab=vocab)
    prompts = [shared + prompt(suffix, seed=100 + i, vocab=vocab) for i in range(n)]
    total = sum(len(p) for p in prompts)
    engine.clear_cache()
    start = time.perf_counter()
    for p in prompts:
        engine.clear_cache()
        engine.generate(p, max_tokens=1)
    sequential = time.perf_counter() - start
    engine.clear_cache()
    start = time.perf_counter()
    results = engine.generate(prompts, max_tokens=1)
    together = time.perf_counter() - start
    cached = sum(r.num_cached_tokens for r in results)
    print(
        f"{n} requests sharing a {prefix:,}-token prefix: one at a time (no reuse) {total / sequential:6.0f} tok/s, "
        f"together {total / together:6.0f} tok/s ({cached:,} tokens reused) -> {sequential / together:.1f}x (target >= 3x)"
    )


def transformers_model(engine: Engine, device: torch.device, dtype: torch.dtype):
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        return None
    from localengine.loader import load_model

    loaded = load_model(engine.config.model, engine.config.seed)
    cfg = loaded.config
    hf_cfg = LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=cfg.rope_theta,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings,
    )
    hf_cfg.rope_parameters = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    model = LlamaForCausalLM(hf_cfg).to(dtype=dtype)
    model.load_state_dict({k: v.to(dtype) for k, v in loaded.weights.items()}, strict=False)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    return model.to(device).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto", help="auto: the engine's default fast path")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--long", action="store_true", help="also prefill 8,192 tokens")
    parser.add_argument("--no-transformers", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' cache-argument renames
    reps = 2 if args.quick else 3

    engine = Engine(model=args.model, device=args.device, dtype=args.dtype)
    device, dtype = engine.device, engine.dtype
    print(
        f"model {engine.model_config.name}, {device} {str(dtype).removeprefix('torch.')}, "
        f"{torch.get_num_threads()} threads, matmuls: {engine.kernels}, torch {torch.__version__}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    hf = None if args.no_transformers else transformers_model(engine, device, dtype)
    if hf is None:
        print(
            "transformers: not importable, comparison skipped (it is not a dependency: e.g. "
            "`uv pip install --target /tmp/hf transformers` and PYTHONPATH=/tmp/hf)"
        )
    else:
        import transformers

        ids = prompt(512, seed=512, vocab=engine.model_config.vocab_size)
        with torch.inference_mode():
            ref = hf(torch.tensor([ids], device=device), logits_to_keep=1).logits[0, -1].float().cpu()
        diff = (ref - engine.logits(ids, use_prefix_cache=False).logits.float().cpu()).abs().max().item()
        print(
            f"transformers {transformers.__version__} LlamaForCausalLM, same weights: max |logits difference| at 512 tokens = {diff:.2e}"
        )
    peak_fns = matmul_fns(device, dtype)
    with torch.inference_mode():
        bench_prefill(engine, 512, reps + 1, peak_fns)
        bench_prefill(engine, 2048, reps, peak_fns, hf)
        if args.long:
            bench_prefill(engine, 8192, 1, peak_fns)
    print("  (targets: >= 60% of peak at 512 (issue), >= 70% (team target); >= 1.15x transformers at 2,048)")
    bench_cached_prefix(engine, reps)
    bench_decode(engine, 2048, 64, reps, hf)
    bench_concurrent(engine, 8, 2048, 64)


if __name__ == "__main__":
    main()
