"""Usage-only logs (Claude Code, Codex, Gemini CLI, OpenTelemetry, …): why a request read less than its
stream had cached, from what the log itself shows.

Without request bodies nothing says which block changed, but the log says a good deal:
* the read: everything through `read` tokens was reused, so the prefix broke after it. A read that falls to a
  size the log shows to be a cache level names the level that broke: the tools+system size (what the first
  request after a compaction reads), a prefix several sessions share (what their first requests read), a
  size the session's reads fall to again and again (an earlier breakpoint, or on an implicit cache a start
  its prompts share), or nothing (the tools level);
* the transcript's own events since the previous request, which importers carry on the next record as
  `extra["events"]` (kvprobe.importers.events): a compaction, a tool list that changed, a background task's
  notification, an interrupt, a changed setting; the model (caches are per model) and the idle time;
* the lifetime in force, from the stream's own writes (`ephemeral_1h_input_tokens`: 1h entries);
* the messages the importer rebuilt (`extra["history"]`, `analysis.rebuilt`): a change inside the history at
  its message, an append-only history that rules content out, reads of an earlier request's entry (another
  replica, a branch) and reads of nothing on a platform that routes between caches (`cache_routing` rules).

Every cause found this way is inferred, and says so. A shortfall within the estimate noise
(`explain.estimate_noise`) is no miss. A pause longer than any lifetime the provider offers, that no
keep-alive pays for, is a new start (nothing could have been read), not an expiry. Advice is priced on the
miss it is for (`economics.keep_alive`): a keep-alive only under its break-even pause, a longer lifetime only
where the provider has one and it covers the pause.

`UsageOnly.step` explains each request with the levels known so far (what `watch` sees); `revisit` explains
a whole trace again once every level is known (what `report` shows).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvprobe.analysis.diagnosis import Diagnosis, from_provider_reason
from kvprobe.analysis.explain import estimate_noise
from kvprobe.analysis.rebuilt import (Scale, after_reasoning_dropped, append_only, change_position, content_change,
                                     dropped_reasoning, earlier_levels, known_extent, reasoning_change, routing,
                                     stale_read, step_of, where_read_ends, whole_history_changed)
from kvprobe.analysis.streams import Seen, resends
from kvprobe.catalog import ModelRules, Rule
from kvprobe.economics import keep_alive
from kvprobe.wording import duration

if TYPE_CHECKING:
    from kvprobe.analysis.simulate import RequestResult

IDLE_SHARE = 0.5  # a pause past this share of the entry's lifetime is named: idle entries are evicted first
_LONG_TTL = "1h"


def events_of(extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The events a record carries (well-formed ones only: a trace written by hand may hold anything)."""
    value = extra.get("events")
    if not isinstance(value, list):
        return []
    return [e for e in value if isinstance(e, dict) and isinstance(e.get("kind"), str)]


@dataclass(slots=True)
class Levels:
    """Prefix sizes the log shows to be cache levels (learned from the log itself)."""

    first_reads: dict[tuple, dict[int, set[str]]] = field(default_factory=dict)  # (provider, model) -> sessions
    after_compaction: dict[tuple, set[int]] = field(default_factory=dict)  # (session, model) -> sizes
    drops: dict[tuple, Counter] = field(default_factory=dict)  # (session, model) -> reads that fell to a size

    def learn(self, r: "RequestResult", first: bool, compacted: bool, dropped: bool) -> None:
        sk, read = r.sk, r.usage.cache_read_tokens
        if read <= 0:
            return
        if first:
            self.first_reads.setdefault((sk.provider, sk.model), {}).setdefault(read, set()).add(sk.session)
        if compacted:
            self.after_compaction.setdefault((sk.session, sk.model), set()).add(read)
        if dropped:
            self.drops.setdefault((sk.session, sk.model), Counter())[read] += 1

    def name(self, r: "RequestResult") -> tuple[str | None, str] | None:
        """(level path, words) when the read falls to a known level; None otherwise."""
        sk, read = r.sk, r.usage.cache_read_tokens
        if read <= 0:
            return None
        if read in self.after_compaction.get((sk.session, sk.model), ()):
            return "messages", ("the tools+system size of this session (what it read after its compaction): the "
                                "messages level broke")
        if len(self.first_reads.get((sk.provider, sk.model), {}).get(read, ())) >= 2:
            return "system", ("the prefix several sessions share (what their first requests read): the session's "
                              "own system prompt and all after it broke")
        if self.drops.get((sk.session, sk.model), Counter())[read] >= 2:
            where = "an earlier breakpoint" if r.rules.get("matching") == "blocks" else \
                "a start its prompts share, such as the instructions and tools"  # implicit caches have no breakpoints
            return None, f"a size this session's reads fall to again and again ({where}): the prefix broke after it"
        return None

    def tools_system(self, r: "RequestResult") -> int | None:
        """The largest tools+system size known for the request's session and model that fits in it."""
        sizes = [s for s in self.after_compaction.get((r.sk.session, r.sk.model), ()) if s <= r.usage.input_tokens]
        return max(sizes) if sizes else None


