"""Why a request read less than an ideal prefix cache would have allowed (docs/contracts.md §3 kinds)."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from kvprobe.wording import duration

KINDS = ("prefix_changed", "params_changed", "ttl_expired", "lookback_exceeded", "below_minimum",
         "not_yet_readable", "missing_breakpoint", "stale_read", "routing", "unexplained")

# Provider-reported miss reasons (Anthropic cache diagnostics) mapped onto our kinds: (kind, path, param).
# `previous_message_not_found` and `unavailable` name no cause and never become a diagnosis.
_REASON_KINDS = {"model_changed": ("params_changed", None, "model"),
                 "system_changed": ("prefix_changed", "system", None),
                 "tools_changed": ("prefix_changed", "tools", None),
                 "messages_changed": ("prefix_changed", "messages", None),
                 "ttl_expired": ("ttl_expired", None, None), "expired": ("ttl_expired", None, None)}


@dataclass(slots=True)
class Diagnosis:
    kind: str
    detail: str
    inferred: bool = True
    path: str | None = None
    token_position: int | None = None
    char_offset: int | None = None
    seconds_past: float | None = None
    writer_id: str | None = None
    positions_back: int | None = None
    limit: int | None = None
    prefix_tokens: int | None = None
    minimum_tokens: int | None = None
    param: str | None = None
    a: Any = None
    b: Any = None
    invalidates: str | None = None
    missed_tokens: int = 0  # tokens an ideal cache would have read that this request did not
    reported_missed_tokens: int | None = None  # the provider's own estimate (cache_missed_input_tokens)
    siblings: list[str] | None = None  # concurrent siblings sharing an unreadable prefix (start order)
    shared_tokens: int | None = None
    started_within_ms: int | None = None
    wrote: dict[str, int] | None = None  # cache writes of each sibling
    triggers: list[str] | None = None  # events the log shows just before the miss (usage-only logs; inferred)
    advice: str | None = None  # what to do about this miss in particular (else ADVICE for its kind)
    api_advice: str | None = None  # on an agent's log: the API's advice, where `advice` is the agent's knobs
    agent: str | None = None  # on an agent's log: whose knobs `advice` names (kvprobe.agents)
    evidence: str | None = None  # what in the log shows it (usage-only logs): one of EVIDENCE
    change: str | None = None  # evidence "transcript": how the history changed (importers.history.KINDS)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for name in _FIELD_NAMES:
            value = getattr(self, name)
            if value is not None or name in ("path", "token_position"):
                out[name] = round(value, 1) if isinstance(value, float) else value
        return out

    @property
    def short(self) -> str:
        """A few words for a table cell; a cause the provider reported says so."""
        return self._words() if self.inferred else f"{self._words()} (reported)"

    def _words(self) -> str:
        if self.kind == "prefix_changed":
            return f"prefix changed at {self.path}" if self.path else "prefix changed"
        if self.kind == "params_changed":
            return f"{self.param} changed" if self.param else "parameters changed"
        if self.kind == "ttl_expired":
            # how long before this request the entry expired (not the pause: that is this plus the lifetime)
            return f"TTL expired {duration(self.seconds_past)} before" if self.seconds_past is not None \
                else "TTL expired"
        if self.kind == "not_yet_readable" and self.siblings:
            return f"{len(self.siblings)} siblings started together"
        if self.kind == "not_yet_readable":
            return f"started before {self.writer_id} could be read" if self.writer_id else "not yet readable"
        if self.kind == "lookback_exceeded":
            return f"lookback {self.positions_back} > {self.limit}" if self.positions_back else "lookback exceeded"
        if self.kind == "stale_read":
            return f"read {self.writer_id}'s entry (stale)" if self.writer_id else "read an older entry"
        if self.kind == "below_minimum" and self.prefix_tokens is not None:
            return f"below minimum ({self.prefix_tokens:,} < {self.minimum_tokens:,})"
        return self.kind.replace("_", " ")


def from_provider_reason(reason: str, missed_tokens: int | None = None) -> Diagnosis:
    """A cause the provider reported (not inferred): Anthropic's cache_miss_reason, with its token estimate."""
    key = reason.strip().lower().replace(" ", "_")
    kind, path, param = _REASON_KINDS.get(key, ("unexplained", None, None))
    detail = f"provider reported: {reason}"
    if missed_tokens is not None:
        detail += f" (about {missed_tokens:,} input tokens after the divergence not read from cache)"
    return Diagnosis(kind, detail, inferred=False, path=path, param=param, reported_missed_tokens=missed_tokens)


ADVICE = {
    "prefix_changed": "keep the content before the last breakpoint byte-identical: move changing text "
                      "(timestamps, ids, per-turn state) after it",
    "params_changed": "keep identity parameters (tool_choice, thinking, model) fixed within a task",
    "ttl_expired": "send a keep-alive before the entry expires, or use a 1h TTL for long pauses",
    "lookback_exceeded": "add a breakpoint where the previous request ended, or merge many small blocks",
    "below_minimum": "the prefix is shorter than the model's minimum: nothing is cached until it grows",
    "not_yet_readable": "start parallel requests after the first one's response has begun",
    "missing_breakpoint": "add a cache_control breakpoint at the end of the shared prefix",
    "stale_read": "a read of an older request's entry came from a cache that had not seen the requests since (another "
                  "region or replica): keep one conversation on one region and its requests one at a time",
    "routing": "the request reached a cache that held nothing of this prompt: keep one conversation on one region "
               "or cache key, and its requests one at a time",
    "unexplained": "compare with the provider's cache diagnostics; eviction and routing are not predictable",
}


# What a usage-only cause rests on (`Diagnosis.evidence`): the transcript's rebuilt messages, the read falling
# to a level the log shows, the pause against the entry's lifetime, events the log shows, the model, and a
# platform's routing rule in providers/
EVIDENCE = ("transcript", "read_level", "pause", "log_events", "model", "platform_routing")


def advice_for(d: Diagnosis) -> str:
    """What to do about one miss: its own advice where the analysis priced one, else its kind's."""
    return d.advice or ADVICE.get(d.kind, "")


_FIELD_NAMES = tuple(f.name for f in fields(Diagnosis) if f.name != "kind")  # to_json runs once per miss
