"""What lint works on (one rendered request and where it came from) and what it reports (findings)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvprobe.catalog import ModelRules
from kvprobe.lint.catalog import LintRule
from kvprobe.request.model import RenderedRequest
from kvprobe.usage import Usage

SNIPPET_CONTEXT = 24


@dataclass(frozen=True, slots=True)
class RequestRef:
    """Where a request came from: what a finding keeps of it (not its content)."""

    id: str
    stream: str  # session/agent (trace records) or the file (a lone request body)
    index: int  # 1-based position in its stream
    source: str | None = None
    line: int | None = None  # the record's line in a JSONL trace; None for a JSON file
    offset: int | None = None  # byte offset of that line
    in_record: bool = False  # the body sits under "request" of a trace record
    order: int = 0  # position in the whole input


@dataclass(slots=True)
class Subject:
    """One request of the input: the rendered request and its place in a file and a stream."""

    ref: RequestRef
    request: RenderedRequest
    rules: ModelRules
    continues: bool = False  # continues a server-side conversation (Responses previous_response_id): its
    # body holds only the new turn, so comparing its prefix with the previous request's says nothing
    logged: Usage | None = None  # the usage its trace record logged, when it has one

    @property
    def id(self) -> str:
        return self.ref.id

    @property
    def cached_extent(self) -> int:
        """Blocks its cache entries cover: through the last breakpoint, or all of an implicit prefix."""
        req = self.request
        if req.cache_mode in ("breakpoints", "explicit"):
            return req.breakpoint_indices[-1] + 1 if req.breakpoints else 0
        return len(req.blocks)

    def tokens_before(self, index: int) -> int:
        return sum(b.tokens for b in self.request.blocks[:index])

    def lost_tokens(self, changed: int) -> tuple[int, bool]:
        """Tokens this request cached that the next one cannot read when block `changed` differs, and whether
        the figure comes from logged usage (else it is the estimate).

        What stays readable ends at this request's last breakpoint before the change (an implicit cache: at
        the change itself); everything cached after that is written again. Where the record logged its usage,
        read + write is the exact size of what it cached (what `report` counts as missed reads), and the part
        that stays readable is scaled by the same logged/estimated ratio.
        """
        req, extent = self.request, self.cached_extent
        explicit = req.cache_mode in ("breakpoints", "explicit")
        kept = max((j + 1 for j in req.breakpoint_indices if j < changed), default=0) if explicit else changed
        cached, readable = self.tokens_before(extent), self.tokens_before(min(kept, extent))
        u = self.logged
        logged = None if u is None else (u.cache_read_tokens + u.cache_write_tokens if explicit else u.input_tokens)
        if not logged or not cached:
            return cached - readable, False
        return logged - round(readable * logged / cached), True

    def light(self) -> Subject:
        """Itself without its content: what a finding made later needs (ids, model)."""
        req = self.request
        return Subject(self.ref, RenderedRequest(req.provider, req.api, req.model, [], {}), self.rules, self.continues,
                       self.logged)


@dataclass(slots=True)
class Region:
    """Where a finding is in its file (1-based lines and columns, in code points)."""

    start_line: int
    start_column: int | None = None
    end_line: int | None = None
    end_column: int | None = None

    def to_json(self) -> dict[str, int]:
        out = {"line": self.start_line}
        if self.start_column is not None:
            out["column"] = self.start_column
        if self.end_line is not None and self.end_column is not None:
            out |= {"end_line": self.end_line, "end_column": self.end_column}
        return out


@dataclass(slots=True)
class Finding:
    rule: LintRule
    message: str
    fix: str
    subject: RequestRef
    path: str | None  # block path (system[0], messages[3].content[1], tools[2]) or parameter name
    span: tuple[int, int] | None = None  # characters of the block's canonical text
    snippet: str | None = None
    key: tuple[Any, ...] = ()  # what makes two findings of one stream the same problem
    repeats: int = 0  # later requests of the stream with the same finding
    region: Region | None = None
    block_text: str | None = field(default=None, repr=False)  # to place the span in the source file

    @property
    def severity(self) -> str:
        return self.rule.severity

    def to_json(self) -> dict[str, Any]:
        s = self.subject
        return {"rule": self.rule.id, "name": self.rule.name, "severity": self.severity, "message": self.message,
                "fix": self.fix, "request": s.id, "request_index": s.index, "stream": s.stream, "path": self.path,
                "span": None if self.span is None else {"start": self.span[0], "end": self.span[1]},
                "snippet": self.snippet, "file": s.source,
                "location": None if self.region is None else self.region.to_json(), "repeats": self.repeats}


def make_finding(rule: LintRule, subject: Subject, path: str | None, key: tuple[Any, ...], *,
                 span: tuple[int, int] | None = None, text: str | None = None, **values: Any) -> Finding:
    """A finding with its rule's message and fix filled from `values` (plus path and model)."""
    fields = {"path": path, "model": subject.request.model or "this model", "provider": subject.request.provider,
              **values}
    snippet = snippet_of(text, span) if text is not None and span is not None else None
    return Finding(rule, rule.message.format(**fields), rule.fix.format(**fields), subject.ref, path, span, snippet,
                   (rule.id, *key), block_text=text)


def one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def snippet_of(text: str, span: tuple[int, int]) -> str:
    start, end = span
    head = max(0, start - SNIPPET_CONTEXT)
    return (("…" if head else "") + one_line(text[head:end + SNIPPET_CONTEXT])
            + ("…" if end + SNIPPET_CONTEXT < len(text) else ""))
