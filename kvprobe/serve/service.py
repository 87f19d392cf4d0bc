"""The server's state and one request's life: prompt -> engine -> usage (ground truth or emulated) -> answer.

Every API (Anthropic Messages, OpenAI Chat Completions and Responses, Gemini) parses its body into a `Job`
and consumes `generate(job)`: a `Began` event once the prompt is computed (usage is known), `Delta`s of the
model's text, and `Done`. With a cassette (`--responses-from`) the engine only computes the prompt (its
cache and the usage are those of the request really sent) and `Done` carries the recorded answer instead.
"""
from __future__ import annotations

import contextlib
import itertools
from collections import OrderedDict
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvprobe.request.model import RenderedRequest
from kvprobe.serve import engine_loop as el
from kvprobe.serve.cassette import Cassette, Match, Recorded
from kvprobe.serve.diagnostics import CacheDiagnostics
from kvprobe.serve.emulation import CacheEmulator, parse_specs
from kvprobe.serve.errors import ApiError, invalid
from kvprobe.serve.prompt import Prompt, PromptError, build_prompt, max_token_bytes
from kvprobe.serve.recording import DISCONNECTED, Recorder
from kvprobe.serve.replies import output_counts
from kvprobe.serve.structured import answer_text, requested_schema
from kvprobe.serve.text import TextStream
from kvprobe.sim import Prediction
from kvprobe.trace import TraceRecord

CLOCK_HEADER = "x-kvprobe-clock"
LATEST_CLOCK = 253402300799.0  # 9999-12-31T23:59:59Z: what a trace's times can say


@dataclass(slots=True)
class UsageFacts:
    """Token counts of one request in provider-neutral terms (prompt tokens of the served prompt)."""

    prompt_tokens: int
    cache_read_tokens: int
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    output_tokens: int = 0
    engine_cached_tokens: int = 0  # what the engine's prefix cache reused (always reported, whatever the mode)
    evidence: list[str] = field(default_factory=list)  # simulator evidence kinds (emulation)
    cache_miss_reason: dict[str, Any] | None = None  # against the request's diagnostics.previous_message_id
    window: Any = None  # localengine.accounting.Window: the prompt tokens the model attended to
    model_cached_tokens: int = 0  # of those, tokens whose K/V the engine reused
    reasoning_tokens: int = 0  # of output_tokens (a recorded answer's)

    @property
    def cache_write_tokens(self) -> int:
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens

    @property
    def fresh_input_tokens(self) -> int:
        return self.prompt_tokens - self.cache_read_tokens - self.cache_write_tokens


@dataclass(slots=True)
class Timings:
    arrival: float  # perf_counter when the request arrived
    clock_start: float  # what the (emulated) cache saw as the start time, epoch seconds
    prefill_done: float | None = None
    finished: float | None = None
    prefill_seconds: float | None = None  # the forward pass that computed the prompt (engine's figure)
    decode_seconds: float | None = None

    def clock_at(self, perf: float) -> float:
        return self.clock_start + (perf - self.arrival)

    def to_json(self) -> dict[str, Any]:
        ttft = None if self.prefill_done is None else self.prefill_done - self.arrival
        total = None if self.finished is None else self.finished - self.arrival
        return {"first_token_seconds": _r(ttft), "total_seconds": _r(total),
                "prefill_seconds": _r(self.prefill_seconds), "decode_seconds": _r(self.decode_seconds)}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@dataclass(slots=True)
class Job:
    api: str  # anthropic | openai_chat | openai_responses | gemini
    endpoint: str
    request_id: str
    model: str  # echoed back as sent
    body: dict[str, Any]
    prompt: Prompt
    max_tokens: int  # the reply limit served (see `asked_max_tokens`)
    temperature: float
    stop: list[str]
    timings: Timings
    diagnostics: bool = False  # the request asked for cache diagnostics (Anthropic)
    previous_message_id: str | None = None
    asked_max_tokens: int | None = None  # what the client asked for, when it was more than served
    match: Match | None = None  # the cassette's verdict (--responses-from)
    recorded: Recorded | None = None  # the recorded answer it serves
    cut_locally: bool = False  # the reply stopped at the engine's limit, not at the client's
    schema: dict[str, Any] | None = None  # the JSON schema the answer must follow (structured outputs)
    schema_written: bool = False  # the model's text did not parse: kvprobe wrote the answer
    context: dict[str, Any] = field(default_factory=dict)  # what one API keeps beside (Responses: its input)

    @property
    def provider(self) -> str:
        return self.prompt.request.provider


@dataclass(slots=True)
class Began:
    usage: UsageFacts


