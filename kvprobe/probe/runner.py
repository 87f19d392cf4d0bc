"""Run the four probe requests against a provider (or the bundled engine) and log each as it finishes."""
from __future__ import annotations

import contextlib
import getpass
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.catalog import rules_for
from kvprobe.errors import InputError
from kvprobe.pricing import PriceBook
from kvprobe.probe.cases import MAX_OUTPUT_TOKENS, ProbeCase, build_cases, new_run_id, read_document
from kvprobe.probe.client import Outcome, run_anthropic, run_openai
from kvprobe.probe.verdict import Verdict, judge, usage_of
from kvprobe.request import render_request
from kvprobe.sim import cache_for, cache_name
from kvprobe.tokens import TokenCounter
from kvprobe.trace import TraceRecord, write_trace
from kvprobe.usage import Usage

# How to reach each provider: the key's environment variable and the SDK that speaks its API.
PROVIDERS: dict[str, dict[str, Any]] = {
    "local": {"sdk": "anthropic", "env": None, "model": "claude-sonnet-5"},
    "anthropic": {"sdk": "anthropic", "env": "ANTHROPIC_API_KEY", "model": "claude-sonnet-5"},
    "openai": {"sdk": "openai", "env": "OPENAI_API_KEY", "model": "gpt-4o-mini"},
    "deepseek": {"sdk": "openai", "env": "DEEPSEEK_API_KEY", "model": "deepseek-chat",
                 "base_url": "https://api.deepseek.com"},
}


@dataclass(slots=True)
class ProbeResult:
    provider: str
    model: str
    run_id: str
    cases: list[ProbeCase]
    outcomes: list[Outcome] = field(default_factory=list)
    verdict: Verdict | None = None
    costs: list[float | None] = field(default_factory=list)
    stopped: str | None = None  # why the run stopped early

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict and self.verdict.confirmed and not self.stopped else 1


@dataclass(slots=True)
class Estimate:
    prefix_tokens: int
    minimum: int
    exact: bool
    predicted: list[dict[str, int]]
    costs: list[float | None]


def api_key(provider: str, prompt: Callable[[str], str] | None = None) -> str | None:
    env = PROVIDERS[provider]["env"]
    if env is None:
        return None
    key = os.environ.get(env)
    if key:
        return key
    if prompt is None and sys.stdin.isatty():
        prompt = getpass.getpass  # never echoes
    if prompt is None:
        raise InputError(f"no API key: set {env} (it is never printed or written)", field=env)
    key = prompt(f"{env}: ")
    if not key:
        raise InputError(f"no API key given for {provider}", field=env)
    return key


def estimate(cases: list[ProbeCase], provider: str, model: str) -> Estimate:
    """Predicted usage and cost of the four requests under the provider's rules, one second apart."""
    sim_provider = "anthropic" if provider == "local" else provider
    rules = rules_for(sim_provider, model)
    counter = TokenCounter(rules)
    caches: dict[str, Any] = {}  # by the cache a request's mode uses (GPT-5.6+: breakpoints, not a prefix cache)
    predicted, costs, prefix = [], [], 0
    book = PriceBook()
    for i, case in enumerate(cases):
        req = render_request({k: v for k, v in case.body.items() if k not in ("stream", "stream_options")},
                             sim_provider)
        counter.count_request(req)
        prefix = prefix or req.blocks[0].tokens
        name = cache_name(sim_provider, None, req.cache_mode)
        if name not in caches:
            caches[name] = cache_for(req.cache_mode)
        cache = caches[name]
        p = cache.process(req, rules_for(sim_provider, model, None, req.cache_mode, req.retention), case.name,
                          float(i), float(i) + 0.5)
        predicted.append(p.as_dict())
        usage = Usage(p.input_tokens, p.cache_read_tokens, p.cache_write_5m_tokens, p.cache_write_1h_tokens,
                      MAX_OUTPUT_TOKENS)  # the most a probe request can produce
        costs.append(book.cost(sim_provider, model, usage, None).usd)
    return Estimate(prefix, int(rules.get("min_cacheable_tokens", 0)), counter.exact, predicted, costs)


def check_length(est: Estimate, model: str, document: Path) -> None:
    if est.prefix_tokens < est.minimum:
        approx = "" if est.exact else "about "
        raise InputError(f"the document is {approx}{est.prefix_tokens:,} tokens; {model} caches nothing under "
                         f"{est.minimum:,} tokens. Use a longer document", file=str(document))


def check_provider(provider: str) -> None:
    """Refuse an unknown provider before anything is printed or started."""
    if provider not in PROVIDERS:
        raise InputError(f"expected one of {', '.join(PROVIDERS)}, got {provider!r}", field="--provider")


@contextlib.contextmanager
def _local_server(model: str, on_status: Callable[[str], None] | None = None) -> Iterator[str]:
    try:
        from kvprobe.serve import start_server  # needs the engine extra (torch)
    except ImportError as exc:
        raise InputError(f"the local engine is not installed ({exc.name or exc}): run with "
                         "`uv run --extra engine kvprobe run-probe ...`, or pass --provider anthropic|openai|deepseek",
                         field="--provider") from None

    if on_status:
        on_status("loading the local engine (SmolLM2-135M-Instruct)")
    # dtype auto: the engine's fast path (bfloat16 matmuls where the CPU has them)
    with start_server(cache="emulate", emulate=f"anthropic/{model}", port=0, dtype="auto") as handle:
        yield handle.base_url


