"""What an agent's log says happened between two requests, carried onto the next request's record.

Usage-only logs hold no request bodies, but a transcript shows the things that change a prompt: a
compaction, a tool list that changed (an MCP server reconnected), a background task's notification, an
interrupt, a changed setting. Importers collect those lines as they read and put them on the next request
of the same stream as `extra["events"]` (docs/contracts.md §1), a list of

    {"kind": "compaction", "at": "2026-02-11T21:18:41.543Z", "pre_tokens": 167094, "trigger": "auto"}

`kvprobe.analysis.usage_only` names them as the likely trigger of a miss (inferred, never reported).

Kinds: `compaction` (pre_tokens, trigger), `tools_changed` (detail), `task_notification`, `interrupt`,
`command` (name), `settings_changed` (settings), `tool_first_used` (name: an MCP tool not used before in the
stream, on the request whose response used it).
"""
from __future__ import annotations

from kvprobe.trace.record import format_time

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

KINDS = ("compaction", "tools_changed", "task_notification", "interrupt", "command", "settings_changed",
         "tool_first_used")
MAX_PENDING = 50  # a stream with thousands of lines between two requests keeps the latest events only


def event(kind: str, stamp: float | None, **details: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind}
    if stamp is not None:
        out["at"] = format_time(stamp)
    out.update((k, v) for k, v in details.items() if v is not None)
    return out


class Events:
    """Events seen since the last request of one stream."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: list[dict[str, Any]] = []

    def add(self, kind: str, stamp: float | None, once: bool = False, **details: Any) -> None:
        """`once`: one event, however many lines the source writes for it (the same kind just before)."""
        if once and self.pending and self.pending[-1]["kind"] == kind:
            self.pending[-1].update((k, v) for k, v in details.items() if v is not None)
            return
        self.pending.append(event(kind, stamp, **details))
        if len(self.pending) > MAX_PENDING:
            del self.pending[0]

    def attach(self, extra: dict[str, Any]) -> None:
        """Move the pending events onto a request's extra fields."""
        if self.pending:
            extra.setdefault("events", []).extend(self.pending)
            self.pending = []

