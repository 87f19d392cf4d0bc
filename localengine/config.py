"""Configuration dataclasses, one per concern.

`ModelConfig` describes the network (read from GGUF metadata or a Hugging Face config.json);
`CacheConfig` the paged KV store; `SchedulerConfig` how much work one engine step may take on.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ModelConfig:
    """A Llama-family decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int = 0  # 0: derived as hidden_size // num_heads
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10_000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    name: str = "llama"

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            self.head_dim = self.hidden_size // self.num_heads
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")

    @property
    def num_queries_per_kv(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def num_non_embedding_params(self) -> int:
        """Parameters touched per token by the decoder layers (the FLOP-relevant count, excluding the head)."""
        d, h = self.hidden_size, self.head_dim
        attn = d * h * (self.num_heads * 2 + self.num_kv_heads * 2)
        mlp = 3 * d * self.intermediate_size
        return self.num_layers * (attn + mlp)


@dataclass(slots=True)
class CacheConfig:
    """The paged KV store: `num_blocks` blocks of `block_size` token slots each."""

    block_size: int = 16
    num_blocks: int | None = None  # None: sized by the engine from the model and the memory available

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.num_blocks is not None and self.num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {self.num_blocks}")


@dataclass(slots=True)
class SchedulerConfig:
    """Limits of one engine step (continuous batching)."""

    max_num_seqs: int = 16
    # Prompt tokens computed in one step; a single longer prompt is still admitted alone.
    max_num_batched_tokens: int = 8192
    # Hold back a prompt whose next block is being computed by a request admitted in the same step,
    # so it reuses that block one step later instead of computing the same prefix twice.
    wait_for_shared_prefix: bool = True


@dataclass(slots=True)
class AccountingConfig:
    """Accounting mode (localengine.accounting): prompts longer than the model's window are answered, the
    model attending to the window, a K/V-less ledger keeping the cache's ground truth for the whole prompt."""

    enabled: bool = True  # False (the Engine's default without a config): a prompt over the model is refused
    ledger_tokens: int = 1 << 21  # the ledger's size (2,097,152 tokens: ten 200k-token prompts)
    window_tokens: int | None = None  # the most prompt tokens the model runs on (None: all it can take)
    head_tokens: int = 256  # of those, the prompt's first tokens
    grid_tokens: int | None = None  # the tail starts on multiples of this (None: half the tail)

    def __post_init__(self) -> None:
        if self.ledger_tokens < 1:
            raise ValueError(f"ledger_tokens must be >= 1, got {self.ledger_tokens}")
        if self.window_tokens is not None and self.window_tokens < 16:
            raise ValueError(f"window_tokens must be >= 16, got {self.window_tokens}")
        if self.head_tokens < 0:
            raise ValueError(f"head_tokens must be >= 0, got {self.head_tokens}")


@dataclass(slots=True)
class EngineConfig:
    model: str = "smollm2-135m-instruct"
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    # Batch-invariant kernels: every token's result is independent of how many other tokens share the
    # forward pass, so a cached prefix gives bitwise-identical logits. None: on for float64 only.
    batch_invariant: bool | None = None
    accounting: AccountingConfig = field(default_factory=AccountingConfig)