@dataclass(slots=True)
class _Stream:
    last: "RequestResult | None" = None
    by_model: dict[str | None, "RequestResult"] = field(default_factory=dict)
    ttl: dict[str | None, str] = field(default_factory=dict)  # model -> TTL key of its latest writes
    earlier: dict[str | None, dict[int, "RequestResult"]] = field(default_factory=dict)  # model -> level -> request
    scale: Scale = field(default_factory=Scale)  # real tokens per estimated token of its rebuilt messages
    by_id: dict[str, "RequestResult"] = field(default_factory=dict)  # requests a later turn's change names
    turn_starts: dict[str | None, dict[int, "RequestResult"]] = field(default_factory=dict)  # model -> level -> req
    # model -> what the stream's first request of it read: cached before the conversation began (shared with
    # other sessions), so at most what an expiry of the conversation's own entries leaves
    opened: dict[str | None, int] = field(default_factory=dict)
    recent: deque = field(default_factory=deque)  # start times of its requests in the last minute (any model)
    # the events logged before its requests sent with caching off since the last other one (`UsageOnly.step`):
    # they are the next other one's
    carried: list = field(default_factory=list)

    def update(self, r: "RequestResult") -> None:
        self.opened.setdefault(r.sk.model, r.usage.cache_read_tokens)
        self.recent.append(r.sk.started_at)
        while self.recent and self.recent[0] < r.sk.started_at - PER_MINUTE:
            self.recent.popleft()
        base = self.by_model.get(r.sk.model)
        changed_at = change_position(r, base, self.scale)
        self.scale.learn(r, base)
        self.last = r
        if not _went_elsewhere(r, base):
            self.by_model[r.sk.model] = r
        earlier = self.earlier.setdefault(r.sk.model, {})
        dropped = dropped_reasoning(r)
        if dropped is not None:
            source = self.by_id.get(str(dropped[1].get("request")))
            if source is not None and source.sk.model != r.sk.model:
                source = None  # caches are per model: another model's request left no entry this one reads
            after_reasoning_dropped(earlier, self.turn_starts.setdefault(r.sk.model, {}), dropped[0], source)
        self.by_id[r.sk.id] = r
        earlier_levels(earlier, r, step_of(r), changed_at)
        u = r.usage
        if u.cache_write_tokens:
            self.ttl[r.sk.model] = _LONG_TTL if u.cache_write_1h_tokens and not u.cache_write_5m_tokens else "5m"


