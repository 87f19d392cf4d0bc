"""Tokenizers built from GGUF metadata with the `tokenizers` library, and chat templates via jinja2.

GGUF stores a BPE vocabulary (`tokenizer.ggml.tokens`, `.merges`, `.token_type`) and names llama.cpp's
pre-tokenizer in `tokenizer.ggml.pre`. For SmolLM2 ("smollm") that is: every digit on its own, then
GPT-2 byte-level splitting. Control tokens (type 3) such as `<|im_start|>` are added as special tokens,
so they are recognised inside text (chat templates rely on it) and dropped by `decode` by default.
"""

from __future__ import annotations

from collections.abc import Sequence

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

_CONTROL, _USER_DEFINED = 3, 4

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _pre_tokenizer(name: str):
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if name == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if name in ("gpt2", "default"):
        return byte_level
    raise ValueError(f"GGUF pre-tokenizer {name!r} is not supported (supported: smollm, gpt2, default)")


def _raise(message: str):
    raise ValueError(f"chat template: {message}")


class Tokenizer:
    """Text <-> token ids, plus the model's chat template."""

    def __init__(self, backend: HFTokenizer, chat_template: str, eos_token_id: int, bos_token_id: int | None = None):
        self.backend = backend
        self.chat_template = chat_template
        self.eos_token_id = eos_token_id
        self.bos_token_id = bos_token_id
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        self._template = env.from_string(chat_template)

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_gguf_metadata(cls, meta: dict[str, object]) -> Tokenizer:
        kind = meta.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"GGUF tokenizer model {kind!r} is not supported (only byte-level BPE, 'gpt2')")
        tokens: list[str] = list(meta["tokenizer.ggml.tokens"])  # type: ignore[arg-type]
        types: list[int] = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))  # type: ignore[arg-type]
        merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]  # type: ignore[union-attr]
        backend = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
        backend.pre_tokenizer = _pre_tokenizer(str(meta.get("tokenizer.ggml.pre", "default")))
        backend.decoder = decoders.ByteLevel()
        specials = [t for t, kind in zip(tokens, types) if kind in (_CONTROL, _USER_DEFINED)]
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        template = meta.get("tokenizer.chat_template") or CHATML_TEMPLATE
        bos = meta.get("tokenizer.ggml.bos_token_id")
        return cls(backend, str(template), int(meta["tokenizer.ggml.eos_token_id"]), None if bos is None else int(bos))  # type: ignore[arg-type]

    @classmethod
    def byte_level(cls) -> Tokenizer:
        """256 byte tokens after three ChatML specials: the tokenizer of the tiny random model."""
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
        vocab = {t: i for i, t in enumerate(specials + alphabet)}
        backend = HFTokenizer(models.BPE(vocab=vocab, merges=[]))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        backend.decoder = decoders.ByteLevel()
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        return cls(backend, CHATML_TEMPLATE, eos_token_id=2, bos_token_id=1)

    # -- use -----------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """End of sequence plus the usual end-of-turn tokens this vocabulary has."""
        ids = {self.eos_token_id}
        for name in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>"):
            token_id = self.token_to_id(name)
            if token_id is not None:
                ids.add(token_id)
        return tuple(sorted(ids))

    def render_chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or "role" not in message or "content" not in message:
                raise ValueError(f"message {i} must be a dict with 'role' and 'content', got {message!r}")
        bos = self.backend.id_to_token(self.bos_token_id) if self.bos_token_id is not None else ""
        eos = self.backend.id_to_token(self.eos_token_id) or ""
        return self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos
        )
