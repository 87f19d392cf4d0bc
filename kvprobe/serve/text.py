"""Incremental detokenization with stop sequences: text deltas that never split a character or a stop."""
from __future__ import annotations

from typing import Any


class TextStream:
    """Feed generated token ids; get the text that is safe to send, and the stop sequence if one appeared."""

    def __init__(self, tokenizer: Any, stops: list[str] | None = None) -> None:
        self.tokenizer = tokenizer
        self.stops = [s for s in (stops or []) if s]
        self._holdback = max((len(s) for s in self.stops), default=1) - 1
        self.ids: list[int] = []
        self.text = ""  # everything decoded so far
        self.sent = 0  # characters of `text` already returned
        self.stop_sequence: str | None = None

    def feed(self, token_ids: list[int]) -> str:
        """New text to send. Sets `stop_sequence` (and returns only the text before it) when one appears."""
        self.ids += token_ids
        self.text = self.tokenizer.decode(self.ids)
        hit = self._first_stop()
        if hit is not None:
            index, self.stop_sequence = hit
            return self._emit(index)
        safe = len(self.text) - self._holdback
        while safe > self.sent and self.text[safe - 1] == "\ufffd":  # an incomplete UTF-8 sequence
            safe -= 1
        return self._emit(safe)

    def flush(self) -> str:
        """The rest, once generation ended."""
        return "" if self.stop_sequence else self._emit(len(self.text))

    @property
    def final_text(self) -> str:
        return self.text[: self.sent]

    def _first_stop(self) -> tuple[int, str] | None:
        start = max(self.sent - self._holdback, 0)
        found = [(i, s) for s in self.stops if (i := self.text.find(s, start)) >= 0]
        return min(found) if found else None

    def _emit(self, end: int) -> str:
        if end <= self.sent:
            return ""
        delta, self.sent = self.text[self.sent:end], end
        return delta
