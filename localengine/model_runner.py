"""The tensor plane: owns the model weights and the paged KV cache, runs one scheduled batch.

KV cache layout: `[num_layers, 2 (K, V), num_kv_heads, num_blocks * block_size, head_dim]`; token slot
`block_id * block_size + offset`. Per layer and per head a sequence's tokens are rows of one matrix, so
its context is a few runs of consecutive slots (`slot_runs`): one run is read as a view with no copy; a
decode step attends run by run and merges (no copy either); a prefill over a cached, fragmented prefix
gathers the runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import ModelConfig
from .models.attention import AttentionBatch, SeqAttention
from .models.llama import ROW_COPY_MAX_ROWS, LlamaForCausalLM
from .scheduler import ScheduledBatch
from .sequence import Sequence

_NEAR_TIE_CANDIDATES = 4  # top logits looked at for a near tie
_NEAR_TIE_UNITS = 2  # within this many units in the last place of the top logit: re-scored in float32


@dataclass(slots=True)
class StepOutput:
    token_ids: list[int | None]  # one per sequence in batch order; None when nothing was sampled
    logits: list[torch.Tensor | None]  # last-position logits for sequences that asked for them


def kv_bytes_per_block(cfg: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    return cfg.num_layers * 2 * cfg.num_kv_heads * block_size * cfg.head_dim * dtype.itemsize


def slot_runs(block_table: list[int], block_size: int, num_tokens: int) -> list[tuple[int, int]]:
    """The first `num_tokens` slots of a block table as runs of consecutive slots: (first slot, length)."""
    runs: list[list[int]] = []
    for i, block_id in enumerate(block_table):
        n = min(block_size, num_tokens - i * block_size)
        if runs and runs[-1][0] + runs[-1][1] == block_id * block_size:
            runs[-1][1] += n
        else:
            runs.append([block_id * block_size, n])
    return [(s, n) for s, n in runs]


class ModelRunner:
    def __init__(
        self,
        model: LlamaForCausalLM,
        num_blocks: int,
        block_size: int,
        device: torch.device,
        dtype: torch.dtype,
        batch_invariant: bool,
        seed: int,
    ):
        cfg = model.config
        self.model, self.config = model, cfg
        self.block_size, self.num_blocks = block_size, num_blocks
        self.device, self.dtype = device, dtype
        self.batch_invariant = batch_invariant
        slots = num_blocks * block_size
        # Unwritten slots are never read: attention only looks at a sequence's own context.
        self.kv_cache = torch.empty(
            cfg.num_layers, 2, cfg.num_kv_heads, slots, cfg.head_dim, device=device, dtype=dtype
        )
        self.generator = torch.Generator(device=device).manual_seed(seed)

    # -- inputs ---------------------------------------------------------------------------------
    def _seq_inputs(self, seq: Sequence, q_start: int) -> tuple[list[int], torch.Tensor, torch.Tensor, SeqAttention]:
        start, end = seq.num_computed_tokens, seq.num_tokens
        bs = self.block_size
        table = seq.block_table[: (end + bs - 1) // bs]
        positions = torch.arange(start, end)
        slots = torch.tensor(table, dtype=torch.long)[positions // bs] * bs + positions % bs
        return (
            seq.token_ids[start:end],
            positions,
            slots,
            SeqAttention(q_start, end - start, end, slot_runs(table, bs, end)),
        )

    def _prepare(self, seqs: list[Sequence]) -> tuple[torch.Tensor, torch.Tensor, AttentionBatch, list[int]]:
        ids: list[int] = []
        positions, slots, attns, last_rows = [], [], [], []
        for seq in seqs:
            seq_ids, pos, slot, attn = self._seq_inputs(seq, len(ids))
            ids += seq_ids
            positions.append(pos)
            slots.append(slot)
            attns.append(attn)
            last_rows.append(len(ids) - 1)
        dev = self.device
        copies = not self.batch_invariant and len(ids) <= ROW_COPY_MAX_ROWS and all(a.q_len == 1 for a in attns)
        batch = AttentionBatch(torch.cat(slots).to(dev), attns, self.batch_invariant, copies)
        return torch.tensor(ids, dtype=torch.long, device=dev), torch.cat(positions).to(dev), batch, last_rows

    def _copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        bs = self.block_size
        for src, dst in copies:
            self.kv_cache[:, :, :, dst * bs : (dst + 1) * bs] = self.kv_cache[:, :, :, src * bs : (src + 1) * bs]

    # -- run --------------------------------------------------------------------------------------
    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> StepOutput:
        seqs = batch.seqs
        self._copy_blocks(batch.block_copies)
        input_ids, positions, attn, last_rows = self._prepare(seqs)
        kv_caches = list(self.kv_cache.unbind(0))
        hidden = self.model(input_ids, positions, kv_caches, attn)  # [T, D]
        # Only the last position of each sequence needs logits: skips the vocabulary matmul for the rest.
        logits, head_input = self.model.compute_logits(hidden[last_rows], self.batch_invariant)  # [B, V], [B, D]
        token_ids = self._sample(logits, head_input, seqs)
        kept = [logits[i].clone() if s.params.return_logits else None for i, s in enumerate(seqs)]
        return StepOutput(token_ids, kept)

    def _greedy(self, logits: torch.Tensor, head_input: torch.Tensor) -> list[int]:
        """The argmax of each row. Half-precision logits keep ~3 significant digits (a unit in the last place is
        0.125 at 25), so two candidates a few hundredths apart can round to the same value, and the lower
        token id would win the tie. Candidates within `_NEAR_TIE_UNITS` units of the top are re-scored in
        float32 from the head's dense rows: rounding never decides between them."""
        top = logits.topk(min(_NEAR_TIE_CANDIDATES, logits.shape[-1]), dim=-1)  # faster than bf16 argmax, too
        picks = top.indices[:, 0].tolist()
        if logits.dtype not in (torch.bfloat16, torch.float16):
            return picks
        values = top.values.float()
        unit = values[:, :1].abs() * torch.finfo(logits.dtype).eps
        near = (values[:, :1] - values) <= _NEAR_TIE_UNITS * unit  # [B, k]; the top itself included
        for row in (near.sum(dim=-1) > 1).nonzero().flatten().tolist():
            candidates = top.indices[row][near[row]]
            rows = self.model.dense_head_rows(candidates)
            if rows is not None:
                exact = rows.float() @ head_input[row].float()
                picks[row] = int(candidates[exact.argmax()])
        return picks

    def _sample(self, logits: torch.Tensor, head_input: torch.Tensor, seqs: list[Sequence]) -> list[int | None]:
        greedy = self._greedy(logits, head_input)
        out: list[int | None] = []
        for i, seq in enumerate(seqs):
            if seq.params.max_tokens == 0:
                out.append(None)
            elif seq.params.temperature == 0:
                out.append(greedy[i])
            else:
                probs = torch.softmax(logits[i].float() / seq.params.temperature, dim=-1)
                out.append(int(torch.multinomial(probs, 1, generator=self.generator)))
        return out
