"""Causes a usage-only log shows through its rebuilt messages and the levels its reads fall to.

Three kinds of evidence, each named on the diagnosis (`Diagnosis.evidence`):

* `transcript`: the importer rebuilt each request's message list (`extra["history"]`,
  kvprobe.importers.history). A change inside the history since the stream's last request — a message
  edited or cleared, a rewind or branch, a compaction's summary — is where the prefix broke: `prefix_changed`
  at `messages[i]`, its token position estimated from the previous request's entry (whose end the log knows
  exactly) less the estimated size of the messages after the change. An append-only history rules content
  out: what is left is routing, eviction or the lifetime.
* `read_level`: a read that equals, to the token, the level an *earlier* request of the stream left cached
  (not the last one's) read that request's entry: a cache that had not seen the requests since (another
  region or replica: `stale_read`, named with that request), or a branch (with the transcript's change).
  On an implicit cache that reads in steps (OpenAI's 128 tokens) and keeps the response with the prompt
  (`entry_holds_response` in providers/), a later prompt that only grew shares all of the prompt and up to all of the response, so a read
  served by a cache holding that entry lies between the two, on the step grid (`earlier_levels`).
* `read_level` with change `reasoning_dropped`: models that use only the current turn's reasoning
  (`reasoning_context` in providers/) are sent the turn before without its reasoning, so the prompt changes
  at the first reasoning item of that turn: where the request whose response opened with it ended its
  prompt (`history["reasoning_dropped"]`, exact from its usage). A read of exactly that, on the step grid, is
  that change; the levels past it were of the old content.
* `platform_routing`: a read of nothing within the entry's lifetime, with an append-only history and no
  event, on a platform whose rules in providers/ say it routes requests between caches (`cache_routing`:
  Bedrock's cross-region inference, Vertex's global endpoint, OpenAI's prefix-hash routing and its overflow):
  `routing`, inferred, with the rule's source.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvprobe.analysis.diagnosis import Diagnosis
from kvprobe.wording import duration

if TYPE_CHECKING:
    from kvprobe.analysis.simulate import RequestResult

# how far past the estimated change a read may end and still be the change's: the estimate is bytes / 4 of
# the messages after it, rough within about a quarter
ESTIMATE_SLACK = 0.25
_WORDS = {"edited": "a message already sent was rewritten", "cleared": "the provider cleared old tool results "
          "(context editing)", "branched": "the conversation went back and branched (a rewind or an edited "
          "prompt)", "compacted": "the history was replaced by a compaction summary", "truncated": "the agent dropped older "
          "messages to fit the context window", "restarted": "a new "
          "conversation began (nothing in common with the previous request's messages: /clear or another task)"}
# changes after which only the tools and system are reusable: the estimate of where they end is the whole
# previous history's, too rough to price a miss on (the levels the log shows say it better)
WHOLE_HISTORY = ("compacted", "restarted")


def history_of(r: "RequestResult") -> dict[str, Any] | None:
    """The rebuilt history a record carries, when it is well formed (a trace written by hand may hold anything)."""
    value = r.sk.extra.get("history")
    if not isinstance(value, dict) or not isinstance(value.get("tokens"), int):
        return None
    change = value.get("change")
    if change is not None and not (isinstance(change, dict) and isinstance(change.get("index"), int)
                                   and isinstance(change.get("tokens_before"), int)):
        return None
    return value


def append_only(r: "RequestResult") -> bool:
    """The transcript shows this request's messages extend its stream's last request's: content ruled out."""
    history = history_of(r)
    return history is not None and history.get("change") is None


def level(r: "RequestResult") -> int:
    """Tokens a request left cached: through its last breakpoint (read + written) where entries are kept by
    breakpoint or writes are reported; an implicit cache (prefix matching, no writes reported) keeps the whole
    prompt, on the provider's step grid. What it read was cached before it: a miss that read little leaves the
    whole prompt all the same, so the next request's level is not a jump of messages appended in between."""
    u = r.usage
    if u.cache_write_tokens > 0 or r.rules.get("matching") == "blocks":
        return u.cache_read_tokens + u.cache_write_tokens
    whole = _stepped(u.input_tokens, step_of(r))
    minimum = r.rules.get("min_cacheable_tokens")
    if isinstance(minimum, int) and whole < minimum:  # too short to be cached: only what it read is held
        return u.cache_read_tokens
    return whole


