"""The public engine: load a model, serve requests with continuous batching and a prefix-cached paged KV store.

Blocking use::

    from localengine import Engine
    engine = Engine()                                   # SmolLM2-135M-Instruct, fast path, CUDA if present
    Engine(dtype="float32")                             # every weight in float32 (the accuracy reference)
    Engine(model="tiny-random", dtype="float64")        # seeded random weights, bitwise-exact cache reuse
    ids = engine.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    result = engine.generate(ids, max_tokens=32)        # .text, .token_ids, .num_cached_tokens, timings
    results = engine.generate([ids_a, ids_b])           # several requests in flight together
    out = engine.logits(ids, use_prefix_cache=True)     # last position's logits + cached token count
    engine.stats, engine.clear_cache()

Serving (what an HTTP server builds on): submit requests, then drive the engine from one thread::

    request_id = engine.add_request(ids, max_tokens=64, temperature=0.7)
    while engine.has_unfinished_requests():
        for update in engine.step():                    # one forward pass for every request in flight
            update.request_id, update.new_token_ids, update.num_cached_tokens, update.finished, update.result

Exact mode (`batch_invariant`, on by default for float64): every kernel reduces row by row, so a
token's logits do not depend on what else shares its forward pass and reusing cached K/V is bitwise
exact. It is slow (O(context^2 x head_dim) memory traffic) and meant for small models.

`Engine` is not thread-safe: a server runs `step()` in a single loop (a thread or an executor) and hands
`RequestUpdate`s to the waiting clients; `add_request` and `abort_request` must be called from that
same thread (or under one lock with `step`).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import torch

from .accounting import PrefixLedger, Window, plan_window
from .block_manager import BlockManager
from .config import AccountingConfig, CacheConfig, EngineConfig, SchedulerConfig
from .loader import load_model
from .model_runner import ModelRunner, kv_bytes_per_block
from .models.llama import build_model, fuse_codes
from .scheduler import Scheduler
from .sequence import SamplingParams, Sequence

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
_CPU_KV_FRACTION = 0.25  # of physical memory, when num_blocks is not given
_GPU_KV_FRACTION = 0.5  # of free device memory after loading the weights
_DEFAULT_CONTEXTS = 4  # default cache size: this many full-length contexts (when memory allows)


@dataclass(slots=True)
class GenerationResult:
    request_id: int
    prompt_token_ids: list[int]  # the tokens the model ran on (the window's, in accounting mode)
    token_ids: list[int]  # generated tokens (including a final stop token, if any)
    text: str  # decoded generated tokens, special tokens skipped
    finish_reason: str  # "stop", "length" or "abort"
    num_prompt_tokens: int  # of the prompt as sent, however long
    num_cached_tokens: int  # of those, tokens the prefix cache reused (the ledger's count when windowed)
    prefill_seconds: float  # the forward pass that computed the prompt
    decode_seconds: float  # from the first generated token to the last
    first_token_seconds: float  # from submission to the first token (queueing included)
    window: Window | None = None  # which prompt tokens the model attended to (accounting.Window)
    model_cached_tokens: int = 0  # of the tokens the model ran on, those whose K/V was reused


@dataclass(slots=True)
class LogitsResult:
    logits: torch.Tensor  # [vocab] logits at the last prompt position (engine dtype, on CPU)
    num_cached_tokens: int


@dataclass(slots=True)
class RequestUpdate:
    request_id: int
    new_token_ids: list[int]
    finished: bool
    result: GenerationResult | None = None  # set once finished
    num_cached_tokens: int = 0  # prompt tokens reused from the prefix cache (known from the first update on)
    window: Window | None = None  # which prompt tokens the model attends to
    model_cached_tokens: int = 0  # of the window's tokens, those whose K/V was reused


@dataclass(slots=True)
class EngineStats:
    prefix_queries: int  # prompt tokens looked up in the prefix cache
    prefix_hits: int  # of those, tokens reused from cached blocks
    evictions: int  # cached blocks overwritten to make room
    blocks_free: int
    blocks_cached_free: int  # free blocks still holding a reusable prefix
    blocks_total: int
    block_size: int
    preemptions: int
    requests_finished: int

    @property
    def hit_ratio(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0


def _resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _cpu_has_bf16() -> bool:
    """AVX512-BF16 or AMX: oneDNN runs bfloat16 matmuls natively (else it would emulate them, slower than fp32)."""
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


_DECODE_WEIGHTS = {"int4": 4, "int8": 8, "dense": None}


_FOUR_BIT_SOURCE = 5.0  # bits per weight, block scales included: Q4_0/Q4_K 4.5, Q4_1 5.0; Q5_0 5.5, Q8_0 8.5


def _check_decode_weights(choice: str) -> None:
    if choice != "auto" and choice not in _DECODE_WEIGHTS:
        raise ValueError(f"decode_weights {choice!r} is not supported (choose from auto, {', '.join(_DECODE_WEIGHTS)})")


def _decode_bits(choice: str, dtype: str, resolved: torch.dtype, device: torch.device,
                 source_bits: float) -> int | None:
    """Bits of the single-token steps' weight copies (None: they read the dense weights)."""
    if choice != "auto":
        return _DECODE_WEIGHTS[choice]
    # Part of the fast path: dtype "auto" where it runs bfloat16 on CPU.
    if dtype != "auto" or resolved != torch.bfloat16 or device.type != "cpu":
        return None
    return 4 if source_bits <= _FOUR_BIT_SOURCE else 8