def _client(provider: str, base_url: str | None, key: str | None, options: dict[str, Any]) -> Any:
    sdk = PROVIDERS[provider]["sdk"]
    if sdk == "anthropic":
        import anthropic
        return anthropic.Anthropic(api_key=key or "local", base_url=base_url, max_retries=0, **options)
    import openai
    url = base_url or PROVIDERS[provider].get("base_url")
    return openai.OpenAI(api_key=key, base_url=url, max_retries=0, **options)


def _record(result: ProbeResult, index: int, outcome: Outcome) -> TraceRecord:
    case = result.cases[index]
    provider = "anthropic" if result.provider == "local" else result.provider
    probe = {"case": outcome.case, "requested_model": outcome.requested_model,
             "returned_model": outcome.returned_model, "usage": outcome.usage, "first_text_s": outcome.first_text_s,
             "request_s": outcome.request_s, "stop_reason": outcome.stop_reason, "complete": outcome.complete,
             "error": outcome.error, "run_id": result.run_id, "probe_provider": result.provider}
    response = {"model": outcome.returned_model, "usage": outcome.usage}
    if "diagnostics" in outcome.extra:  # the API's own verdict, for `report` to show as reported
        response |= {"id": outcome.extra.get("message_id"), "diagnostics": outcome.extra["diagnostics"]}
    return TraceRecord(id=f"{result.run_id}-{index + 1}", provider=provider, started_at=outcome.started_at,
                       first_token_at=outcome.first_token_at, finished_at=outcome.finished_at,
                       request=case.body, response=response,
                       session=f"probe-{result.run_id}", agent="probe", error=outcome.error,
                       endpoint="/v1/messages" if PROVIDERS[result.provider]["sdk"] == "anthropic"
                       else "/v1/chat/completions", extra={k: v for k, v in probe.items() if k != "error"})


def run_probe(document: Path, provider: str = "local", model: str | None = None, base_url: str | None = None,
              out: Path | None = None, key_prompt: Callable[[str], str] | None = None,
              client_options: dict[str, Any] | None = None,
              on_outcome: Callable[[Outcome], None] | None = None, diagnostics: bool = False,
              on_status: Callable[[str], None] | None = None) -> ProbeResult:
    """The four requests, sequentially; stops at the first error or an unconfirmed hit after request 2.

    diagnostics=True asks the API to compare each request with the previous one (Anthropic only).
    `on_status` hears what is under way (loading the engine, which request is waiting for its reply)."""
    check_provider(provider)
    if diagnostics and PROVIDERS[provider]["sdk"] != "anthropic":
        raise InputError("only the Anthropic Messages API reports cache diagnostics", field="--diagnostics")
    model = model or PROVIDERS[provider]["model"]
    text = read_document(document)
    result = ProbeResult(provider, model, new_run_id(), [])
    result.cases = build_cases(text, provider, model, result.run_id)
    est = estimate(result.cases, provider, model)
    check_length(est, model, document)
    key = api_key(provider, key_prompt)
    log: list[TraceRecord] = []
    try:
        with (_local_server(model, on_status) if provider == "local" and base_url is None
              else contextlib.nullcontext(base_url)) as url:
            client = _client(provider, url, key, client_options or {})
            _run_cases(result, client, key, log, on_outcome, diagnostics, on_status)
    finally:
        if out is not None and log:  # whatever ran, written at once (atomically): never a half-written log
            write_trace(out, log)
    price_provider = "anthropic" if provider == "local" else provider
    book = PriceBook()
    result.costs = [book.cost(price_provider, model, u, None).usd if u else None
                    for u in (usage_of(provider, o) for o in result.outcomes)]
    result.verdict = judge(provider, result.outcomes, est.minimum)
    return result


def _run_cases(result: ProbeResult, client: Any, key: str | None, log: list[TraceRecord],
               on_outcome: Callable[[Outcome], None] | None, diagnostics: bool = False,
               on_status: Callable[[str], None] | None = None) -> None:
    run = run_anthropic if PROVIDERS[result.provider]["sdk"] == "anthropic" else run_openai
    for i, case in enumerate(result.cases):
        if on_status:
            on_status(f"request {i + 1}/4 ({case.name.replace('_', ' ')}): prefill and reply")
        if diagnostics:  # compare with the previous request (null on the first: opts in)
            previous = result.outcomes[-1].extra.get("message_id") if result.outcomes else None
            case.body["diagnostics"] = {"previous_message_id": previous}
        outcome = run(client, case.name, case.body, key)
        result.outcomes.append(outcome)
        log.append(_record(result, i, outcome))
        if on_outcome:
            on_outcome(outcome)
        if outcome.error:
            result.stopped = f"request {i + 1} ({case.name}) failed: {outcome.error}"
            return
        if i == 1 and not judge(result.provider, result.outcomes, None).confirmed:
            result.stopped = "request 2 showed no cache read"
            return
