"""Attention over the paged KV cache, and the batch-invariant kernels used in exact mode.

The cache of one layer is a pair of tensors `[num_kv_heads, num_slots, head_dim]`; slot
`block_id * block_size + offset` holds one token. A sequence's K/V is read either as a view (when its
blocks are consecutive, the usual case) or gathered through its slot indices.

Batch-invariant mode: BLAS picks kernels (and so summation orders) by matrix shape, so the same token
computed alongside 3 or 300 others can differ in the last bits. In exact mode every reduction runs
row by row through the same code path whatever the batch: a token's result depends only on its own
inputs, so a request served from cached K/V gets bitwise-identical logits. It is slow; it is meant for
float64 reference runs on small models.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

_EXACT_CHUNK_ELEMENTS = 1 << 22  # bound on the broadcast intermediate of the exact kernels
# The CPU flash kernel that also returns the log-sum-exp (private op): enables attention over split key sets.
_CPU_FLASH_WITH_LSE = hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")


@dataclass(slots=True)
class SeqAttention:
    """Where one sequence's queries sit in the flat token batch and where its K/V lives."""

    q_start: int  # first row of its new tokens in the [T, ...] batch
    q_len: int  # number of new tokens
    context_len: int  # tokens attended to: cached/earlier tokens + new ones
    kv_runs: list[tuple[int, int]]  # its context as runs of consecutive slots: (first slot, length)


@dataclass(slots=True)
class AttentionBatch:
    slot_mapping: torch.Tensor  # [T] cache slot for each new token's K/V
    seqs: list[SeqAttention]
    batch_invariant: bool = False
    row_copies: bool = False  # matmuls read the low-precision weight copies (a decode step of a few sequences)