@dataclass(slots=True)
class Delta:
    text: str


@dataclass(slots=True)
class Done:
    finish: str  # stop | length | stop_sequence | recorded
    stop_sequence: str | None
    text: str
    usage: UsageFacts
    recorded: Recorded | None = None  # the cassette's answer, in its API's shape


@dataclass(slots=True)
class ServeConfig:
    model: str = "smollm2-135m-instruct"
    cache: str = "engine"  # engine | emulate
    emulate: str | list[str] = "anthropic/claude-sonnet-4-5"  # PROVIDER/MODEL, one per API family at most
    clock: str = "real"  # real | virtual
    device: str = "auto"
    dtype: str = "float32"
    num_blocks: int | None = None
    block_size: int = 16
    seed: int = 0
    default_max_tokens: int = 256  # OpenAI requests that set no limit
    trace: str | Path | None = None  # append every answered request to this JSONL trace
    trace_replace: bool = False  # empty that trace first (--force) instead of adding to it
    max_body_bytes: int = 32 << 20  # the Messages API's documented request size limit (32 MB)
    max_output_tokens: int = 256  # the engine's reply limit: a larger max_tokens is served this many
    model_window: int | None = 2048  # prompt tokens the model attends to at most (accounting mode beyond)
    max_prompt_tokens: int = 1_000_000  # longer prompts are refused, as a provider refuses them
    responses_from: str | Path | None = None  # a trace whose recorded responses answer (cassette)

    def validate(self) -> CacheEmulator | None:
        if self.cache not in ("engine", "emulate"):
            raise ValueError(f"cache must be 'engine' or 'emulate', got {self.cache!r}")
        if self.clock not in ("real", "virtual"):
            raise ValueError(f"clock must be 'real' or 'virtual', got {self.clock!r}")
        if self.max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be at least 1, got {self.max_output_tokens}")
        return CacheEmulator(parse_specs(self.emulate)) if self.cache == "emulate" else None


