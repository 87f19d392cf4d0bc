"""Measured ground truth beside the provider-rule simulation and the observed usage.

Provider tokens and engine tokens come from different tokenizers, so the provider's reuse is compared as a
fraction of its input: `provider_read_engine_tokens` is that fraction of the engine's prompt. Where the
provider read less than the engine's ideal prefix cache did, the difference (in engine tokens) divided by
the prefill throughput measured in the same replay estimates the latency the provider's miss cost.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kvprobe.analysis.simulate import RequestResult
from kvprobe.replay.drive import Measured


@dataclass(slots=True)
class Row:
    measured: Measured
    result: RequestResult | None  # the provider-rule simulation of the same record (None: not simulated)

    @property
    def provider_fraction(self) -> float | None:
        """Share of input the provider read from cache: observed when logged, else simulated."""
        r = self.result
        if r is None:
            return None
        if r.observed:
            return r.usage.cache_read_tokens / r.usage.input_tokens if r.usage.input_tokens else 0.0
        p = r.predicted
        if p is None:
            return None
        return p.cache_read_tokens / p.input_tokens if p.input_tokens else 0.0

    @property
    def shortfall_tokens(self) -> int | None:
        """Engine tokens the ideal cache reused that the provider did not."""
        frac, m = self.provider_fraction, self.measured
        if frac is None or m.cached_tokens is None or m.status != "replayed":
            return None
        return max(0, m.cached_tokens - round(frac * m.prompt_tokens))

    def to_json(self, seconds_per_token: float | None) -> dict[str, Any]:
        out = self.measured.to_json()
        r = self.result
        provider: dict[str, Any] | None = None
        if r is not None:
            p = r.predicted
            provider = {"provider": r.sk.provider, "model": r.sk.model,
                        "simulated": None if p is None else {"input_tokens": p.input_tokens,
                                                             "cache_read_tokens": p.cache_read_tokens,
                                                             "cache_write_tokens": p.cache_write_tokens},
                        "observed": None if not r.observed else {"input_tokens": r.usage.input_tokens,
                                                                 "cache_read_tokens": r.usage.cache_read_tokens,
                                                                 "cache_write_tokens": r.usage.cache_write_tokens},
                        "read_fraction": _round(self.provider_fraction, 4),
                        "diagnoses": [d.kind for d in r.diagnoses]}
        short = self.shortfall_tokens
        out["provider"] = provider
        out["shortfall_tokens"] = short
        out["shortfall_seconds_est"] = None if short is None or seconds_per_token is None else \
            round(short * seconds_per_token, 6)
        return out


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def seconds_per_fresh_token(measured: list[Measured]) -> float | None:
    """Prefill seconds per computed (uncached) prompt token over the replay: a throughput fit."""
    done = [m for m in measured if m.status == "replayed" and m.prefill_seconds is not None
            and m.cached_tokens is not None and m.prompt_tokens]
    tokens = sum(m.fresh_tokens for m in done)
    seconds = sum(m.prefill_seconds or 0.0 for m in done)
    return seconds / tokens if tokens > 0 and seconds > 0 else None


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _shape(reason: str | None) -> str:
    """A reason with its numbers and its tail blanked: errors that differ only in sizes, ids or the server's
    detail text are one kind."""
    return re.sub(r"\d+", "#", reason or "")[:60]


def group_not_replayed(measured: list[Measured]) -> tuple[dict[str, int], dict[str, list[str]]]:
    """One entry per kind of reason (the first request's full reason names it): counts and request ids."""
    keys: dict[tuple[str, str], str] = {}
    counts: dict[str, int] = {}
    ids: dict[str, list[str]] = {}
    for m in measured:
        if m.status == "replayed":
            continue
        key = keys.setdefault((m.status, _shape(m.reason)), f"{m.status}: {m.reason}")
        counts[key] = counts.get(key, 0) + 1
        ids.setdefault(key, []).append(m.id)
    return counts, ids


def summarize(rows: list[Row]) -> dict[str, Any]:
    measured = [r.measured for r in rows]
    done = [m for m in measured if m.status == "replayed"]
    known = [m for m in done if m.cached_tokens is not None]  # unknown cached tokens are left out, not zeros
    spt = seconds_per_fresh_token(known)
    prompt = sum(m.prompt_tokens for m in known)
    cached = sum(m.cached_tokens or 0 for m in known)
    with_provider = [r for r in rows if r.provider_fraction is not None and r.measured.status == "replayed"]
    provider_read = sum(round((r.provider_fraction or 0.0) * r.measured.prompt_tokens) for r in with_provider)
    provider_prompt = sum(r.measured.prompt_tokens for r in with_provider)
    shortfall = sum(r.shortfall_tokens or 0 for r in rows)
    not_replayed, not_replayed_ids = group_not_replayed(measured)
    sources = sorted({m.prompt_tokens_source or "unknown" for m in done})
    return {
        "requests": len(measured), "replayed": len(done),
        "skipped": sum(m.status == "skipped" for m in measured), "failed": sum(m.status == "failed" for m in measured),
        "truncated": sum(m.truncated_from is not None for m in done),
        "not_replayed": not_replayed, "not_replayed_ids": not_replayed_ids,
        "prompt_tokens": sum(m.prompt_tokens for m in done), "prompt_tokens_sources": sources,
        "cached_tokens": cached if known else None,
        "cache_unknown_requests": len(done) - len(known),
        "engine_hit_ratio": round(cached / prompt, 4) if prompt else None,
        "provider_hit_ratio": round(provider_read / provider_prompt, 4) if provider_prompt else None,
        "cold_requests": sum(m.warm is False for m in done), "warm_requests": sum(m.warm is True for m in done),
        "mean_first_token_seconds_cold": _mean([m.first_token_seconds for m in done
                                                if m.warm is False and m.first_token_seconds is not None]),
        "mean_first_token_seconds_warm": _mean([m.first_token_seconds for m in done
                                                if m.warm is True and m.first_token_seconds is not None]),
        "prefill_seconds": round(sum(m.prefill_seconds or 0.0 for m in done), 6),
        "decode_seconds": round(sum(m.decode_seconds or 0.0 for m in done), 6),
        "first_token_seconds": round(sum(m.first_token_seconds or 0.0 for m in done), 6),
        "prefill_tokens_per_second": round(1 / spt, 1) if spt else None,
        "provider_shortfall_tokens": shortfall,
        "provider_shortfall_seconds_est": round(shortfall * spt, 6) if spt else None,
    }
