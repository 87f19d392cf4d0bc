"""OpenHands conversations: ~/.openhands/conversations/<id>/base_state.json (the OpenHands CLI and SDK).

Quirks:
* The conversation's state is one JSON document, rewritten as it runs. Its `stats.usage_to_metrics` maps each
  LLM of the conversation by usage id (`agent`, the `condenser` that summarises history, others) to its
  metrics: `token_usages`, one per model call, {model, prompt_tokens (the whole prompt, LiteLLM's: the cached
  and written parts included), completion_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens
  (part of the completion), response_id}; `response_latencies` {latency, response_id} and `costs` {cost,
  timestamp} per call as well. A call is timed by its cost's timestamp (when it was answered: the lists grow
  together, one entry per call) less its latency.
* Models are LiteLLM names (`anthropic/claude-sonnet-4-5-20250929`, `bedrock/…`, `vertex_ai/…`,
  `openrouter/…`): the prefix names the provider or platform, the rest the model.
* Each usage id is a stream: the agent's calls are `main`; the condenser's summaries are its own stream and
  mark the next agent call as following a compaction.
* The conversation's `events/event-*.json` files (actions and observations) hold no usage: read as this
  format's, ignored; the working directory is `workspace.working_dir`.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


from kvprobe.importers.base import (BadCount, Progress, SourceStats, as_str, local_server, read_document, split_usage,
                                   time_or_none, token_count, token_counts)
from kvprobe.importers.formats import OPENHANDS_STATE, SNIFFERS
from kvprobe.trace import TraceRecord

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

NAME = "openhands"
MAIN = "agent"  # the usage id of the agent's own LLM
SUMMARISER = "condenser"
# LiteLLM's provider prefixes: the provider (or platform) they name
_PREFIXES = {"anthropic": "anthropic", "openai": "openai", "azure": "openai", "gemini": "gemini",
             "vertex_ai": "vertex", "bedrock": "bedrock", "deepseek": "deepseek", "mistral": "mistral",
             "xai": "xai", "moonshot": "moonshot"}
_PLATFORMS = ("bedrock", "vertex")


def default_paths() -> list[Path]:
    env = os.environ.get("OPENHANDS_CONVERSATIONS_DIR")
    roots = [Path(p).expanduser() for p in env.split(",") if p] if env else \
        [Path("~/.openhands/conversations").expanduser()]
    return [r for r in roots if r.is_dir()]


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    if path.name != OPENHANDS_STATE:  # an event file: an action or observation, no usage
        stats.lines += 1
        stats.ignored += 1
        return
    state = read_document(path, stats, progress)  # rewritten as it runs: cut short when stopped
    if state is None:
        return
    stats_of = state.get("stats") if isinstance(state, dict) else None
    # `usage_to_metrics` since the SDK named its LLMs by usage id; `service_to_metrics` before (SDK 1.0)
    metrics = (stats_of.get("usage_to_metrics") or stats_of.get("service_to_metrics")) \
        if isinstance(stats_of, dict) else None
    if not isinstance(metrics, dict):
        stats.skip("conversation state without usage metrics", 1)
        return
    session = as_str(state.get("id")) or path.parent.name
    workspace = state.get("workspace")
    cwd = as_str(workspace.get("working_dir")) if isinstance(workspace, dict) else None
    summaries: list[float] = []
    for usage_id in sorted(metrics, key=lambda k: (k != SUMMARISER, k)):  # the summaries first: they mark the agent's
        llm = metrics[usage_id]
        if not isinstance(llm, dict):
            stats.skip("usage metrics that are not an object", 1, usage_id)
            continue
        agent = "main" if usage_id == MAIN else usage_id
        for record in _calls(llm, usage_id, agent, session, cwd, summaries, stats, seen, path):
            yield record


def _calls(llm: dict[str, Any], usage_id: str, agent: str, session: str, cwd: str | None, summaries: list[float],
           stats: SourceStats, seen: set[str], path: Path) -> Iterator[TraceRecord]:
    usages = llm.get("token_usages") if isinstance(llm.get("token_usages"), list) else []
    costs = llm.get("costs") if isinstance(llm.get("costs"), list) else []
    latencies = {as_str(x.get("response_id")): x.get("latency") for x in llm.get("response_latencies") or []
                 if isinstance(x, dict)}
    stats.lines += len(usages)
    timed = len(costs) == len(usages)  # one cost per call: the call's time (else the calls are untimed)
    for n, usage in enumerate(usages):
        if not isinstance(usage, dict):
            stats.skip("token usage that is not an object", n + 1)
            continue
        try:
            total, read, write, output = token_counts(
                usage, ("prompt_tokens", "cache_read_tokens", "cache_write_tokens", "completion_tokens"))
        except BadCount as exc:
            stats.skip("invalid usage", n + 1, str(exc))
            continue
        rid = as_str(usage.get("response_id")) or f"{session}:{usage_id}:{n}"
        if not stats.first_time(f"{session}:{rid}", seen):
            continue
        model_name = as_str(usage.get("model")) or as_str(llm.get("model_name"))
        provider, platform, model = _provider(model_name)
        finished = time_or_none(costs[n].get("timestamp")) if timed and isinstance(costs[n], dict) else None
        latency = latencies.get(rid)
        started = finished - latency if finished is not None and isinstance(latency, (int, float)) else finished
        extra: dict[str, Any] = {"source_format": NAME, "usage_id": usage_id}
        if cwd:
            extra["cwd"] = cwd
        if platform:
            extra["platform"] = platform
        cost = costs[n].get("cost") if timed and isinstance(costs[n], dict) else None
        if isinstance(cost, (int, float)) and cost > 0:
            extra["logged_cost_usd"] = cost
        if usage_id == SUMMARISER and finished is not None:
            summaries.append(finished)
        elif agent == "main" and started is not None and summaries and summaries[0] <= started:
            at = summaries.pop(0)
            while summaries and summaries[0] <= started:  # several summaries before one call: one compaction
                at = summaries.pop(0)
            extra["events"] = [{"kind": "compaction", "at": _iso(at), "trigger": "condenser"}]
        fresh = total - read - write if total >= read + write else total
        reasoning = token_count(usage.get("reasoning_tokens"), "reasoning_tokens") \
            if isinstance(usage.get("reasoning_tokens"), int) else 0
        out = split_usage(provider, fresh, read, write, output)
        if reasoning and provider != "anthropic":
            out["output_tokens_details"] = {"reasoning_tokens": min(reasoning, output)}
        yield TraceRecord(id=rid, provider=provider, started_at=started, finished_at=finished,
                          response={"id": rid, "model": model, "usage": out}, session=session, agent=agent,
                          extra=extra, source=str(path), line=n + 1)


def _provider(name: str | None) -> tuple[str, str | None, str | None]:
    """(provider, platform, model) of a LiteLLM model name."""
    from kvprobe.request.detect import infer_provider

    if not name:
        return "openai", None, None
    prefix, _, rest = name.partition("/")
    model = rest if rest else name
    named = _PREFIXES.get(prefix) if rest else None
    server = local_server(prefix) if rest else None
    if server is not None:
        return "local", server, model
    if named in _PLATFORMS:
        return infer_provider({"model": model.split("/")[-1]}) or "anthropic", named, model
    return named or infer_provider({"model": model.split("/")[-1]}) or "openai", None, model


def _iso(stamp: float) -> str:
    from kvprobe.trace.record import format_time

    return format_time(stamp)
