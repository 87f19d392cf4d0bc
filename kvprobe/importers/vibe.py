"""Mistral Vibe sessions: ${VIBE_HOME:-~/.vibe}/logs/session/unified/<session id>/journal/<generation>.jsonl.

Quirks:
* The journal is the session's recovery log, one record per line ({type, sequence, payload, record_sha256,
  previous_record_sha256, recovery_journal_record_version}). One model call = one `action_result` whose
  `payload.result.result.type` is `completion_succeeded`, its usage {input_tokens (the whole prompt, the
  cached part included), cached_input_tokens, output_tokens} and its `action_id`.
* Records carry no time of their own: each `core_input` does (`determinism.time_unix_ms`, when the core took
  it). A call was sent at the core input before its `action_intent` and answered at the one that takes its
  result.
* The model is the session's (`meta.json` beside the journal: `config.model_name`), as is the working
  directory (`environment.working_directory`); the provider is Mistral (Vibe's own) unless the model name says
  otherwise.
* The session folder's other files (meta.json, CURRENT, chunks/, generations/, scheduled-loops.json) hold no
  usage: read as this format's, ignored; so are the plugins' manifests under logs/session/plugins.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import orjson

from kvprobe.importers.base import BadCount, Progress, SourceStats, as_str, iter_objects, split_usage, token_count
from kvprobe.importers.formats import SNIFFERS, VIBE_JOURNAL
from kvprobe.trace import TraceRecord

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

NAME = "vibe"
PROVIDER = "mistral"
_COMPLETED = "completion_succeeded"


def default_paths() -> list[Path]:
    home = Path(os.environ.get("VIBE_HOME") or "~/.vibe").expanduser()
    root = home / "logs" / "session" / "unified"
    return [root] if root.is_dir() else []


sniff = SNIFFERS[NAME]  # how a file of this format is recognised (importers.formats)


def read(path: Path, stats: SourceStats, seen: set[str], progress: Progress | None = None) -> Iterator[TraceRecord]:
    if path.parent.name != VIBE_JOURNAL:  # meta.json, chunks, generations: the session's state, no usage
        stats.lines += 1
        stats.ignored += 1
        return
    folder = path.parent.parent
    meta = _meta(folder / "meta.json")
    session = as_str(meta.get("session_id")) or folder.name
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    model = as_str(config.get("model_name")) or as_str(config.get("active_model"))
    environment = meta.get("environment") if isinstance(meta.get("environment"), dict) else {}
    cwd = as_str(environment.get("working_directory")) or as_str(meta.get("origin_directory"))
    provider = _provider(model)
    last_input: float | None = None  # the time of the latest core input
    sent: dict[str, float | None] = {}  # action id -> when its intent was made
    pending: list[tuple[int, str, dict[str, Any]]] = []  # results not yet timed by the core input that takes them
    for lineno, line in iter_objects(path, stats, progress):
        kind, payload = line.get("type"), line.get("payload")
        payload = payload if isinstance(payload, dict) else {}
        if kind == "core_input":
            stamp = _input_time(payload)
            last_input = stamp if stamp is not None else last_input
            for at, action, usage in pending:
                record = _record(action, usage, session, model, provider, cwd, sent.get(action), last_input,
                                 stats, seen, path, at)
                if record is not None:
                    yield record
            pending = []
        elif kind == "action_intent":
            action = as_str(payload.get("action_id")) or as_str((payload.get("action") or {}).get("id")
                                                                 if isinstance(payload.get("action"), dict) else None)
            if action is not None:
                sent[action] = last_input
        elif kind == "action_result":
            found = _completion(payload)
            if found is not None:
                pending.append((lineno, *found))
                continue
        stats.ignored += 1
    for at, action, usage in pending:  # a journal that ends before the core took the last result
        record = _record(action, usage, session, model, provider, cwd, sent.get(action), None, stats, seen, path, at)
        if record is not None:
            yield record


def _completion(payload: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(action id, usage) of a model call's result; None for a tool's or a hook's."""
    outer = payload.get("result")
    inner = outer.get("result") if isinstance(outer, dict) else None
    if not isinstance(outer, dict) or outer.get("type") != _COMPLETED or not isinstance(inner, dict):
        return None
    usage = inner.get("usage")
    action = as_str(payload.get("action_id")) or as_str(outer.get("action_id"))
    return (action, usage) if action is not None and isinstance(usage, dict) else None


def _record(action: str, usage: dict[str, Any], session: str, model: str | None, provider: str, cwd: str | None,
            started: float | None, finished: float | None, stats: SourceStats, seen: set[str], path: Path,
            lineno: int) -> TraceRecord | None:
    try:
        total = token_count(usage.get("input_tokens"), "usage.input_tokens")
        read = token_count(usage.get("cached_input_tokens"), "usage.cached_input_tokens")
        output = token_count(usage.get("output_tokens"), "usage.output_tokens")
    except BadCount as exc:
        stats.skip("invalid usage", lineno, str(exc))
        return None
    if not stats.first_time(f"{session}:{action}", seen):
        return None
    fresh = total - read if total >= read else total
    extra: dict[str, Any] = {"source_format": NAME}
    if cwd:
        extra["cwd"] = cwd
    return TraceRecord(id=action, provider=provider, started_at=started if started is not None else finished,
                       finished_at=finished, response={"id": action, "model": model,
                                                       "usage": split_usage(provider, fresh, read, 0, output)},
                       session=session, agent="main", extra=extra, source=str(path), line=lineno)


def _input_time(payload: dict[str, Any]) -> float | None:
    determinism = payload.get("input", {}).get("determinism") if isinstance(payload.get("input"), dict) else None
    ms = determinism.get("time_unix_ms") if isinstance(determinism, dict) else None
    return ms / 1000 if isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms > 0 else None


def _meta(path: Path) -> dict[str, Any]:
    try:
        meta = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _provider(model: str | None) -> str:
    """Mistral, Vibe's own, unless the model name is another maker's (a provider configured by hand)."""
    from kvprobe.request.detect import infer_provider

    return (infer_provider({"model": model}) if model else None) or PROVIDER