def known_extent(r: "RequestResult") -> int:
    """Tokens a request is known to have left cached, what a miss of its entry is charged: read + written. An
    implicit cache reports no writes, so only what it read is known to be held (`level`: its whole prompt is, by
    the provider's rules, but the log does not show it)."""
    u = r.usage
    return u.cache_read_tokens + u.cache_write_tokens


def step_of(r: "RequestResult") -> int:
    """The provider's rounding of reads (OpenAI's 128-token steps, DeepSeek's units): a level is stepped."""
    from kvprobe.analysis.simulate import tolerance  # (simulate imports this module)

    return tolerance(r.rules)


@dataclass(slots=True)
class Scale:
    """Real tokens per estimated token of a stream's messages, anchored on its own usage: between two requests
    whose history only grew, the level rose by the appended messages' real size (exactly, from the log) while
    the estimate rose by their estimated size."""

    real: int = 0
    estimated: int = 0

    def learn(self, r: "RequestResult", base: "RequestResult | None") -> None:
        history, before = history_of(r), history_of(base) if base is not None else None
        if history is None or before is None or history.get("change") is not None:
            return
        then, now = level(base), level(r)
        if then <= 0 or now <= 0:  # a request that left nothing (a failed call logged with zero usage): no anchor
            return
        real, estimated = now - then, history["tokens"] - before["tokens"]
        if real > 0 and estimated > 0:
            self.real += real
            self.estimated += estimated

    def __call__(self, estimated: int) -> int:
        return round(estimated * self.real / self.estimated) if self.estimated else estimated


def change_position(r: "RequestResult", base: "RequestResult | None", scale: Scale) -> int | None:
    """Where the transcript shows this request's messages changed, in tokens: the previous request's entry ends
    at a point the log knows exactly and covers its estimated message tokens; the change sits the estimated
    size of the messages after it before that end. None without a change (or a history to compare)."""
    history = history_of(r)
    before = history_of(base) if base is not None else None
    if history is None or before is None or history.get("change") is None:
        return None
    return max(level(base) - scale(max(before["tokens"] - history["change"]["tokens_before"], 0)), 0)


def whole_history_changed(r: "RequestResult") -> bool:
    """The transcript shows the history replaced or begun again: only the tools and system were reusable."""
    history = history_of(r)
    return history is not None and (history.get("change") or {}).get("kind") in WHOLE_HISTORY


def where_read_ends(r: "RequestResult", base: "RequestResult", scale: Scale) -> str:
    """Where the read stopped in the previous request's rebuilt messages: its entry ends at a level the log
    knows and covers its estimated message tokens, so the rest is tools and system (estimated)."""
    before = history_of(base)
    if before is None or not before["tokens"]:
        return ""
    messages = scale(before["tokens"])
    overhead = max(level(base) - messages, 0)
    read = r.usage.cache_read_tokens
    if read <= overhead:
        return (f"; the read ends within what precedes the messages the log shows (tools, system and any context "
                f"it does not show: about {overhead:,} tokens, estimated)")
    return (f"; the read covers what precedes the messages the log shows (tools, system: about {overhead:,} tokens) "
            f"and about {read - overhead:,} of the {messages:,} message tokens {base.sk.id} was sent (estimated)")


def content_change(r: "RequestResult", base: "RequestResult", noise: int,
                   earlier: dict[int, "RequestResult"], scale: Scale) -> Diagnosis | None:
    """`prefix_changed` at the message the transcript shows changed, when the read ends at or before it; a read
    that equals an earlier request's level names that request (a branch read: the entry before the branch)."""
    history, before = history_of(r), history_of(base)
    if history is None or before is None or history.get("change") is None or whole_history_changed(r):
        return None  # a history replaced or begun again leaves the tools and system: the levels say more
    change = history["change"]
    kind, index = str(change.get("kind")), change["index"]
    after = scale(max(before["tokens"] - change["tokens_before"], 0))  # the previous entry past the change
    position = change_position(r, base, scale) or 0
    read = r.usage.cache_read_tokens
    if read > position + ESTIMATE_SLACK * after + noise:
        return None  # the read went on past the change: the estimate does not back it
    where = "at" if read >= position - ESTIMATE_SLACK * after - noise else "before"
    detail = (f"the transcript shows {_WORDS.get(kind, kind)} at messages[{index}], about {position:,} tokens into "
              f"{base.sk.id}'s {level(base):,}-token entry (estimated from the rebuilt messages); the read "
              f"({read:,} tokens) ends {where} it")
    source = earlier.get(read) if read > 0 else None
    if source is not None:
        detail += f"; it read the entry {source.sk.id} left ({read:,} tokens)"
    return Diagnosis("prefix_changed", detail, path=f"messages[{index}]", token_position=position,
                     writer_id=source.sk.id if source is not None else None, evidence="transcript", change=kind,
                     advice=_ADVICE.get(kind))