class UsageOnly:
    """The usage-only path of the simulator: one `step` per request, in start order."""

    def __init__(self, levels: Levels | None = None, learning: bool = True) -> None:
        self.levels = levels if levels is not None else Levels()
        self.learning = learning
        self.streams: dict[tuple[str, str], _Stream] = {}
        self.unsettled = 0  # requests a level learned later can explain again: short reads, cut prompts

    def step(self, r: "RequestResult") -> None:
        """Set the request's ideal read, write kind and diagnoses."""
        sk = r.sk
        stream = self.streams.get((sk.session, sk.agent))
        if stream is None:
            stream = self.streams[(sk.session, sk.agent)] = _Stream()
        first = stream.last is None
        events = stream.carried + events_of(sk.extra)
        if sk.extra.get("cache_requested") == CACHING_OFF:
            # the log says caching was off: nothing could be read (no miss), and it neither left nor refreshed
            # an entry: the stream's next request is explained against the ones before it, with the events
            # that came before this one
            r.diagnoses, r.ideal_read_tokens = [], 0
            r.write_kind = _write_kind(r)
            stream.carried = events
            return
        stream.carried = []
        compacted = any(e["kind"] == "compaction" for e in events) or whole_history_changed(r)
        dropped, on_level = _explain(r, stream, events, self.levels)
        r.write_kind = _write_kind(r)
        self.unsettled += dropped or on_level
        if self.learning:
            self.levels.learn(r, first, compacted, dropped)
        stream.update(r)

    def revisit(self, results: list["RequestResult"]) -> None:
        """Explain the usage-only requests again, with every level the whole trace shows (start order)."""
        if not self.unsettled:
            return  # nothing fell short or rested on the tools+system level: a level learned later changes nothing
        again = UsageOnly(self.levels, learning=False)
        for r in results:
            if r.sk.request is None:
                again.step(r)


def _write_kind(r: "RequestResult") -> str:
    from kvprobe.analysis.simulate import _write_kind as kind, tolerance  # simulate imports this module

    return kind(r.usage, r.ideal_read_tokens, tolerance(r.rules))


def _explain(r: "RequestResult", stream: _Stream, events: list[dict[str, Any]],
             levels: Levels) -> tuple[bool, bool]:
    """Set r.ideal_read_tokens and r.diagnoses; (whether the read fell short of what was cached, whether the
    ideal rests on the tools+system level known so far)."""
    sk, usage = r.sk, r.usage
    r.diagnoses = []
    base, switched, own = _base(r, stream)
    if base is None:
        r.ideal_read_tokens = 0
        if switched is not None:
            r.diagnoses = [_model_switch(r, switched, own)]
        return False, False
    ideal = min(known_extent(base), usage.input_tokens)
    compacted = any(e["kind"] == "compaction" for e in events) or whole_history_changed(r)
    shrank = usage.input_tokens + estimate_noise(r) < known_extent(base)
    changed_at = change_position(r, base, stream.scale)
    on_level = False  # the ideal is the tools+system level known so far
    if changed_at is not None and not compacted:  # the transcript shows where: the prefix before it is reusable
        ideal = min(max(changed_at, usage.cache_read_tokens), ideal)
    elif compacted or shrank:  # the history was replaced or cut: at most the tools+system level is reusable
        ideal, on_level = min(levels.tools_system(r) or usage.cache_read_tokens, usage.input_tokens), True
    r.ideal_read_tokens = ideal
    reported = sk.observed.miss_reason if r.observed else None
    if reported:
        r.diagnoses = [_with_missed(r, from_provider_reason(reported, sk.extra.get("reported_missed_tokens")))]
        return usage.cache_read_tokens < ideal, on_level
    if usage.cache_read_tokens + estimate_noise(r) >= ideal:
        r.ideal_read_tokens = min(ideal, max(usage.cache_read_tokens, 0))  # within the noise: not a miss
        return False, on_level
    d = _shortfall(r, base, stream, events, levels, compacted or shrank)
    if d is not None:
        r.diagnoses = [_with_missed(r, _with_rate(r, stream, d))]
    return True, on_level


PER_MINUTE = 60.0


def _with_rate(r: "RequestResult", stream: _Stream, d: Diagnosis) -> Diagnosis:
    """Where the provider sends a key's requests elsewhere past a rate (`cache_routing`'s overflow_per_minute in
    providers/: OpenAI's ~15 a minute per prefix and key), a read of another cache or of none says how many
    requests this conversation sent in the minute before it: over the rate, fewer in parallel help; under it,
    no setting of the user's does."""
    rule = r.rules.rules.get("cache_routing")
    limit = rule.value.get("overflow_per_minute") if rule is not None and isinstance(rule.value, dict) else None
    if d.kind not in _RATE_KINDS or not isinstance(limit, int):
        return d
    since = r.sk.started_at - PER_MINUTE
    sent = sum(1 for t in stream.recent if since <= t <= r.sk.started_at)
    side = "over" if sent > limit else "under"
    d.detail += (f"; this conversation sent {sent} request{'' if sent == 1 else 's'} in the minute before it, {side} "
                 f"the ~{limit} a minute past which {rule.value.get('name', 'the provider')} sends some elsewhere")
    return d


