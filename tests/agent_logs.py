"""Agent logs written line by line in their real on-disk formats (Claude Code transcripts, Codex rollouts),
for tests that need the events between requests. Every figure is set by the test that writes the log."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

T0 = dt.datetime(2026, 2, 11, 20, 0, 0, tzinfo=dt.timezone.utc)


def at(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ClaudeTranscript:
    """One Claude Code session file: user turns, assistant responses with usage, and the lines between."""

    def __init__(self, session: str, cwd: str = "/home/me/app", id_prefix: str = "msg_01") -> None:
        self.session, self.cwd, self.id_prefix = session, cwd, id_prefix
        self.lines: list[dict[str, Any]] = []
        self._n = 0
        self._parent: str | None = None

    def _uuid(self) -> str:
        self._n += 1
        return f"{self.session}-u{self._n}"

    def _line(self, kind: str, t: float, **fields: Any) -> str:
        uuid = self._uuid()
        self.lines.append({"parentUuid": self._parent, "isSidechain": False, "userType": "external",
                           "cwd": self.cwd, "sessionId": self.session, "version": "2.1.39", "type": kind,
                           "uuid": uuid, "timestamp": at(t), **fields})
        self._parent = uuid
        return uuid

    def user(self, t: float, content: Any = "go on") -> str:
        return self._line("user", t, message={"role": "user", "content": content})

    def tool_result(self, t: float) -> str:
        return self.user(t, [{"tool_use_id": f"toolu_{self._n}", "type": "tool_result", "content": "ok"}])

    def interrupt(self, t: float) -> str:
        return self.user(t, [{"type": "text", "text": "[Request interrupted by user for tool use]"}])

    def task_notification(self, t: float) -> str:
        return self.user(t, "<task-notification>\n<task-id>b0be39e</task-id>\n<status>completed</status>\n"
                            "</task-notification>")

    def command(self, t: float, name: str, stdout: str) -> None:
        self.user(t, f"<command-name>{name}</command-name>\n<command-message>{name[1:]}</command-message>\n"
                     "<command-args></command-args>")
        self.user(t, f"<local-command-stdout>{stdout}</local-command-stdout>")

    def compact_boundary(self, t: float, pre_tokens: int, trigger: str = "auto") -> None:
        self._parent = None  # Claude Code starts a new chain after a compaction
        self._line("system", t, subtype="compact_boundary", content="Conversation compacted", level="info",
                   compactMetadata={"trigger": trigger, "preTokens": pre_tokens})
        self.user(t, "This session is being continued from a previous conversation that ran out of context.")

    def assistant(self, t: float, request: str, *, read: int, write: int, fresh: int = 3, output: int = 50,
                  ttl: str = "5m", model: str = "claude-sonnet-4-5", tools: tuple[str, ...] = ()) -> None:
        content: list[dict[str, Any]] = [{"type": "text", "text": "done"}]
        content += [{"type": "tool_use", "id": f"toolu_{request}_{i}", "name": n, "input": {}}
                    for i, n in enumerate(tools)]
        usage = {"input_tokens": fresh, "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
                 "cache_creation": {"ephemeral_5m_input_tokens": write if ttl == "5m" else 0,
                                    "ephemeral_1h_input_tokens": write if ttl == "1h" else 0},
                 "output_tokens": output, "service_tier": "standard"}
        self._line("assistant", t, requestId=request,
                   message={"model": model, "id": f"{self.id_prefix}{request}", "type": "message",
                            "role": "assistant", "content": content, "stop_reason": "end_turn", "usage": usage})

    def turn(self, t: float, request: str, **usage: Any) -> None:
        """A user line at t (the request is sent then) and its response 2 s later."""
        self.tool_result(t) if self.lines else self.user(t)
        self.assistant(t + 2, request, **usage)

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines))
        return path


class CodexRollout:
    """One Codex rollout file: session_meta, turn_context, turns with token_count events."""

    def __init__(self, session: str, model: str = "gpt-5.3-codex") -> None:
        self.session, self.model = session, model
        self.lines: list[dict[str, Any]] = []
        self.total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
                      "reasoning_output_tokens": 0, "total_tokens": 0}
        self.add(0, "session_meta", {"id": session, "timestamp": at(0), "cwd": "/home/me/app",
                                     "originator": "codex_cli_rs", "cli_version": "0.104.0",
                                     "model_provider": "openai"})

    def add(self, t: float, kind: str, payload: dict[str, Any]) -> None:
        self.lines.append({"timestamp": at(t), "type": kind, "payload": payload})

    def event(self, t: float, kind: str, **payload: Any) -> None:
        self.add(t, "event_msg", {"type": kind, **payload})

    def context(self, t: float, effort: str = "high") -> None:
        self.add(t, "turn_context", {"turn_id": "turn", "cwd": "/home/me/app", "approval_policy": "on-request",
                                     "model": self.model, "effort": effort, "summary": "auto"})

    def start_turn(self, t: float, effort: str = "high") -> None:
        self.event(t, "task_started", turn_id="turn", model_context_window=258400)
        self.add(t, "response_item", {"type": "message", "role": "user",
                                      "content": [{"type": "input_text", "text": "do it"}]})
        self.event(t, "user_message", message="do it", images=[])
        self.context(t, effort)

    def request(self, t: float, *, input_tokens: int, cached: int, output: int = 100, reasoning: int = 20) -> None:
        """The model's response at t: its token_count, and Codex's repeat of it after the tool call."""
        last = {"input_tokens": input_tokens, "cached_input_tokens": cached, "output_tokens": output,
                "reasoning_output_tokens": reasoning, "total_tokens": input_tokens + output}
        for key, value in last.items():
            self.total[key] += value
        self.add(t, "response_item", {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c"})
        info = {"total_token_usage": dict(self.total), "last_token_usage": last, "model_context_window": 258400}
        self.event(t, "token_count", info=info, rate_limits=None)
        self.add(t + 0.5, "response_item", {"type": "function_call_output", "call_id": "c", "output": "ok"})
        self.event(t + 1, "token_count", info=info, rate_limits=None)  # repeated: same totals

    def complete(self, t: float) -> None:
        self.event(t, "task_complete", last_agent_message="done")

    def compacted(self, t: float) -> None:
        self.add(t, "compacted", {"message": "", "replacement_history": []})
        self.event(t, "context_compacted")

    def write(self, root: Path) -> Path:
        path = root / "sessions" / "2026" / "02" / "11" / f"rollout-2026-02-11T20-00-00-{self.session}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines))
        return path
