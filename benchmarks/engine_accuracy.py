"""Accuracy cost of the engine's fast path against the float32 reference, on a long real prompt.

    uv run python benchmarks/engine_accuracy.py                  # fast path (dtype auto) vs float32
    uv run python benchmarks/engine_accuracy.py --int8-head --tokens 1536 --positions 24

The prompt is this repository's README (real prose, code and tables), cut to `--tokens`. Both engines read
the same prefixes, teacher-forced: at `--positions` evenly spaced cut points the next-token logits of each
are compared (top-1 agreement, max |logit difference|, and how often the reference's top-1 is in the fast
path's top-5). Each cut point extends the previous one, so the prefix cache makes the whole run cost about
one prefill per engine. Then both decode greedily from the full prompt and the first divergence is shown.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from localengine import Engine

README = Path(__file__).resolve().parent.parent / "README.md"


def cut_logits(engine: Engine, ids: list[int], cuts: list[int]) -> torch.Tensor:
    return torch.stack([engine.logits(ids[:c]).logits.float() for c in cuts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="auto", help="the path to check (default: auto, the fast path)")
    parser.add_argument("--int8-head", action="store_true", help="also hold the vocabulary head in int8")
    parser.add_argument("--decode-weights", default="auto", choices=("auto", "int4", "int8", "dense"),
                        help="what single-token steps read (default: the engine's choice)")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--positions", type=int, default=32)
    parser.add_argument("--decode", type=int, default=64, help="greedy tokens compared after the prompt")
    args = parser.parse_args()

    ref = Engine(device="cpu", dtype="float32")
    fast = Engine(device="cpu", dtype=args.dtype, int8_head=args.int8_head,
                  decode_weights=args.decode_weights)
    ids = ref.tokenizer.encode(README.read_text())[: args.tokens]
    step = max(1, len(ids) // args.positions)
    cuts = list(range(step, len(ids) + 1, step))[: args.positions]
    a, b = cut_logits(ref, ids, cuts), cut_logits(fast, ids, cuts)
    top1 = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
    in_top5 = (b.topk(5, dim=-1).indices == a.argmax(-1, keepdim=True)).any(-1).float().mean().item()
    diff = (a - b).abs().amax(-1)
    print(f"reference: float32 ({ref.kernels}); checked: {args.dtype} ({fast.kernels})")
    print(f"teacher-forced over {len(ids):,} README tokens, {len(cuts)} positions:")
    print(f"  top-1 agreement {top1:.1%}; reference top-1 within the checked path's top-5: {in_top5:.1%}")
    print(f"  max |logit difference| {diff.max().item():.3f} (median per position {diff.median().item():.3f}; "
          f"logits span about {a.max().item() - a.min().item():.0f})")
    # single-token steps (the decode path, low-precision weights by default): a prefix of 16k + 1 tokens computes only
    # its last token, the 16k before it being cached in full blocks
    block = fast.block_manager.block_size
    singles = [c for c in range(block + 1, len(ids) + 1, block)][-args.positions:]
    a1, b1 = cut_logits(ref, ids, singles), cut_logits(fast, ids, singles)
    top1_one = (a1.argmax(-1) == b1.argmax(-1)).float().mean().item()
    diff_one = (a1 - b1).abs().amax(-1)
    print(f"  single-token steps at {len(singles)} positions: top-1 agreement {top1_one:.1%}; max |logit difference| "
          f"{diff_one.max().item():.3f} (median {diff_one.median().item():.3f})")
    ga = ref.generate(ids, max_tokens=args.decode, ignore_eos=True).token_ids
    gb = fast.generate(ids, max_tokens=args.decode, ignore_eos=True).token_ids
    same = next((i for i, (x, y) in enumerate(zip(ga, gb)) if x != y), len(ga))
    print(f"  greedy decode of {args.decode} tokens after the prompt: identical for the first {same}")


if __name__ == "__main__":
    main()