_RATE_KINDS = ("routing", "unexplained", "stale_read")


def _base(r: "RequestResult", stream: _Stream) -> tuple["RequestResult | None", str | None, "RequestResult | None"]:
    """(the request whose cache this one could read, the model switched from, the same model's last request
    when its entry expired meanwhile). The base is the stream's last request of the same model, unless the
    model changed and that model's own entry has expired (or never existed, or no lifetime is known): then
    nothing was readable. A
    request of another model than the last one is a switch only when it resends that one's prompt (about as
    long: `analysis.streams`); else it is a call of its own model's stream (a router or side call)."""
    last = stream.last
    if last is None:
        return None, None, None
    if last.sk.model == r.sk.model:
        return stream.by_model.get(r.sk.model, last), None, None  # (an earlier one where `last` went elsewhere)
    same = stream.by_model.get(r.sk.model)
    if not resends(Seen(r, r.sk.model, None, r.usage.input_tokens), Seen(last, last.sk.model, None,
                                                                           last.usage.input_tokens)):
        return same, None, None  # a prompt of its own (a router or side call): its model's stream, not a switch
    lifetime = _lifetime(same, stream)[0] if same is not None else None
    if same is None or lifetime is None or r.sk.started_at - same.sk.started_at >= lifetime:  # gone at exactly it
        # without a lifetime (rules that give none: a local server) nothing says its own entry expired
        return None, last.sk.model or "another model", same if lifetime is not None else None
    return same, None, None


# A request that reached another cache (routed there, or a replica behind) left the entry it missed where it was:
# the next request's base stays the one that left it, when this one is not known to have left as much (an implicit
# cache reports no writes, so after a read of nothing the known extent would otherwise fall to nothing, and every
# later read of nothing with it, within the lifetime and on a history that only grew, would pass as no miss)
_ELSEWHERE = ("routing", "stale_read")


def _went_elsewhere(r: "RequestResult", base: "RequestResult | None") -> bool:
    # (`base` is the stream's request of r's own model: caches are per model)
    return base is not None and known_extent(r) < known_extent(base) and \
        any(d.kind in _ELSEWHERE for d in r.diagnoses)


def _lifetime(base: "RequestResult", stream: _Stream) -> tuple[float | None, ModelRules, str | None]:
    """(seconds an entry of `base` lives, the rules with that lifetime in force, what in the log chose it: None
    for the default): 1h where `base` says it asked for 1h (`extra["cache_requested"]`, Claude Code's
    promptCacheRequested), or says nothing and the stream's latest writes were all 1h entries."""
    rules = base.rules
    said = base.sk.extra.get("cache_requested")
    ttl = said if said in REQUESTED_TTLS else stream.ttl.get(base.sk.model)
    offered = rules.get("ttl_seconds")
    if ttl != _LONG_TTL or not isinstance(offered, dict) or _LONG_TTL not in offered:
        return keep_alive.entry_lifetime_s(rules), rules, None
    chosen, source = (_SAID_TTL, "the log's promptCacheRequested") if said == _LONG_TTL else \
        (_WRITTEN_TTL, "the log's own writes (ephemeral_1h_input_tokens)")
    rule = Rule("default_ttl", _LONG_TTL, source, dt.date.today())
    rules = dataclasses.replace(rules, rules={**rules.rules, "default_ttl": rule})
    return keep_alive.entry_lifetime_s(rules), rules, chosen


# what a usage-only log can say it asked for (Claude Code's promptCacheRequested), and the 1h TTL's two grounds
REQUESTED_TTLS = ("5m", _LONG_TTL)
CACHING_OFF = "off"
_SAID_TTL = "the 1h TTL the log says the request asked for"
_WRITTEN_TTL = "the 1h TTL of this log’s own writes"


