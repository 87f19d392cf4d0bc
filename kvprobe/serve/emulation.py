"""What the server reports as cache usage: the engine's ground truth, or a provider's rules emulated.

Emulation runs kvprobe's provider simulators (`kvprobe.sim`) over the served prompt, with each block's
token count taken from the engine's tokenizer, so the reported usage is exact for the prompt the engine saw.
The engine still reuses K/V wherever it can (that is only speed); the usage follows the provider's rules:
breakpoints, minimum length, lookback, TTL and readability. Entries a request writes become readable when its
response begins (Anthropic) or when it finishes (implicit caches), on the real clock or on a virtual one.

Each API is emulated as the provider that speaks it: `--emulate PROVIDER/MODEL` names whose rules replace
that default on the APIs PROVIDER serves (its `endpoints` in providers/; a provider that lists none serves an
OpenAI-compatible Chat Completions API), and the model whose rules apply (none: the model each client asks
for). So one server emulates Claude for Claude Code and GPT for Codex at once, each by its own rules.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kvprobe.catalog import PROVIDERS, ModelRules, load_catalog, rules_for
from kvprobe.request.model import RenderedRequest
from kvprobe.sim import AnthropicCache, BreakpointCache, Prediction, PrefixCache, cache_for, cache_name

# The API each served path speaks, and the provider that speaks it natively.
API_PATHS = {"anthropic": "/v1/messages", "openai_chat": "/v1/chat/completions",
             "openai_responses": "/v1/responses", "gemini": ":generateContent"}
NATIVE = {"anthropic": "anthropic", "openai_chat": "openai", "openai_responses": "openai", "gemini": "gemini"}


@dataclass(frozen=True, slots=True)
class EmulateSpec:
    provider: str
    model: str | None  # None: the model each client sends picks the rules

    @classmethod
    def parse(cls, value: str) -> EmulateSpec:
        provider, _, model = value.strip().partition("/")
        provider = provider.lower()
        if provider not in PROVIDERS:
            raise ValueError(f"--emulate {value!r}: unknown provider {provider!r} (expected PROVIDER/MODEL, "
                             f"provider one of {', '.join(sorted(PROVIDERS))})")
        return cls(provider, model or None)

    def serves(self, api: str) -> bool:
        """Whether this provider speaks the API (its `endpoints` in providers/)."""
        catalog = load_catalog().get(self.provider)
        endpoints = catalog.endpoints if catalog is not None else ()
        if not endpoints:
            return api == "openai_chat"
        return any(API_PATHS[api] in e or e in API_PATHS[api] for e in endpoints)

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}" if self.model else self.provider


def parse_specs(values: str | list[str] | tuple[str, ...]) -> list[EmulateSpec]:
    """`--emulate` values (one, or several for different APIs): ValueError naming a bad one."""
    items = [values] if isinstance(values, str) else list(values)
    specs = [EmulateSpec.parse(part) for value in items for part in value.split(",") if part.strip()]
    if not specs:
        raise ValueError("--emulate: expected PROVIDER/MODEL")
    return specs


class CacheEmulator:
    """The provider caches (one workspace each): every request the server answers goes through its API's."""

    def __init__(self, specs: list[EmulateSpec]) -> None:
        self.specs = specs
        self.caches: dict[str, AnthropicCache | BreakpointCache | PrefixCache] = {}
        self._pending: dict[str, tuple[str, list[int]]] = {}  # request id -> (cache, keys not readable yet)

    @property
    def label(self) -> str:
        return ",".join(str(s) for s in self.specs)

    def spec_for(self, api: str, provider: str | None = None) -> EmulateSpec:
        """Whose rules an API's requests follow: the first spec whose provider speaks it, else the request's
        own provider (the one its model names) or the API's."""
        return next((s for s in self.specs if s.serves(api)), EmulateSpec(provider or NATIVE[api], None))

    def reset(self) -> None:
        self.caches.clear()
        self._pending.clear()

    def rules(self, request: RenderedRequest, api: str) -> ModelRules:
        spec = self.spec_for(api, request.provider)
        return rules_for(spec.provider, spec.model or request.model, None, request.cache_mode, request.retention)

    def admit(self, request: RenderedRequest, api: str, request_id: str, start: float) -> Prediction:
        """Usage for a request starting at `start` (block token counts must be set). What it writes stays
        unreadable until `began`/`finished` says so."""
        provider = self.spec_for(api, request.provider).provider
        name = cache_name(provider, None, request.cache_mode)
        cache = self.caches.get(name)
        if cache is None:
            cache = self.caches[name] = cache_for(request.cache_mode)
        pred = cache.process(request, self.rules(request, api), request_id, start, math.inf)
        keys = {b.cache_key for b in request.blocks}
        self._pending[request_id] = (name, [k for k in keys if self._is_pending(cache, k, request_id)])
        return pred

    @staticmethod
    def _is_pending(cache: AnthropicCache | BreakpointCache | PrefixCache, key: int, request_id: str) -> bool:
        entry = cache.entries.get(key)
        return entry is not None and entry.writer_id == request_id and entry.readable_at == math.inf

    def began(self, request_id: str, when: float, rules: ModelRules) -> None:
        """The response began: entries become readable now where the provider allows that."""
        if str(rules.get("readable_after", "first_token")) == "first_token":
            self._make_readable(request_id, when)

    def finished(self, request_id: str, when: float) -> None:
        self._make_readable(request_id, when)

    def failed(self, request_id: str) -> None:
        """A request that never produced a response leaves nothing readable behind."""
        name, keys = self._pending.pop(request_id, ("", []))
        cache = self.caches.get(name)
        for key in keys:
            if cache is not None and self._is_pending(cache, key, request_id):
                del cache.entries[key]

    def _make_readable(self, request_id: str, when: float) -> None:
        name, keys = self._pending.pop(request_id, ("", []))
        cache = self.caches.get(name)
        for key in keys:
            entry = cache.entries.get(key) if cache is not None else None
            if entry is not None and entry.readable_at > when:
                entry.readable_at = when