def _resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" or _cpu_has_bf16() else torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported (choose from auto, {', '.join(_DTYPES)})")
    return _DTYPES[dtype]


class Engine:
    """A model, its tokenizer, a paged KV store with prefix caching, and a continuous-batching scheduler.

    model: "smollm2-135m-instruct" (bundled GGUF), "tiny-random", a .gguf path or a Hugging Face directory.
    device: "auto" (CUDA when available), "cpu", "cuda", "cuda:1", ...
    dtype: "auto" (the fast path, default): bfloat16 on CUDA; on CPU bfloat16 where the CPU computes it
        natively (AVX512-BF16/AMX), else float32.
        "float32", "bfloat16", "float16": every weight in that type. "float64": the exact reference path
        (batch-invariant kernels, bitwise-identical cached and uncached logits).
    block_size / num_blocks: tokens per KV block / blocks in the store (None: sized from memory).
    seed: sampling seed, and the weights of "tiny-random".
    decode_weights: what single-token steps read for the layers' weights (a decoded token reads every
        weight once, so its time is their bytes); the activations stay unquantized:
        "int4": 4-bit codes with a scale and offset per 32 inputs (llama.cpp's Q4_1 layout; for a Q4_1 GGUF
        these are the file's own values, so nothing is lost beyond what the file already lost; Q4_0 is
        requantized onto it); "int8": one scale per output row; with either, the vocabulary head keeps an
        8-bit copy with a scale per 32 inputs (Q8_0's layout: a Q8_0 head's own values);
        "dense": the same weights as every other step.
        "auto" (default): on CPU with dtype "auto" where bfloat16 runs natively, int4 when the source stores
        its layers in 4-bit codes (at most 5 bits per weight with their block scales: Q4_0, Q4_1, Q4_K,
        IQ4, and the smaller ones) and int8 otherwise (never fewer bits than the source); else dense.
    int8_head: hold the vocabulary head in fbgemm's int8 (per-channel scales, activations quantized per
        call) for every step on CPU: its activation quantization costs accuracy (top-1 agreement with float32
        91.7% over the README in benchmarks/engine_accuracy.py, 100% without it), so off.
    """

    def __init__(
        self,
        model: str = "smollm2-135m-instruct",
        device: str = "auto",
        dtype: str = "auto",
        block_size: int = 16,
        num_blocks: int | None = None,
        seed: int = 0,
        *,
        max_num_seqs: int = 16,
        max_num_batched_tokens: int = 8192,
        batch_invariant: bool | None = None,
        int8_head: bool = False,
        decode_weights: str = "auto",
        accounting: AccountingConfig | None = None,
    ):
        self.config = EngineConfig(
            model,
            device,
            dtype,
            seed,
            CacheConfig(block_size, num_blocks),
            SchedulerConfig(max_num_seqs, max_num_batched_tokens),
            batch_invariant,
            accounting or AccountingConfig(enabled=False),
        )
        _check_decode_weights(decode_weights)  # before the load, which takes seconds
        self.device = _resolve_device(device)
        self.dtype = _resolve_dtype(dtype, self.device)
        loaded = load_model(model, seed)
        self.model_config = loaded.config
        self.tokenizer = loaded.tokenizer
        exact = self.dtype == torch.float64 if batch_invariant is None else batch_invariant
        bits = _decode_bits(decode_weights, dtype, self.dtype, self.device, loaded.layer_bits)
        codes = fuse_codes(loaded.config, loaded.codes) if bits and not exact else {}
        net = build_model(loaded.config, loaded.weights, self.device, self.dtype)
        del loaded
        # What the matmuls run on, for benchmarks and `describe()`: "oneDNN bfloat16, int8 head", "F.linear", ...
        packed = None if exact else net.pack_for_cpu(int8_head=int8_head, decode_bits=bits, codes=codes)
        del codes  # only for the decode copies
        self.kernels = packed or (
            "exact (batch-invariant)" if exact else "F.linear"
        )
        self.uses_onednn = self.kernels.startswith("oneDNN")
        blocks = num_blocks or self._default_num_blocks(block_size)
        self.block_manager = BlockManager(blocks, block_size)
        self.runner = ModelRunner(net, blocks, block_size, self.device, self.dtype, exact, seed)
        self.scheduler = Scheduler(
            self.config.scheduler, self.block_manager, self.tokenizer.stop_token_ids, net.config.max_position_embeddings
        )
        acc = self.config.accounting
        self.ledger = PrefixLedger(-(-acc.ledger_tokens // block_size), block_size) if acc.enabled else None
        self._requests: dict[int, Sequence] = {}
        self._finished = 0
        # Updates of other requests produced while a blocking helper ran: delivered by the next step().
        self._undelivered: list[RequestUpdate] = []

    def _default_num_blocks(self, block_size: int) -> int:
        cfg = self.model_config
        per_block = kv_bytes_per_block(cfg, block_size, self.dtype)
        wanted = math.ceil(_DEFAULT_CONTEXTS * cfg.max_position_embeddings / block_size)
        if self.device.type == "cuda":
            budget = torch.cuda.mem_get_info(self.device)[0] * _GPU_KV_FRACTION
        else:
            budget = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * _CPU_KV_FRACTION
        return max(1, min(wanted, int(budget // per_block)))

    # -- prompts ------------------------------------------------------------------------------------
    def apply_chat_template(self, messages: list[dict[str, str]], system: str | None = None) -> list[int]:
        """Token ids of a chat rendered with the model's template, ending with the assistant prompt."""
        if system is not None:
            messages = [{"role": "system", "content": system}, *messages]
        return self.tokenizer.encode(self.tokenizer.render_chat(messages, add_generation_prompt=True))

    # -- submit / step ------------------------------------------------------------------------------
    def add_request(
        self,
        prompt_token_ids: list[int],
        max_tokens: int = 64,
        temperature: float = 0.0,
        *,
        stop_token_ids: tuple[int, ...] = (),
        ignore_eos: bool = False,
        use_prefix_cache: bool = True,
        return_logits: bool = False,
    ) -> int:
        """Queue a request; returns its id. Nothing runs until `step()`.

        A prompt longer than the model can take with `max_tokens` more (its context, the KV store, the
        accounting window) runs on its window, the ledger accounting for the whole of it, when the engine was
        built with `accounting=AccountingConfig()` (see `localengine.accounting`); else it is refused
        (ValueError)."""
        self._check_prompt(prompt_token_ids)
        params = SamplingParams(
            max_tokens, temperature, tuple(stop_token_ids), ignore_eos, use_prefix_cache, return_logits
        )
        window = self.window_for(len(prompt_token_ids), max_tokens)
        seq = Sequence(window.select(prompt_token_ids), params, self.block_manager.block_size,
                       arrival=time.perf_counter())
        seq.window = window
        if self.ledger is not None and use_prefix_cache:
            seq.full_prompt = list(prompt_token_ids)
        self.scheduler.add(seq)
        self._requests[seq.seq_id] = seq
        return seq.seq_id

    def window_for(self, num_prompt_tokens: int, max_tokens: int = 0) -> Window:
        """The tokens of a prompt this long the model would attend to (all of them when it fits)."""
        bm, acc = self.block_manager, self.config.accounting
        room = min(self.model_config.max_position_embeddings, bm.num_blocks * bm.block_size) - max_tokens
        limit = min(room, acc.window_tokens or room)
        if num_prompt_tokens <= limit or not acc.enabled:
            return Window.whole(num_prompt_tokens)  # (the scheduler refuses it when it does not fit)
        if limit < 2 * bm.block_size:
            raise ValueError(f"{max_tokens} new tokens leave the model room for {max(limit, 0)} prompt tokens; "
                             "ask for fewer")
        head = min(acc.head_tokens, limit // 4)
        return plan_window(num_prompt_tokens, limit, head, acc.grid_tokens or max(1, (limit - head) // 2))

    def _check_prompt(self, ids: list[int]) -> None:
        if not ids:
            raise ValueError("the prompt is empty")
        vocab = self.model_config.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is outside the vocabulary (0..{vocab - 1})")

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished

    def abort_request(self, request_id: int) -> None:
        seq = self._requests.pop(request_id, None)
        if seq is not None and not seq.is_finished:
            self.scheduler.abort(seq)
        if seq is not None:
            self._release_ledger(seq)

    def step(self) -> list[RequestUpdate]:
        """Schedule, run one forward pass over every request in flight, sample; returns what changed."""
        updates, self._undelivered = self._undelivered, []
        batch = self.scheduler.schedule()
        if not batch:
            return updates
        start = time.perf_counter()
        for seq in batch.prefills:
            seq.prefill_start = start
            self._admit_to_ledger(seq)
        output = self.runner.run(batch)
        for seq, logits in zip(batch.seqs, output.logits):
            if logits is not None and seq.logits is None:
                seq.logits = logits.cpu()
        before = {seq.seq_id: seq.num_completion_tokens for seq in batch.seqs}
        finished = {seq.seq_id for seq in self.scheduler.postprocess(batch, output.token_ids)}
        for seq in batch.prefills:
            if seq.ledger is not None:
                self.ledger.computed(seq.ledger)  # its prompt is computed: now a hit for later prompts
        for seq in batch.seqs:
            if seq.seq_id not in self._requests:
                continue  # aborted meanwhile
            new = seq.completion_token_ids[before[seq.seq_id] :]
            done = seq.seq_id in finished
            result = self._result(seq) if done else None
            updates.append(RequestUpdate(seq.seq_id, new, done, result, seq.reported_cached_tokens, seq.window,
                                         seq.num_cached_tokens))
            if done:
                self._finished += 1
                self._release_ledger(seq)
                if not seq.params.return_logits:
                    del self._requests[seq.seq_id]
        return updates

    def _admit_to_ledger(self, seq: Sequence) -> None:
        """Look the whole prompt up in the ledger as its window is scheduled (once: a preempted request
        keeps its ledger blocks)."""
        if seq.full_prompt is not None and seq.ledger is None:
            seq.ledger = self.ledger.admit(seq.full_prompt)
            seq.full_prompt = None

    def _release_ledger(self, seq: Sequence) -> None:
        if seq.ledger is not None:
            self.ledger.release(seq.ledger)
            seq.ledger = None

    def _result(self, seq: Sequence) -> GenerationResult:
        first = seq.first_token_time or seq.finish_time or seq.arrival
        return GenerationResult(
            request_id=seq.seq_id,
            prompt_token_ids=seq.token_ids[: seq.num_prompt_tokens],
            token_ids=seq.completion_token_ids,
            text=self.tokenizer.decode(seq.completion_token_ids),
            finish_reason=seq.finish_reason or "length",
            num_prompt_tokens=seq.window.total if seq.window else seq.num_prompt_tokens,
            num_cached_tokens=seq.reported_cached_tokens,
            prefill_seconds=first - (seq.prefill_start or first),
            decode_seconds=(seq.finish_time or first) - first,
            first_token_seconds=first - seq.arrival,
            window=seq.window,
            model_cached_tokens=seq.num_cached_tokens,
        )

    # -- blocking helpers ---------------------------------------------------------------------------
    def generate(
        self,
        prompt_token_ids: list[int] | list[list[int]],
        max_tokens: int = 64,
        temperature: float = 0.0,
        *,
        stop_token_ids: tuple[int, ...] = (),
        ignore_eos: bool = False,
    ) -> GenerationResult | list[GenerationResult]:
        """Generate for one prompt (returns one result) or several served together (returns a list)."""
        if not prompt_token_ids:
            raise ValueError("the prompt is empty")
        single = isinstance(prompt_token_ids[0], int)
        prompts = [prompt_token_ids] if single else prompt_token_ids
        ids = [
            self.add_request(list(p), max_tokens, temperature, stop_token_ids=stop_token_ids, ignore_eos=ignore_eos)
            for p in prompts  # type: ignore[union-attr]
        ]
        results = self._run_until_done(ids)
        return results[0] if single else results

    def _run_until_done(self, request_ids: list[int]) -> list[GenerationResult]:
        results: dict[int, GenerationResult] = {}
        pending = set(request_ids)
        others: list[RequestUpdate] = []
        try:
            while pending:
                updates = self.step()
                if not updates and not self.has_unfinished_requests():
                    raise RuntimeError("the engine stopped with requests still pending")
                for update in updates:
                    if update.request_id not in request_ids:
                        others.append(update)
                    elif update.finished:
                        results[update.request_id] = update.result  # type: ignore[assignment]
                        pending.discard(update.request_id)
        finally:
            self._undelivered = others + self._undelivered
        return [results[i] for i in request_ids]

    def logits(self, prompt_token_ids: list[int], use_prefix_cache: bool = True) -> LogitsResult:
        """Logits at the last prompt position. With `use_prefix_cache=False` every token is computed (the
        prompt's blocks are still published, so a later request can reuse them)."""
        request_id = self.add_request(
            list(prompt_token_ids), max_tokens=0, use_prefix_cache=use_prefix_cache, return_logits=True
        )
        self._run_until_done([request_id])
        seq = self._requests.pop(request_id)
        return LogitsResult(seq.logits, seq.num_cached_tokens)

    # -- cache ----------------------------------------------------------------------------------------
    @property
    def stats(self) -> EngineStats:
        bm = self.block_manager
        return EngineStats(
            prefix_queries=bm.stats.prefix_queries,
            prefix_hits=bm.stats.prefix_hits,
            evictions=bm.stats.evictions,
            blocks_free=bm.num_free_blocks,
            blocks_cached_free=bm.num_cached_free_blocks,
            blocks_total=bm.num_blocks,
            block_size=bm.block_size,
            preemptions=self.scheduler.num_preemptions,
            requests_finished=self._finished,
        )

    def clear_cache(self) -> None:
        """Forget every cached prefix (the ledger's too); later requests compute their prompts from scratch."""
        self.block_manager.clear_cache()
        if self.ledger is not None:
            self.ledger.clear()