def _shortfall(r: "RequestResult", base: "RequestResult", stream: _Stream, events: list[dict[str, Any]],
               levels: Levels, cut: bool) -> Diagnosis | None:
    """The cause of a read that fell short, from the pause, the level it fell to and the events before it."""
    gap = r.sk.started_at - base.sk.started_at
    lifetime, rules, chosen = _lifetime(base, stream)
    before = f"{known_extent(base):,}"
    kinds = sorted({e["kind"] for e in events if e["kind"] in _TRIGGER_PATH}, key=list(_TRIGGER_PATH).index)
    triggers = list(dict.fromkeys(_trigger_words(e) for e in sorted(
        (e for e in events if e["kind"] in _TRIGGER_PATH), key=lambda e: list(_TRIGGER_PATH).index(e["kind"]))))
    if lifetime is not None and gap >= lifetime and not _outlived(r, stream, levels):
        # an entry is gone at exactly its lifetime, as in kvprobe.sim
        expired = _expired(r, base, gap, lifetime, rules, chosen)
        if expired is not None and triggers:
            expired.detail += "; also just before it (inferred from the log): " + " and ".join(triggers)
            expired.triggers = kinds
        return expired
    noise = estimate_noise(r)
    level = levels.name(r)
    shared = level is not None and level[0] == "system"  # a level every session reads: no entry of this stream's
    earlier = stream.earlier.get(base.sk.model, {})
    found = reasoning_change(r, base) or content_change(r, base, noise, earlier, stream.scale) or \
        (None if shared else stale_read(r, base, earlier, step_of(r), stream.scale))
    if found is not None:
        if triggers:
            found.detail += "; just before it (inferred from the log): " + " and ".join(triggers)
            found.triggers = kinds
        return found
    if not triggers and (level is None or shared):  # nothing read of this conversation's own
        routed = routing(r, base, gap, noise, shared)
        if routed is not None:
            return routed
    idle = f"; it had been idle {duration(gap)} of its {duration(lifetime)} lifetime (idle entries are the first " \
        "evicted)" if lifetime and gap > IDLE_SHARE * lifetime else ""
    read = r.usage.cache_read_tokens
    words = f"the read fell from {before} to {read:,} tokens" + (f", {level[1]}" if level is not None else "")
    when = f"{duration(gap)} after {base.sk.id}" + (", after the prompt shrank (its history was cut)" if cut else "")
    # a level that broke is evidence of a change where entries are kept by breakpoint (Anthropic); an implicit
    # cache also routes and evicts on its own, so there only an event names a cause
    if not triggers and (level is None or r.rules.get("matching") != "blocks"):
        if append_only(r):
            ends = where_read_ends(r, base, stream.scale)
            return Diagnosis("unexplained", f"{words} ({when}), within the entry's lifetime; the transcript shows the "
                             "history only grew, so the content did not change: the entry was evicted or served "
                             f"elsewhere{ends}{idle}", token_position=read, evidence="transcript")
        return Diagnosis("unexplained", f"{words} ({when}), within the entry's lifetime, and nothing in the log "
                         "says why: the prefix changed in a way the log does not show, or the entry was evicted or "
                         f"served elsewhere{idle}", token_position=read)
    path = level[0] if level is not None and level[0] else (_TRIGGER_PATH[kinds[0]] if kinds else None)
    detail = f"{words} ({when})" if level is not None else f"{words}: the prefix broke after {read:,} tokens ({when})"
    if triggers:
        detail += "; likely trigger (inferred from the log): " + " and ".join(triggers)
    detail += idle
    kind, param = ("params_changed", "reasoning effort") if _effort_only(events) else ("prefix_changed", None)
    return Diagnosis(kind, detail, path=path if kind == "prefix_changed" else None, token_position=read,
                     param=param, triggers=kinds or None,
                     advice=_TRIGGER_ADVICE[kinds[0]] if kinds else _LEVEL_ADVICE,
                     evidence="log_events" if triggers else "read_level")


def _outlived(r: "RequestResult", stream: _Stream, levels: Levels) -> bool:
    """On an implicit cache, whose lifetime is a range the provider keeps to its own judgement (OpenAI's
    in-memory entries go after 5-10 minutes of inactivity, within an hour; Gemini's are best effort), a read of
    more than an expiry leaves shows the conversation's own entry outlived the pause: its shortfall is not the
    lifetime's. What an expiry leaves is what was cached before the conversation (its first request's read)
    and the tools+system level; a cache whose lifetime is exact (breakpoints) keeps its expiries."""
    if r.rules.get("matching") == "blocks":
        return False
    floor = max(stream.opened.get(r.sk.model, 0), levels.tools_system(r) or 0, estimate_noise(r))
    return r.usage.cache_read_tokens > floor


