"""A Llama-family decoder: RMSNorm, rotary position embeddings, grouped-query attention, SwiGLU MLP,
tied input/output embeddings (SmolLM2, Llama 2/3, TinyLlama, ...).

Weights arrive in Hugging Face naming (`model.layers.0.self_attn.q_proj.weight`, ...) from either loader;
Q/K/V are fused at load time into one matmul; on CPU the MLP's SiLU and product and both residual sums
run inside the matmuls (oneDNN post-ops).
Tokens of all sequences in a step are flattened into one `[T, D]` batch; only attention is per sequence.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from ..loader.dequant import GroupCodes
from .attention import AttentionBatch, exact_linear, paged_attention

_ONEDNN_BATCH_HINT = 512  # oneDNN picks a weight layout for this batch size; measured good from 1 to 4k rows


_ONEDNN_OK: dict[torch.dtype, bool] = {}  # per dtype: does oneDNN's prepacked linear agree with F.linear here


def _onednn_agrees(dtype: torch.dtype) -> bool:
    """Check once per process and dtype (not per layer: each check builds oneDNN primitives, ~20 ms each)
    that the prepacked kernels and their fused post-ops give F.linear's answers on this CPU."""
    if dtype not in _ONEDNN_OK:
        _ONEDNN_OK[dtype] = _probe_onednn(dtype)
    return _ONEDNN_OK[dtype]


def _probe_onednn(dtype: torch.dtype) -> bool:
    if not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(48, 64, generator=gen).to(dtype)
    probe = torch.randn(3, 64, generator=gen).to(dtype)
    other = torch.randn(3, 48, generator=gen).to(dtype)
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(w, _ONEDNN_BATCH_HINT)
        want = F.linear(probe.float(), w.float())
        got = [
            (torch.ops.mkldnn._linear_pointwise(probe, packed, None, "none", [], ""), want),
            (torch.ops.mkldnn._linear_pointwise(probe, packed, None, "swish", [], ""), F.silu(want)),
            (torch.ops.mkldnn._linear_pointwise.binary(probe, other, packed, None, "mul"), want * other.float()),
            (torch.ops.mkldnn._linear_pointwise.binary(probe, other, packed, None, "add"), want + other.float()),
        ]
    except (RuntimeError, AttributeError):
        return False
    tol = 1e-4 if dtype == torch.float32 else 0.1  # bf16 keeps 8 significant bits
    return all(torch.allclose(a.float(), b, rtol=tol, atol=tol) for a, b in got)