class ServeState:
    """Everything a request handler needs; handlers run on one asyncio loop, so no locks here."""

    def __init__(self, config: ServeConfig, engine: Any = None, load: Callable[[], Any] | None = None) -> None:
        """`engine`, or `load` to build it on the engine's own thread (faster: see `EngineLoop`)."""
        self.emulator = config.validate()
        self.cassette = Cassette.load(config.responses_from) if config.responses_from else None
        self.config = config
        self.loop = el.EngineLoop(engine, load=load)
        self.engine = engine = self.loop.engine
        self.tokenizer = engine.tokenizer
        self.max_token_bytes = max_token_bytes(self.tokenizer)
        self.context_tokens = int(engine.model_config.max_position_embeddings)
        stats = self.loop.call(lambda e: e.stats).result()
        self.kv_tokens = stats.blocks_total * stats.block_size  # the most one request's window can hold
        self.recorder = Recorder(config.trace, replace=config.trace_replace) if config.trace else None
        self.diagnostics = CacheDiagnostics()
        self.stored: OrderedDict[str, Any] = OrderedDict()  # Responses API: stored responses by id
        self._ids = itertools.count(1)
        self.started_at = time.time()
        self.requests_served = 0
        self.requests_failed = 0
        self.requests_disconnected = 0

    @property
    def cache_mode(self) -> str:
        return f"emulate:{self.emulator.label}" if self.emulator else "engine"

    @property
    def reply_limit(self) -> int:
        """The longest reply the engine writes: --max-output-tokens, and half of what the model holds."""
        return max(1, min(self.config.max_output_tokens, min(self.context_tokens, self.kv_tokens) // 2))

    def close(self) -> None:
        self.loop.stop()
        if self.recorder:
            self.recorder.close()

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}{secrets.token_hex(3)}"

    def timings(self, headers: Any) -> Timings:
        arrival = time.perf_counter()
        raw = headers.get(CLOCK_HEADER)
        if raw is None or self.config.clock != "virtual":
            return Timings(arrival, time.time())
        try:
            clock = float(raw)
        except ValueError:
            clock = math.nan
        if not 0 <= clock <= LATEST_CLOCK:  # nan, inf and 1e300 too: refused before any work is done
            raise invalid(f"header X-Kvprobe-Clock: expected epoch seconds (0 to {LATEST_CLOCK:.0f}, the end of "
                          f"year 9999), got {raw[:40]!r}")
        return Timings(arrival, clock)

    def check_recordable(self, body: Any) -> None:
        """With a trace (-o), a request whose body cannot be written there is refused before it is answered:
        every answered request has its line."""
        if self.recorder is None:
            return
        try:
            orjson.dumps(body)
        except orjson.JSONEncodeError as exc:
            raise invalid(f"kvprobe serve records every request in its trace (-o) and cannot write this "
                          f"request's body: {exc}") from None

    def prompt(self, rendered: RenderedRequest, check_length: bool = True) -> Prompt:
        """The whole prompt's tokens. Its length is only refused past --max-prompt-tokens (a provider's
        context): a prompt longer than the model takes is answered in accounting mode (docs/engine.md)."""
        limit = self.config.max_prompt_tokens if check_length else None
        try:
            prompt = build_prompt(rendered, self.tokenizer, limit=limit, max_token_bytes=self.max_token_bytes)
        except PromptError as exc:
            raise invalid(str(exc)) from None
        return prompt

    def job(self, api: str, endpoint: str, prefix: str, body: dict[str, Any], rendered: RenderedRequest,
            asked_max_tokens: int, temperature: float, stop: list[str], headers: Any) -> Job:
        """A request's job once its body passed its API's checks: prompt, reply limit, cassette match."""
        timings = self.timings(headers)
        self.check_recordable(body)
        prompt = self.prompt(rendered)
        served = min(asked_max_tokens, self.reply_limit)
        job = Job(api, endpoint, self.new_id(prefix), str(body.get("model") or rendered.model), body, prompt,
                  served, temperature, stop, timings,
                  asked_max_tokens=asked_max_tokens if asked_max_tokens > served else None)
        if self.cassette is not None:
            job.match, job.recorded = self.cassette.match(api, rendered)
        job.schema = requested_schema(api, body)
        job.context["session"], job.context["agent"] = client_identity(headers)
        return job


# Headers that name a client's conversation: kvprobe's own, then what agent CLIs send (Claude Code, Codex)
SESSION_HEADERS = ("x-kvprobe-session", "x-claude-code-session-id", "session-id", "thread-id")


def client_identity(headers: Any) -> tuple[str | None, str | None]:
    """(session, agent) a request's headers name, for its trace record: the conversation header, and the
    product in its User-Agent (claude-cli, codex_exec, GeminiCLI-tui, QwenCode, ...)."""
    session = next((headers.get(h) for h in SESSION_HEADERS if headers.get(h)), None) if headers else None
    agent = (headers.get("user-agent") or "").split("/", 1)[0].strip() if headers else ""
    return (session[:200] if session else None), (agent[:80] or None)


def _began(state: ServeState, job: Job, pred: Prediction | None, event: el.Prefilled) -> UsageFacts:
    """The prompt is computed: usage is known (ground truth or emulated) and the response begins."""
    job.timings.prefill_done = event.at
    p = job.prompt
    if pred is not None:
        facts = UsageFacts(p.num_tokens, pred.cache_read_tokens, pred.cache_write_5m_tokens,
                           pred.cache_write_1h_tokens, evidence=[e.kind for e in pred.evidence])
    else:
        facts = UsageFacts(p.num_tokens, event.cached_tokens)
    facts.engine_cached_tokens, facts.window, facts.model_cached_tokens = \
        event.cached_tokens, event.window, event.model_cached_tokens
    if state.emulator:
        state.emulator.began(job.request_id, job.timings.clock_at(event.at),
                             state.emulator.rules(p.request, job.api))
    if job.diagnostics:
        facts.cache_miss_reason = state.diagnostics.reason(job.previous_message_id, p.request,
                                                           facts.cache_read_tokens, job.body)
    return facts


async def generate(state: ServeState, job: Job) -> AsyncIterator[Began | Delta | Done]:
    """Run one job on the engine; closing the iterator early aborts the request."""
    emulator, t = state.emulator, job.timings
    pred = emulator.admit(job.prompt.request, job.api, job.request_id, t.clock_start) if emulator else None
    text = TextStream(state.tokenizer, job.stop)
    facts = UsageFacts(job.prompt.num_tokens, 0)
    outcome = "failed"
    replaying = job.recorded is not None  # the engine computes the prompt only; the cassette answers
    holding = job.schema is not None and not replaying  # JSON is checked whole before any of it is sent
    try:
        events = el.stream(state.loop, job.prompt.token_ids, max_tokens=0 if replaying else job.max_tokens,
                           temperature=job.temperature)
        async with contextlib.aclosing(events) as events:
            async for event in events:
                if isinstance(event, el.Prefilled):
                    facts = _began(state, job, pred, event)
                    yield Began(facts)
                elif isinstance(event, el.Tokens) and not replaying:
                    facts.output_tokens += len(event.token_ids)
                    delta = text.feed(event.token_ids)
                    if delta and not holding:
                        yield Delta(delta)
                    if text.stop_sequence is not None:
                        outcome = "stop_sequence"
                        break  # leaving the `async with` aborts the engine request
                elif isinstance(event, el.Finished):
                    t.prefill_seconds, t.decode_seconds = event.result.prefill_seconds, event.result.decode_seconds
                    outcome = "stop" if event.result.finish_reason == "stop" else "length"
                    if outcome == "length" and job.asked_max_tokens is not None:
                        # cut by the engine's own limit, not the client's: the client hears a normal end
                        # (an agent told "max_tokens" retries or gives up), the kvprobe object says it
                        outcome, job.cut_locally = "stop", True
                elif isinstance(event, el.Failed):
                    raise ApiError(500, f"the engine failed while serving this request: {event.error}")
        if replaying:
            outcome = "recorded"
            facts.output_tokens, facts.reasoning_tokens = output_counts(job.recorded, state.tokenizer)
        tail = "" if replaying else text.flush()
        final = text.final_text
        if holding:
            final, job.schema_written = answer_text(job.schema, final)
            tail = final
        if tail:
            yield Delta(tail)
        t.finished = time.perf_counter()
        yield Done(outcome, text.stop_sequence, final, facts, job.recorded)
    except ValueError as exc:  # the engine refused the prompt (e.g. more KV blocks than the cache has)
        raise invalid(str(exc)) from None
    finally:
        if emulator:
            if outcome == "failed" and t.prefill_done is None:
                emulator.failed(job.request_id)
            else:
                emulator.finished(job.request_id, t.clock_at(time.perf_counter()))


async def generate_all(state: ServeState, job: Job) -> Done:
    """Run a non-streamed request to its end and return the final event."""
    done = None
    async for event in generate(state, job):
        if isinstance(event, Done):
            done = event
    if done is None:
        raise RuntimeError(f"request {job.request_id} ended without a final event")
    return done


def kvprobe_extension(state: ServeState, job: Job, usage: UsageFacts | None) -> dict[str, Any]:
    """The non-standard `kvprobe` object added to responses (SDKs ignore unknown fields): how the request
    was served (docs/serve.md lists every field)."""
    out: dict[str, Any] = {"cache_mode": state.cache_mode, "clock": round(job.timings.clock_start, 6),
                           **job.timings.to_json(), "answer": _answer_source(job)}
    if usage is not None:
        out |= {"prompt_tokens": usage.prompt_tokens, "engine_cached_tokens": usage.engine_cached_tokens,
                "evidence": usage.evidence, "usage": _usage_source(state, job, usage)}
        if usage.window is not None and not usage.window.is_whole:
            out["model_window"] = {**usage.window.to_json(), "kv_reused_tokens": usage.model_cached_tokens}
    if job.asked_max_tokens is not None:
        out["max_tokens"] = {"requested": job.asked_max_tokens, "served": job.max_tokens,
                             "cut_at_served_limit": job.cut_locally,
                             "reason": f"the local engine writes at most {state.reply_limit} tokens a reply "
                                       "(--max-output-tokens)"}
    if job.match is not None:
        out["cassette"] = job.match.to_json()
    return out


def _answer_source(job: Job) -> str:
    """Who wrote the answer: the model, the cassette, or kvprobe (JSON of the schema asked for)."""
    return "cassette" if job.recorded else "schema" if job.schema_written else "model"


def _usage_source(state: ServeState, job: Job, usage: UsageFacts) -> str:
    if state.emulator:
        spec = state.emulator.spec_for(job.api, job.provider)
        return f"emulated: {spec.provider}/{spec.model or job.prompt.request.model}'s caching rules"
    if usage.window is not None and not usage.window.is_whole:
        return "engine: the prefix ledger's count for the whole prompt (accounting mode)"
    return "engine: the KV cache's own count"


def record_trace(state: ServeState, job: Job, response: dict[str, Any] | None, provider: str, *,
                 disconnected: bool = False, error: str | None = None) -> None:
    """Write the request's record (RecordLost when the trace cannot hold it: the caller answers an error)."""
    if state.recorder is None:
        return
    t = job.timings
    wall = t.clock_start - t.arrival  # perf_counter -> the job's clock
    extra = {DISCONNECTED: True} if disconnected else {}
    state.recorder.write(TraceRecord(
        id=job.request_id, provider=provider, started_at=t.clock_start, request=job.body, response=response,
        session=job.context.get("session"), agent=job.context.get("agent"),
        endpoint=job.endpoint, first_token_at=None if t.prefill_done is None else t.prefill_done + wall,
        finished_at=None if t.finished is None else t.finished + wall, error=error, extra=extra))