def _expired(r: "RequestResult", base: "RequestResult", gap: float, lifetime: float, rules: ModelRules,
             chosen: str | None) -> Diagnosis | None:
    """A TTL expiry with the advice that pays for it; None (and nothing to read) for a new start."""
    ttl = f"{duration(lifetime)} ({chosen or 'the default'})"
    detail = f"{duration(gap)} since {base.sk.id} started; the entry lives {ttl}"
    advice = keep_alive.pause_advice(rules, r.ideal_read_tokens, gap, lifetime)
    if advice is None:
        r.ideal_read_tokens = 0  # a new start: no lifetime the provider offers, nor pings that pay, span it
        return None
    return Diagnosis("ttl_expired", detail, seconds_past=gap - lifetime, advice=advice, evidence="pause")


def _model_switch(r: "RequestResult", previous: str, own: "RequestResult | None") -> Diagnosis:
    expired = f"; its own entry, last used by {own.sk.id} {duration(r.sk.started_at - own.sk.started_at)} " \
        "before, expired meanwhile" if own is not None else ""
    return Diagnosis("params_changed", f"the model changed from {previous} to {r.sk.model}: caches are per model, "
                     f"so {r.sk.model} could read none of what {previous} cached{expired} (no saving is implied: "
                     "switching back and forth is the choice being paid for)", param="model", a=previous,
                     b=r.sk.model, invalidates="all",
                     advice="switch models between tasks rather than within one: each switch writes the prompt "
                     "again for the other model", evidence="model")


def _with_missed(r: "RequestResult", d: Diagnosis) -> Diagnosis:
    d.missed_tokens = r.missed_tokens
    return d


def _effort_only(events: list[dict[str, Any]]) -> bool:
    changed = [s for e in events if e["kind"] == "settings_changed" for s in e.get("settings") or []]
    return bool(changed) and set(changed) == {"effort"}


def _trigger_words(e: dict[str, Any]) -> str:
    kind = e["kind"]
    if kind == "tools_changed":
        return f"the tool list changed ({e.get('detail') or 'a tool server reconnected'})"
    if kind == "tool_first_used":
        return f"a tool not used before in this session appeared ({e.get('name')}): the tool list may have changed"
    if kind == "command":
        return f"the {e['name']} command ran" if e.get("name") else "a command ran"  # not "the a command"
    if kind == "settings_changed":
        return f"settings changed ({', '.join(map(str, e.get('settings') or [])) or 'unnamed'})"
    return _TRIGGER_PLAIN[kind]


_TRIGGER_PLAIN = {"task_notification": "a background task's notification arrived",
                  "interrupt": "the user interrupted the turn"}
# the level each event changes first (path of the diagnosis when the read names no level), strongest first:
# the first one present gives the path and the advice
_TRIGGER_PATH = {"tools_changed": "tools", "tool_first_used": "tools", "settings_changed": "system",
                 "command": "messages", "task_notification": "messages", "interrupt": "messages"}
_TRIGGER_ADVICE = {
    "tools_changed": "connect tool (MCP) servers before the session starts: a reconnect or a new server mid-session "
                     "changes the tool list, the first thing every cached prefix holds",
    "tool_first_used": "connect tool (MCP) servers before the session starts: a tool list that changes mid-session "
                       "invalidates every cached level after it",
    "settings_changed": "keep reasoning effort and instructions fixed within a session: a change starts the "
                        "conversation's cache again",
    "command": "run commands that change what the model is sent between tasks: the history is written again after "
               "each",
    "task_notification": "a background task's notification mid-turn can rewrite the end of the conversation: expect one "
                         "rebuild of the history each time one arrives, or let long tasks report when the turn ends",
    "interrupt": "an interrupt drops the turn's unfinished end: the next request writes the history after it again",
}
_LEVEL_ADVICE = ("the log cannot show what changed: compare two requests' bodies (capture them with `kvprobe capture`) "
                 "or the provider's cache diagnostics")