def stale_read(r: "RequestResult", base: "RequestResult", earlier: dict[int, "RequestResult"],
               step: int, scale: Scale) -> Diagnosis | None:
    """`stale_read` when the read equals an earlier request's level, not the last one's (on a stepped implicit
    cache: falls within what an earlier request's prompt and response left, `earlier_levels`)."""
    read = r.usage.cache_read_tokens
    if read <= 0 or read == _stepped(level(base), step):
        return None
    source = earlier.get(read)
    if source is None or source is base:
        return None
    history = history_of(r)
    change = history.get("change") if history else None
    if change is not None and change.get("kind") == "branched":
        return None  # the transcript's branch says why (content_change): the entry read is the branch point's
    gap = r.sk.started_at - source.sk.started_at
    if read in (level(source), _stepped(source.usage.input_tokens, step)):
        what = f"equals, to the token, what {source.sk.id} left cached {duration(gap)} before"
    else:  # within the span of a stepped implicit entry (earlier_levels)
        low, high = _span(source, step)
        what = (f"falls within what {source.sk.id} left cached {duration(gap)} before (its prompt and its "
                f"response: {low:,} to {high:,} tokens on the provider's {step}-token grid)")
    detail = (f"the read ({read:,} tokens) {what}, not the {level(base):,} tokens of {base.sk.id}: a cache that "
              "had not seen the requests since served it (another region or replica)")
    if history is not None and change is None:
        detail += "; the transcript shows the history only grew, so the content did not change"
        detail += where_read_ends(r, base, scale)
    rule = r.rules.rules.get("cache_routing")
    helps = rule.value.get("helps") if rule is not None and isinstance(rule.value, dict) else None
    if helps:
        detail += f"; {rule.value.get('name', 'the platform')} routes requests between caches (inferred; {rule.source})"
    return Diagnosis("stale_read", detail, token_position=read, writer_id=source.sk.id, evidence="read_level",
                     advice=helps)


def dropped_reasoning(r: "RequestResult") -> tuple[int, dict[str, Any]] | None:
    """(tokens where the prompt changed, the importer's record) when this request starts a turn on a model that
    uses only the current turn's reasoning, and the turn before's first reasoning item opened a response (so
    the change sits exactly where that request's prompt ended, stepped to the provider's grid)."""
    history = history_of(r)
    drop = history.get("reasoning_dropped") if history is not None else None
    if r.rules.get("reasoning_context") != "current_turn" or not isinstance(drop, dict) \
            or not isinstance(drop.get("tokens"), int) or not isinstance(drop.get("index"), int) \
            or drop.get("opened") is not True:
        return None
    return _stepped(drop["tokens"], step_of(r)), drop


def reasoning_change(r: "RequestResult", base: "RequestResult") -> Diagnosis | None:
    """`prefix_changed` (change `reasoning_dropped`) when the read is exactly where the turn before's reasoning
    began: the API sent that turn without its reasoning, so nothing past it could be read."""
    found = dropped_reasoning(r)
    if found is None or r.usage.cache_read_tokens != found[0]:
        return None
    at, drop = found
    rule = r.rules.rules.get("reasoning_context")
    detail = (f"a new turn: {r.sk.model} uses only the current turn's reasoning, so the turn before was sent "
              f"without its reasoning items, the first of which opened {drop.get('request')}'s response at "
              f"messages[{drop['index']}]; the read ({at:,} tokens) ends exactly where {drop.get('request')}'s "
              f"prompt did ({drop['tokens']:,} tokens, on the provider's grid), not at the {level(base):,} tokens "
              f"of {base.sk.id}: what followed was the old content (inferred; {rule.source if rule else ''})")
    return Diagnosis("prefix_changed", detail, path=f"messages[{drop['index']}]", token_position=at,
                     writer_id=drop.get("request") if isinstance(drop.get("request"), str) else None,
                     evidence="read_level", change="reasoning_dropped", triggers=["new_turn"],
                     advice="each new turn re-reads the turn before from its first reasoning item on: with models "
                            "before GPT-5.6 that is the price of a turn; fewer, longer turns pay it less often")


