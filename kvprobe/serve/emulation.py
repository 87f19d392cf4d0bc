"""What the server reports as cache usage: the engine's ground truth, or a provider's rules emulated.

Emulation runs kvprobe's provider simulators (`kvprobe.sim`) over the served prompt, with each block's
token count taken from the engine's tokenizer, so the reported usage is exact for the prompt the engine saw.
The engine still reuses K/V wherever it can (that is only speed); the usage follows the provider's rules:
breakpoints, minimum length, lookback, TTL and readability. Entries a request writes become readable when its
response begins (Anthropic) or when it finishes (implicit caches), on the real clock or on a virtual one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kvprobe.catalog import PROVIDERS, ModelRules, rules_for
from kvprobe.request.model import RenderedRequest
from kvprobe.sim import AnthropicCache, Prediction, PrefixCache, cache_for

SUPPORTED = ("anthropic", "openai", "deepseek")


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
                             f"provider one of {', '.join(SUPPORTED)})")
        if provider not in SUPPORTED:
            raise ValueError(f"--emulate {value!r}: {provider} caching is not emulated yet "
                             f"(supported: {', '.join(SUPPORTED)})")
        return cls(provider, model or None)

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}" if self.model else self.provider


class CacheEmulator:
    """One provider cache (one workspace): every request the server answers goes through it, in order."""

    def __init__(self, spec: EmulateSpec) -> None:
        self.spec = spec
        self.cache: AnthropicCache | PrefixCache = cache_for(spec.provider)
        self._pending: dict[str, list[int]] = {}  # request id -> keys it wrote that are not readable yet

    def reset(self) -> None:
        self.cache = cache_for(self.spec.provider)
        self._pending.clear()

    def rules(self, client_model: str | None) -> ModelRules:
        return rules_for(self.spec.provider, self.spec.model or client_model)

    def admit(self, request: RenderedRequest, request_id: str, start: float) -> Prediction:
        """Usage for a request starting at `start` (block token counts must be set). What it writes stays
        unreadable until `began`/`finished` says so."""
        pred = self.cache.process(request, self.rules(request.model), request_id, start, math.inf)
        keys = {b.cache_key for b in request.blocks}
        self._pending[request_id] = [k for k in keys if self._is_pending(k, request_id)]
        return pred

    def _is_pending(self, key: int, request_id: str) -> bool:
        entry = self.cache.entries.get(key)
        return entry is not None and entry.writer_id == request_id and entry.readable_at == math.inf

    def began(self, request_id: str, when: float, model: str | None) -> None:
        """The response began: entries become readable now where the provider allows that."""
        if str(self.rules(model).get("readable_after", "first_token")) == "first_token":
            self._make_readable(request_id, when)

    def finished(self, request_id: str, when: float) -> None:
        self._make_readable(request_id, when)

    def failed(self, request_id: str) -> None:
        """A request that never produced a response leaves nothing readable behind."""
        for key in self._pending.pop(request_id, []):
            if self._is_pending(key, request_id):
                del self.cache.entries[key]

    def _make_readable(self, request_id: str, when: float) -> None:
        for key in self._pending.pop(request_id, []):
            entry = self.cache.entries.get(key)
            if entry is not None and entry.readable_at > when:
                entry.readable_at = when
