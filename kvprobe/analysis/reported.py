"""What the provider itself says about a miss: Anthropic's cache diagnostics, read from a response or a log.

A request that carries `diagnostics: {"previous_message_id": ...}` gets a `diagnostics` object back
(shapes and sources in providers/anthropic.toml, rule `cache_diagnostics`):
* `null`: no divergence from the named request (or nothing named: the first turn);
* `{"cache_miss_reason": null}`: the comparison was still running (inconclusive);
* `{"cache_miss_reason": {"type": ..., "cache_missed_input_tokens": N}}`: the first divergence.
Only the four `*_changed` reasons name a cause; `previous_message_not_found` and `unavailable` say the API
could not compare, so kvprobe's own inference stands. `expected_reason` puts kvprobe's own comparison of
two requests in the API's words, so the two verdicts can be shown side by side.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvprobe.catalog import rules_for
from kvprobe.diff import diff_requests
from kvprobe.request import render_request


def _rule(name: str) -> Any:
    return (rules_for("anthropic", None).get("cache_diagnostics") or {}).get(name)


@dataclass(frozen=True, slots=True)
class Reported:
    reason: str | None  # cache_miss_reason.type; None: no divergence (or pending)
    missed_tokens: int | None = None  # the API's estimate, on the *_changed reasons
    pending: bool = False

    @property
    def is_cause(self) -> bool:
        """A divergence the API located (model, tools, system or messages changed)."""
        return self.reason is not None and self.reason.endswith("_changed")

    @property
    def words(self) -> str:
        if self.pending:
            return "pending"
        if self.reason is None:
            return "no divergence"
        return self.reason + (f" ({self.missed_tokens:,} tokens)" if self.missed_tokens is not None else "")


def read_reported(response: Any) -> Reported | None:
    """The API's diagnostics in a response body (or a log's copy of it); None when it carries none."""
    if not isinstance(response, dict):
        return None
    if "diagnostics" in response:
        diag = response["diagnostics"]
        if diag is None:
            return Reported(None)
        if not isinstance(diag, dict):
            return None
        return _reason(diag.get("cache_miss_reason"), pending_if_null="cache_miss_reason" in diag)
    usage = response.get("usage")  # older logs kept a bare reason string beside usage
    if isinstance(usage, dict) and isinstance(usage.get("cache_miss_reason"), str):
        return _reason(usage["cache_miss_reason"], pending_if_null=False)
    return None


def _reason(raw: Any, pending_if_null: bool) -> Reported | None:
    if raw is None:
        return Reported(None, pending=pending_if_null)
    if isinstance(raw, str):
        return Reported(raw) if raw else None
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        return None
    tokens = raw.get(_rule("missed_tokens_field") or "cache_missed_input_tokens")
    return Reported(raw["type"], tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None)


def expected_reason(a_body: dict[str, Any], b_body: dict[str, Any]) -> str | None:
    """kvprobe's own comparison of request B with the earlier A, in the API's vocabulary (None: B only
    appends to A, or is identical)."""
    strip = ("stream", "diagnostics")
    a = render_request({k: v for k, v in a_body.items() if k not in strip}, "anthropic")
    b = render_request({k: v for k, v in b_body.items() if k not in strip}, "anthropic")
    if any(a_body.get(name) != b_body.get(name) for name in _rule("model_identity") or ["model"]):
        return "model_changed"
    d = diff_requests(a, b)
    if d.first_change is not None and not d.extends:
        level = d.first_change.path.split("[", 1)[0].split(".", 1)[0]
        return f"{level}_changed"
    if any(a_body.get(name) != b_body.get(name) for name in _rule("unavailable_params") or []):
        return "unavailable"
    return None


def side_by_side(previous_body: dict[str, Any] | None, body: dict[str, Any], response: Any) -> dict[str, Any]:
    """The API's verdict on `body` against the previous request, and kvprobe's own, in the same words."""
    reported = read_reported(response)
    ours = expected_reason(previous_body, body) if previous_body is not None else None
    api = None if reported is None or reported.pending else reported.reason
    return {"api": reported.words if reported else "not reported", "api_reason": api,
            "api_missed_tokens": reported.missed_tokens if reported else None,
            "kvprobe_reason": ours, "agree": reported is not None and not reported.pending and api == ours}