def routing(r: "RequestResult", base: "RequestResult", gap: float, noise: int, shared: bool) -> Diagnosis | None:
    """`routing` for a read of (about) nothing, or of only the prefix every session shares (`shared`), within
    the lifetime, where the platform routes requests between caches."""
    rule = r.rules.rules.get("cache_routing")
    if rule is None or not isinstance(rule.value, dict) or (r.usage.cache_read_tokens > noise and not shared):
        return None
    value = rule.value
    shown = "the transcript shows the history only grew, so the content did not change; " if append_only(r) else ""
    what = "only the prefix every session shares" if shared and r.usage.cache_read_tokens > noise else "nothing"
    detail = (f"read {r.usage.cache_read_tokens:,} tokens ({what}) {duration(gap)} after {base.sk.id} left "
              f"{known_extent(base):,} cached, within the entry's lifetime; {shown}{value.get('name', 'the platform')} "
              f"routes requests between caches: {value.get('how', '')} (inferred; {rule.source}, checked "
              f"{rule.checked})")
    return Diagnosis("routing", detail, token_position=0, evidence="platform_routing", advice=value.get("helps"))


def earlier_levels(seen: dict[int, "RequestResult"], r: "RequestResult", step: int,
                   changed_at: int | None = None) -> None:
    """Remember the levels a request left (the first request to leave a level is the one whose entry is read
    there): `level`, and on a stepped implicit entry that keeps the response, up to all of it. A change at
    `changed_at` tokens leaves the levels past it on the old content: no later request of this history can read
    them."""
    if changed_at is not None:
        for tokens in [t for t in seen if t > changed_at]:
            del seen[tokens]
    own = {level(r)}  # (not an implicit request's read: that level was another's entry, maybe from before the log)
    if step > 1 and r.usage.cache_write_tokens <= 0 and r.rules.get("entry_holds_response") is True:
        # a stepped implicit entry that keeps the response too (the rule in providers/)
        low, high = _span(r, step)
        own.update(range(low, high + 1, step))
    for tokens in own:
        if tokens > 0:
            seen.setdefault(tokens, r)


def after_reasoning_dropped(seen: dict[int, "RequestResult"], firsts: dict[int, "RequestResult"], at: int,
                            source: "RequestResult | None") -> None:
    """The levels still readable once a turn's reasoning is dropped at `at` tokens: an entry written since the
    first turn's reasoning shares with the new prompt only up to its own turn's first reasoning item, so what
    is left is each turn's start (`firsts`, this one's added) and what preceded any reasoning."""
    if source is not None:
        firsts[at] = source
    floor = min(firsts) if firsts else at
    for tokens in [t for t in seen if t > floor and t not in firsts]:
        del seen[tokens]
    seen.update(firsts)


def _span(r: "RequestResult", step: int) -> tuple[int, int]:
    """What a stepped implicit entry lets a later prompt that only grew read: all of the request's prompt, up to
    all of its response, on the step grid."""
    u = r.usage
    return _stepped(u.input_tokens, step), _stepped(u.input_tokens + u.output_tokens, step)


def _stepped(tokens: int, step: int) -> int:
    return tokens - tokens % step if step > 1 else tokens


_ADVICE = {
    "edited": "leave messages already sent as they were: a rewritten tool result or prompt makes every later "
              "request write the history after it again",
    "cleared": "clearing old tool results rewrites the prompt from the first one cleared: clear less often and "
               "more at a time (a larger clearing threshold), so the rebuild is paid once",
    "branched": "a rewind or an edited earlier prompt writes the history after it again: that rebuild is the "
                "price of going back",
    "compacted": "compact or clear at task boundaries: after a compaction the conversation is written again "
                 "from its summary",
    "truncated": "dropping older messages to fit the context window writes everything after the first one "
                 "dropped again: start a new task (or summarise) before the window fills",
}