class Linear(nn.Module):
    """y = x @ W.T, through one of:
    - the batch-invariant kernel (exact mode);
    - oneDNN with a prepacked float32 or bfloat16 weight on CPU (about 1.7x MKL's GEMV at decode, 1.2x at
      prefill in float32; bfloat16 runs on AVX512-BF16/AMX at about 3x float32's prefill rate, and reads half
      the bytes per decoded token), with the SiLU, product and residual sum fused into the matmul's output;
    - in a decode step of up to `ROW_COPY_MAX_ROWS` sequences (`copies`), a weight-only low-precision copy
      (`RowWeight`: int4 in groups or int8 per row, the activations kept as they are): decode is bound by
      reading the weights, once per step (the other calls keep the oneDNN weight);
    - int8 weights, one scale per output channel (fbgemm's dynamic quantized linear: activations quantized
      per call); optional for the vocabulary head, the largest matrix (49k x 576 for SmolLM2), where it reads
      a quarter of float32's bytes per token but costs accuracy (see `Engine(int8_head=...)`);
    - else F.linear.
    """

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.packed: torch.Tensor | None = None
        self.int8: object | None = None  # fbgemm's packed int8 weight
        self.row_weight: RowWeight | None = None  # read by the decode steps' calls (`copies`)

    def _copy(self, copies: bool) -> bool:
        return copies and self.row_weight is not None

    def forward(self, x: torch.Tensor, exact: bool = False, copies: bool = False) -> torch.Tensor:
        """`copies`: the caller's step reads the low-precision copies (a decode step of a few sequences)."""
        if exact:
            return exact_linear(x, self.weight)
        if self._copy(copies):
            return self.row_weight.matmul(x)  # type: ignore[union-attr]
        if self.int8 is not None:
            return torch.ops.quantized.linear_dynamic(x.float(), self.int8, False).to(x.dtype)
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")
        return F.linear(x, self.weight)

    def silu(self, x: torch.Tensor, exact: bool = False, copies: bool = False) -> torch.Tensor:
        """silu(x @ W.T)"""
        if self.packed is not None and not exact and not self._copy(copies):
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "swish", [], "")
        return F.silu(self(x, exact, copies))

    def times(self, x: torch.Tensor, other: torch.Tensor, exact: bool = False, copies: bool = False) -> torch.Tensor:
        """(x @ W.T) * other"""
        if self.packed is not None and not exact and not self._copy(copies):
            return torch.ops.mkldnn._linear_pointwise.binary(x, other, self.packed, None, "mul")
        return self(x, exact, copies) * other

    def plus(self, x: torch.Tensor, other: torch.Tensor, exact: bool = False, copies: bool = False) -> torch.Tensor:
        """(x @ W.T) + other: a residual connection"""
        if self.packed is not None and not exact and not self._copy(copies):
            return torch.ops.mkldnn._linear_pointwise.binary(x, other, self.packed, None, "add")
        return self(x, exact, copies) + other

    def pack_for_cpu(self) -> bool:
        """Prepack the weight for oneDNN (float32 or bfloat16 on CPU); False keeps F.linear."""
        w = self.weight
        if w.device.type != "cpu" or w.dtype not in (torch.float32, torch.bfloat16) or not _onednn_agrees(w.dtype):
            return False
        try:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(w, _ONEDNN_BATCH_HINT)
        except RuntimeError:
            return False
        return True

    def quantize_rows(self, layout: str, codes: GroupCodes | None = None) -> bool:
        """Keep a low-precision copy (`RowWeight` layout) of the weight for decode steps, from the file's own
        `codes` where they fit the layout; False where this build's kernels do not take it (the caller then
        keeps the dense weight for every call)."""
        if self.weight.device.type != "cpu":
            return False
        self.row_weight = RowWeight.quantize(self.weight.detach(), layout, codes)
        return self.row_weight is not None

    def quantize_int8(self, source: torch.Tensor | None = None) -> bool:
        """Hold the weight as int8 with a float scale per output row (symmetric, absmax / 127)."""
        if not hasattr(torch.ops.quantized, "linear_prepack") or "fbgemm" not in torch.backends.quantized.supported_engines:
            return False
        w = (self.weight if source is None else source).detach().float()
        scales = _int8_row_scales(w).double()
        zeros = torch.zeros(w.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # the quantized-tensor constructors warn of a future deprecation
            warnings.simplefilter("ignore")
            torch.backends.quantized.engine = "fbgemm"
            q = torch.quantize_per_channel(w, scales, zeros, 0, torch.qint8)
            self.int8 = torch.ops.quantized.linear_prepack(q, None)
        self.packed = None
        return True


def _int8_row_scales(w: torch.Tensor) -> torch.Tensor:
    """Symmetric int8 scale of each output row: its largest magnitude maps to 127."""
    return (w.abs().amax(dim=1) / 127).clamp(min=1e-12)


# Steps of up to this many single-token sequences read the low-precision copies: the int4 kernel reads its
# bytes 2-3x faster than oneDNN bfloat16 for 1-4 rows, about as fast at 8 and slower from 16 (measured here).
ROW_COPY_MAX_ROWS = 8
INT4_GROUP = 32  # inputs per scale (and offset) of the grouped copies: llama.cpp's Q4_0/Q4_1/Q8_0 block


@dataclass(slots=True)
class RowWeight:
    """A weight-only low-precision copy of an [out, in] weight for decode steps; activations stay as they are.

    - "int8 rows": symmetric, one scale per output row (absmax / 127), `aten._weight_int8pack_mm`.
    - "int4 groups": asymmetric, a scale and an offset per group of `INT4_GROUP` inputs,
      `value = (q - 8) * scale + zero` with q in 0..15 (`aten._weight_int4pack_mm_for_cpu`, tinygemm's layout).
      A group's smallest value maps to 0 and its largest to 15, as llama.cpp's Q4_1 quantizer does, so a
      weight stored as Q4_1 gets its file's own codes back.
    - "int8 groups": symmetric, one scale per group (absmax / 127: llama.cpp's Q8_0, whose codes come back the
      same way), run as two 4-bit halves of the biased code `q + 128 = 16 * high + low`, because the int4
      kernel reads its bytes about twice as fast as the int8 one on the vocabulary head.
    Scales and offsets are rounded to the activations' dtype.
    """

    layout: str
    parts: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # (weight data, scales) per kernel call, summed

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        if self.layout == "int8 rows":
            data, scales = self.parts[0]
            return torch.ops.aten._weight_int8pack_mm(x, data, scales)
        out = None
        for data, scales in self.parts:
            part = torch.ops.aten._weight_int4pack_mm_for_cpu(x, data, INT4_GROUP, scales)
            out = part if out is None else out.add_(part)
        return out

    @staticmethod
    def quantize(weight: torch.Tensor, layout: str, codes: GroupCodes | None = None) -> RowWeight | None:
        """None where this torch build lacks the kernel or it rejects the shape or dtype. `codes`: the file's
        own (Q4_1 for int4 groups, Q8_0 for int8 groups), taken as they are instead of recovered."""
        build = {"int8 rows": _int8_rows, "int4 groups": _int4_groups, "int8 groups": _int8_groups}[layout]
        kernel = "_weight_int8pack_mm" if layout == "int8 rows" else "_weight_int4pack_mm_for_cpu"
        if not hasattr(torch.ops.aten, kernel) or (layout != "int8 rows" and weight.shape[1] % INT4_GROUP):
            return None
        own = codes is not None and _FILE_CODES.get(layout) == codes.kind and codes.codes.shape == weight.shape
        try:
            if own:
                parts = _from_codes(codes, weight.dtype)  # type: ignore[arg-type]
            else:
                parts = build(weight.float(), weight.dtype)
            row = RowWeight(layout, parts)
            row.matmul(torch.zeros(1, weight.shape[1], dtype=weight.dtype))
        except RuntimeError:  # a shape or dtype this build's kernel does not take
            return None
        return row


def _int8_rows(w: torch.Tensor, dtype: torch.dtype) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    scales = _int8_row_scales(w)
    rows = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
    return ((rows, scales.to(dtype)),)


def _groups(w: torch.Tensor) -> torch.Tensor:
    return w.reshape(w.shape[0], w.shape[1] // INT4_GROUP, INT4_GROUP)  # [out, groups, INT4_GROUP]


def _int4_part(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, dtype: torch.dtype):
    """codes [out, groups, INT4_GROUP] in 0..15; scale, zero [out, groups, 1]: the kernel's (weight, scales)."""
    flat = codes.reshape(codes.shape[0], -1).to(torch.int32)
    scales = torch.cat([scale, zero], dim=-1).to(dtype).transpose(0, 1).contiguous()  # [groups, out, 2]
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(flat, 1), scales


def _int4_groups(w: torch.Tensor, dtype: torch.dtype) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    # In place where possible: this runs over every layer weight while the engine loads.
    groups = _groups(w)
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)  # aminmax: 4x slower here
    scale = high.sub_(low).div_(15).clamp_(min=1e-12)
    codes = (groups - low).div_(scale).round_().clamp_(0, 15).to(torch.int32)
    return (_int4_part(codes, scale, low.add_(8 * scale), dtype),)  # the kernel computes (q - 8) * scale + zero


_FILE_CODES = {"int4 groups": "Q4_1", "int8 groups": "Q8_0"}  # a layout -> the GGUF type that is it


def _from_codes(codes: GroupCodes, dtype: torch.dtype) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    q = _groups(codes.codes)
    scale = codes.scale[..., None]
    if codes.kind == "Q4_1":  # value = q * d + m = (q - 8) * d + (m + 8 d)
        assert codes.offset is not None
        return (_int4_part(q, scale, codes.offset[..., None] + 8 * scale, dtype),)
    return _int8_halves(q.to(torch.int32) + 128, scale, dtype)


def _int8_groups(w: torch.Tensor, dtype: torch.dtype) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    groups = _groups(w)
    scale = groups.abs().amax(-1, keepdim=True).div_(127).clamp_(min=1e-12)
    biased = (groups / scale).round_().clamp_(-127, 127).to(torch.int32).add_(128)  # 1..255 = 16 * high + low
    return _int8_halves(biased, scale, dtype)


def _int8_halves(biased: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype):
    """Codes + 128 [out, groups, INT4_GROUP] and the groups' scales [out, groups, 1] as two int4 parts."""
    high, low = biased >> 4, biased.bitwise_and_(15)
    # scale * (16 high + low - 128) = [(high - 8) * 16 scale + 0] + [(low - 8) * scale + 8 scale]
    return (
        _int4_part(high, 16 * scale, torch.zeros_like(scale), dtype),
        _int4_part(low, scale, 8 * scale, dtype),
    )


class Embedding(nn.Module):
    """Token embedding without nn.Embedding's random init (which, on the meta device, imports torch._dynamo)."""

    def __init__(self, num: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num, dim))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # One row-wise kernel; half precision is normalised in float32 (the reference implementation rounds
        # before the weight's product, this rounds after it: at most one unit in the last place apart).
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def rope_tables(cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin for every position, [max_positions, head_dim], computed in float64 then cast."""
    half = torch.arange(0, cfg.head_dim, 2, dtype=torch.float64, device=device) / cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta**half)  # [hd/2]
    pos = torch.arange(cfg.max_position_embeddings, dtype=torch.float64, device=device)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)  # [P, hd]: the "rotate half" layout of HF Llama
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [T, heads, hd]; cos, sin: [T, 1, hd]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        qkv_out = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
        self.qkv_proj = Linear(cfg.hidden_size, qkv_out)
        self.o_proj = Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size)

    def forward(self, x, residual, cos, sin, kv_cache, batch: AttentionBatch) -> torch.Tensor:
        """residual + attention(x); x, residual: [T, D]"""
        exact, copies = batch.batch_invariant, batch.row_copies
        qkv = self.qkv_proj(x, exact, copies)  # [T, (H + 2 kvh) * hd]
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        qk, v = qkv.split([q_size + kv_size, kv_size], dim=-1)
        qk = apply_rope(
            qk.view(-1, self.num_heads + self.num_kv_heads, self.head_dim), cos, sin
        )  # one pass for Q and K
        q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)  # [T, H, hd], [T, kvh, hd]
        v = v.reshape(-1, self.num_kv_heads, self.head_dim)
        out = paged_attention(q, k, v, kv_cache[0], kv_cache[1], batch)  # [T, H, hd]
        return self.o_proj.plus(out.reshape(x.shape[0], q_size), residual, exact, copies)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = Linear(cfg.hidden_size, cfg.intermediate_size)
        self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor, residual: torch.Tensor, batch: AttentionBatch) -> torch.Tensor:
        """residual + down(silu(gate(x)) * up(x)); x, residual: [T, D]"""
        exact, copies = batch.batch_invariant, batch.row_copies
        hidden = self.up_proj.times(x, self.gate_proj.silu(x, exact, copies), exact, copies)  # [T, I]
        return self.down_proj.plus(hidden, residual, exact, copies)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, kv_cache, batch: AttentionBatch) -> torch.Tensor:
        x = self.self_attn(self.input_layernorm(x), x, cos, sin, kv_cache, batch)
        return self.mlp(self.post_attention_layernorm(x), x, batch)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size)  # tied: shares embed_tokens.weight
        self.rope_cos: torch.Tensor | None = None
        self.rope_sin: torch.Tensor | None = None

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        batch: AttentionBatch,
    ) -> torch.Tensor:
        """input_ids, positions: [T] -> last layer's hidden states [T, D] (before the final norm)."""
        x = self.embed_tokens(input_ids)  # [T, D]
        cos, sin = self.rope_cos[positions][:, None, :], self.rope_sin[positions][:, None, :]  # [T, 1, hd]
        for layer, kv_cache in zip(self.layers, kv_caches):
            x = layer(x, cos, sin, kv_cache, batch)
        return x

    def compute_logits(self, hidden: torch.Tensor, exact: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden: [B, D] (only the positions that need logits) -> logits [B, V] and the head's input [B, D]."""
        normed = self.norm(hidden)
        # Every row here is one sequence's last position, so the head reads its copy for up to
        # ROW_COPY_MAX_ROWS sequences whatever the step (a prefill's logits included).
        return self.lm_head(normed, exact, copies=normed.shape[0] <= ROW_COPY_MAX_ROWS), normed

    def dense_head_rows(self, token_ids: torch.Tensor) -> torch.Tensor | None:
        """Rows of the head as loaded (before any low-precision copy), where still held: a tied head's are
        the embedding's."""
        weight = self.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return weight[token_ids] if weight.shape[0] == self.config.vocab_size else None

    def pack_for_cpu(self, int8_head: bool = False, decode_bits: int | None = None,
                     codes: dict[str, GroupCodes] | None = None) -> str | None:
        """Prepack every projection for oneDNN and drop the dense copies (the embedding stays dense); with
        `int8_head`, hold the vocabulary head as int8 instead; with `decode_bits` (4 or 8), the layers'
        projections also keep a copy of that many bits for decode steps (`RowWeight`), and the head an 8-bit
        one in groups. `codes`: the file's own codes by Linear name (`fuse_codes`), used where they fit.
        Returns the kernels used, or None (F.linear)."""
        codes = codes or {}
        linears = [m for m in self.modules() if isinstance(m, Linear)]
        if not all(m.pack_for_cpu() for m in linears):
            for m in linears:
                m.packed = None
            return None
        kernels = f"oneDNN {str(self.embed_tokens.weight.dtype).removeprefix('torch.')}"
        if int8_head and self.lm_head.quantize_int8():
            kernels += ", int8 head"
        names = {m: name for name, m in self.named_modules() if isinstance(m, Linear)}
        layers = [m for m in linears if m is not self.lm_head]
        layout = {4: "int4 groups", 8: "int8 rows"}.get(decode_bits or 0)
        if layout and all(m.quantize_rows(layout, codes.get(names[m])) for m in layers):
            kernels += f", {layout} decode"
            # The head (a Q8_0 or float tensor in the files we load) in 8 bits, in groups as Q8_0 stores it.
            if not int8_head and self.lm_head.quantize_rows("int8 groups", codes.get("lm_head")):
                kernels += ", int8 groups head decode"
        else:
            for m in layers:
                m.row_weight = None
        for m in linears:  # a tied head only drops its reference: the embedding keeps the tensor
            m.weight = nn.Parameter(torch.empty(0, dtype=m.weight.dtype), requires_grad=False)
        return kernels


def fuse_hf_weights(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face Llama names -> this module's names, with Q/K/V and gate/up concatenated."""
    out = {"embed_tokens.weight": hf["model.embed_tokens.weight"], "norm.weight": hf["model.norm.weight"]}
    out["lm_head.weight"] = hf["model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"]
    for i in range(cfg.num_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        attn, mlp = src + "self_attn.", src + "mlp."
        out[dst + "self_attn.qkv_proj.weight"] = torch.cat([hf[attn + f"{n}_proj.weight"] for n in "qkv"])
        out[dst + "self_attn.o_proj.weight"] = hf[attn + "o_proj.weight"]
        for name in ("gate_proj", "up_proj", "down_proj"):
            out[dst + f"mlp.{name}.weight"] = hf[mlp + f"{name}.weight"]
        out[dst + "input_layernorm.weight"] = hf[src + "input_layernorm.weight"]
        out[dst + "post_attention_layernorm.weight"] = hf[src + "post_attention_layernorm.weight"]
    return out


def fuse_codes(cfg: ModelConfig, codes: dict[str, GroupCodes]) -> dict[str, GroupCodes]:
    """A file's own codes (HF names) under this module's Linear names, Q/K/V fused where all three have them."""
    out: dict[str, GroupCodes] = {}
    head = "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
    if head in codes:
        out["lm_head"] = codes[head]
    for i in range(cfg.num_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        qkv = [codes.get(f"{src}self_attn.{n}_proj.weight") for n in "qkv"]
        if all(c is not None for c in qkv) and len({c.kind for c in qkv}) == 1:  # type: ignore[union-attr]
            out[dst + "self_attn.qkv_proj"] = GroupCodes.concat(qkv)  # type: ignore[arg-type]
        for name in ("self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            if src + name + ".weight" in codes:
                out[dst + name] = codes[src + name + ".weight"]
    return out


def build_model(
    cfg: ModelConfig, hf_weights: dict[str, torch.Tensor], device: torch.device, dtype: torch.dtype
) -> LlamaForCausalLM:
    """Construct on the meta device (no allocation), then adopt the loaded weights in place."""
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    state = {k: v.to(device=device, dtype=dtype).contiguous() for k, v in fuse_hf_weights(cfg, hf_weights).items()}
    model.load_state_dict(state, assign=True, strict=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    model.rope_cos, model.rope_sin = rope_tables(cfg, device, dtype)
    return model.eval().requires_grad_(False)
