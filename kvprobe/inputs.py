"""Load what a user names on the command line: a request body, a trace record, or `file.jsonl#ID`."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from kvprobe.errors import InputError, not_a_file
from kvprobe.request import RenderedRequest, render_request

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import Any
    from kvprobe.trace import TraceRecord


BODY_KEYS = ("messages", "input", "contents")  # Anthropic and OpenAI Chat, OpenAI Responses, Gemini


@dataclass(slots=True)
class LoadedRequest:
    """A request named on the command line: its label and body, and the provider, endpoint and response its
    trace record names (None for a bare body)."""

    label: str
    body: dict[str, Any]
    provider: str | None
    endpoint: str | None
    response: dict[str, Any] | None = None

    def render(self) -> RenderedRequest:
        try:
            return render_request(self.body, self.provider, self.endpoint, self.response)
        except InputError as exc:
            raise InputError(exc.message, file=self.label, field=_request_field(exc.field)) from None


def _request_field(field: str | None) -> str | None:
    return field


def _from_record(record: TraceRecord, label: str) -> LoadedRequest:
    if record.request is None:
        raise InputError("this record has usage only (no request body) and cannot be diffed",
                         file=record.source, line=record.line, field="request")
    return LoadedRequest(label, record.request, record.provider, record.endpoint, record.response)


def _from_jsonl(path: Path, wanted: str | None) -> LoadedRequest:
    # the trace modules are imported where a trace is read: `diff` of two request bodies reads none
    from kvprobe.request.responses_chain import ResponseChain
    from kvprobe.trace import read_trace

    chain = ResponseChain()  # a request chained on an earlier one's response: the conversation the model saw
    for record in read_trace(path, check_duplicates=False):
        body = chain.effective(record.request, record.response)
        if wanted is None or record.id == wanted:
            return _from_record(replace(record, request=body) if body is not record.request else record,
                                f"{path}#{record.id}")
    if wanted is None:
        raise InputError("the trace holds no records", file=str(path))
    raise InputError(f"no record with id {wanted!r}", file=str(path), field="id")


def read_json_object(path: Path) -> dict[str, Any]:
    """A `.json` input: one request body or one trace record, as a JSON object (errors name the file/line)."""
    try:
        raw = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", file=str(path), line=exc.lineno) from None
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object: a request body or a trace record", file=str(path))
    return raw


def is_trace_record(raw: dict[str, Any]) -> bool:
    return "kvprobe" in raw or isinstance(raw.get("request"), dict)


def _from_json(path: Path) -> LoadedRequest:
    from kvprobe.trace.validate import model_problem

    raw = read_json_object(path)
    if is_trace_record(raw):
        from kvprobe.trace.reader import record_from_json

        return _from_record(record_from_json(raw, str(path), 1), str(path))
    if not any(key in raw for key in BODY_KEYS):
        raise InputError("not a known request format: expected an Anthropic Messages, OpenAI Chat/Responses "
                         "or Gemini body ('messages', 'input' or 'contents'), or a kvprobe trace record",
                         file=str(path), field="messages")
    bad = model_problem(raw, "")
    if bad is not None:
        raise InputError(bad[1], file=str(path), field=bad[0].lstrip("."))
    return LoadedRequest(str(path), raw, None, None)


def load_request(arg: str) -> LoadedRequest:
    """`body.json`, `record.json`, `trace.jsonl` (first record) or `trace.jsonl#ID`."""
    name, _, wanted = arg.partition("#")
    path = Path(name)
    if not path.is_file():
        raise not_a_file(name)
    from kvprobe.importers.formats import agent_log

    kind = agent_log(path)
    if kind is not None:  # an agent log or recording: its requests with bodies, as the importers read them
        return _from_log(path, kind, wanted or None)
    if path.suffix in (".jsonl", ".ndjson") or wanted:
        return _from_jsonl(path, wanted or None)
    return _from_json(path)


def _from_log(path: Path, kind: str, wanted: str | None) -> LoadedRequest:
    from kvprobe.importers import bodies_of

    for record in bodies_of(path, kind, "diff"):
        if wanted is None or record.id == wanted:
            return _from_record(record, f"{path}#{record.id}")
    raise InputError(f"no record with id {wanted!r}", file=str(path), field="id")