def exact_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T with each output a row-wise reduction independent of the other rows."""
    # x: [T, K], weight: [N, K] -> [T, N]
    rows = max(1, _EXACT_CHUNK_ELEMENTS // max(1, weight.numel()))
    out = [(x[i : i + rows, None, :] * weight[None]).sum(-1) for i in range(0, x.shape[0], rows)]
    return torch.cat(out) if len(out) > 1 else out[0]


_MAX_MERGED_RUNS = 8  # decode attends run by run (no copy) up to this many runs, else gathers


def _context(cache: torch.Tensor, runs: list[tuple[int, int]]) -> torch.Tensor:
    # cache: [kvh, slots, hd] -> [kvh, context_len, hd]; a view when the context is one run
    views = [cache[:, start : start + n] for start, n in runs]
    return views[0] if len(views) == 1 else torch.cat(views, dim=1)


def _decode_over_runs(q, k_cache, v_cache, runs: list[tuple[int, int]]) -> torch.Tensor:
    """One query per head over a fragmented context without gathering it: attend to each run of
    consecutive slots, then merge the partial results by their log-sum-exp (as split-K flash decoding)."""
    # q: [H, 1, hd] -> [H, 1, hd]
    num_heads, _, head_dim = q.shape
    num_kv_heads = k_cache.shape[0]
    qg = q.reshape(1, num_kv_heads, num_heads // num_kv_heads, head_dim)
    outs, lses = [], []
    for start, n in runs:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            qg, k_cache[None, :, start : start + n], v_cache[None, :, start : start + n]
        )
        outs.append(out)  # [1, kvh, group, hd]
        lses.append(lse)  # [1, kvh, group]
    return _merge(outs, lses).reshape(num_heads, 1, head_dim)


def _causal_mask(q_len: int, context_len: int, device: torch.device) -> torch.Tensor:
    # True where query i (at position context_len - q_len + i) may attend key j.
    q_pos = torch.arange(context_len - q_len, context_len, device=device)[:, None]
    return torch.arange(context_len, device=device)[None, :] <= q_pos  # [q_len, context_len]


def _merge(outs: list[torch.Tensor], lses: list[torch.Tensor]) -> torch.Tensor:
    """Combine attention over disjoint key sets by their log-sum-exp (as split-K flash decoding)."""
    weights = torch.softmax(torch.stack(lses).float(), dim=0).unsqueeze(-1)  # [R, ..., 1]
    return (torch.stack(outs).float() * weights).sum(0).to(outs[0].dtype)  # in float32: bf16 loses bits


def _prefill_over_prefix(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """New tokens after a cached prefix, without a [S, C] mask: every query sees the whole prefix (no mask;
    the query heads of a KV head are stacked as rows, so K/V are not repeated), and the new tokens
    causally; the two halves are merged by log-sum-exp. On CPU the attention call is ~15% faster than one
    masked call (a few % of a whole cached-prefix prefill)."""
    # q: [H, S, hd]; k, v: [kvh, C, hd] with the S new tokens last -> [H, S, hd]
    num_heads, q_len, head_dim = q.shape
    num_kv_heads, prefix = k.shape[0], k.shape[1] - q_len
    group = num_heads // num_kv_heads
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    qg = q.reshape(1, num_kv_heads, group * q_len, head_dim)
    out_prefix, lse_prefix = flash(qg, k[None, :, :prefix], v[None, :, :prefix])
    k_new = k[:, prefix:].repeat_interleave(group, dim=0)  # [H, S, hd]: only the new tokens are repeated
    v_new = v[:, prefix:].repeat_interleave(group, dim=0)
    out_new, lse_new = flash(q[None], k_new[None], v_new[None], is_causal=True)
    outs = [out_prefix.reshape(num_heads, q_len, head_dim), out_new[0]]
    return _merge(outs, [lse_prefix.reshape(num_heads, q_len), lse_new[0]])


def _attend_fast(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, context_len: int) -> torch.Tensor:
    # q: [H, S, hd]; k, v: [kvh, C, hd] -> [H, S, hd]
    num_heads, q_len, head_dim = q.shape
    num_kv_heads = k.shape[0]
    if q_len == 1:
        # One query per head: group the query heads of each KV head as rows, no mask, no K/V copy.
        qg = q.reshape(num_kv_heads, num_heads // num_kv_heads, head_dim)
        out = F.scaled_dot_product_attention(qg[None], k[None], v[None])
        return out.reshape(num_heads, 1, head_dim)
    if q_len == context_len:
        return F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, enable_gqa=True)[0]
    if q.device.type == "cpu" and _CPU_FLASH_WITH_LSE:
        return _prefill_over_prefix(q, k, v)
    mask = _causal_mask(q_len, context_len, q.device)
    return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask, enable_gqa=True)[0]


def _attend_exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, context_len: int) -> torch.Tensor:
    # q: [H, S, hd]; k, v: [kvh, C, hd] -> [H, S, hd]; every reduction is along the innermost axis.
    num_heads, q_len, head_dim = q.shape
    group = num_heads // k.shape[0]
    k = k.repeat_interleave(group, dim=0)  # [H, C, hd]
    vt = v.repeat_interleave(group, dim=0).transpose(1, 2).contiguous()  # [H, hd, C]
    mask = _causal_mask(q_len, context_len, q.device)
    scale = head_dim**-0.5
    rows = max(1, _EXACT_CHUNK_ELEMENTS // max(1, num_heads * context_len * head_dim))
    outs = []
    for i in range(0, q_len, rows):
        qi = q[:, i : i + rows]  # [H, r, hd]
        scores = (qi[:, :, None, :] * k[:, None, :, :]).sum(-1) * scale  # [H, r, C]
        scores = scores.masked_fill(~mask[i : i + rows], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        outs.append((probs[:, :, None, :] * vt[:, None, :, :]).sum(-1))  # [H, r, hd]
    return torch.cat(outs, dim=1) if len(outs) > 1 else outs[0]


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    batch: AttentionBatch,
) -> torch.Tensor:
    """Write the new tokens' K/V into the cache, then attend each sequence over its whole context.

    q: [T, H, hd]; k, v: [T, kvh, hd]; caches: [kvh, slots, hd]. Returns [T, H, hd].
    """
    k_cache.index_copy_(1, batch.slot_mapping, k.transpose(0, 1))
    v_cache.index_copy_(1, batch.slot_mapping, v.transpose(0, 1))
    if len(batch.seqs) == 1 and batch.seqs[0].q_len == q.shape[0]:
        return _attend_one(q, k, v, k_cache, v_cache, batch.seqs[0], batch.batch_invariant)
    out = torch.empty_like(q)
    for seq in batch.seqs:
        rows = slice(seq.q_start, seq.q_start + seq.q_len)
        out[rows] = _attend_one(q[rows], k[rows], v[rows], k_cache, v_cache, seq, batch.batch_invariant)
    return out


def _attend_one(q, k, v, k_cache, v_cache, seq: SeqAttention, exact: bool) -> torch.Tensor:
    """One sequence's new tokens over its context; q, k, v: its rows [S, heads, hd] -> [S, H, hd]."""
    attend = _attend_exact if exact else _attend_fast
    qs = q.transpose(0, 1)  # [H, S, hd]
    fast = not exact
    split_ok = q.device.type == "cpu" and _CPU_FLASH_WITH_LSE
    if fast and split_ok and seq.q_len == 1 and 1 < len(seq.kv_runs) <= _MAX_MERGED_RUNS:
        return _decode_over_runs(qs, k_cache, v_cache, seq.kv_runs).transpose(0, 1)
    if fast and seq.q_len == seq.context_len:
        ks, vs = k.transpose(0, 1), v.transpose(0, 1)  # no cached context: skip the read
    else:
        ks, vs = _context(k_cache, seq.kv_runs), _context(v_cache, seq.kv_runs)
    return attend(qs, ks, vs, seq.context_len).transpose(0, 1)
