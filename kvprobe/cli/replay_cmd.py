"""`kvprobe replay TRACE`: replay a recorded trace on a real engine; ground-truth caching and latency."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from kvprobe.cli.common import err, fail, out, print_json, user_errors
from kvprobe.cli.tables import Col, print_table
from kvprobe.wording import show


def replay(
    trace: Annotated[Path, typer.Argument(help="Trace file (JSONL), e.g. from `kvprobe capture` or `serve --trace`")],
    engine: Annotated[str, typer.Option("--engine", help="local: the bundled engine in this process; "
                                        "openai-compatible: a vLLM/SGLang server at --base-url")] = "local",
    base_url: Annotated[str | None, typer.Option("--base-url", help="The OpenAI-compatible server "
                                                 "(e.g. http://gpu-box:8000/v1)")] = None,
    remote_model: Annotated[str | None, typer.Option("--remote-model", help="Model name on that server "
                                                     "(default: the first in /v1/models)")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="KVPROBE_REPLAY_API_KEY",
                                                help="Bearer token for that server")] = None,
    timing: Annotated[str, typer.Option("--timing", help="real: recorded gaps; scaled:X (recorded gaps times X); "
                                        "fast: no waiting (dependencies and overlap still kept)")] = "fast",
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Cap on each reply (the recorded limit "
                                            "if lower); replies are greedy")] = 16,
    too_long: Annotated[str, typer.Option("--too-long", help="Prompts over the engine's context: truncate "
                                          "(keep the prefix) or skip; both are counted")] = "truncate",
    limit: Annotated[int | None, typer.Option("--limit", help="Replay only the first N records")] = None,
    what_if: Annotated[bool, typer.Option("--what-if", help="Also replay the trace with each proposed fix, "
                                          "and with all of them, each from a cold cache")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
    model: Annotated[str, typer.Option("--model", help="Local engine model: smollm2-135m-instruct, tiny-random, "
                                       "a .gguf file or a Hugging Face directory")] = "smollm2-135m-instruct",
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda")] = "auto",
    dtype: Annotated[str, typer.Option("--dtype", help="auto (the fast path: bfloat16 where the CPU has it), "
                                       "float32, bfloat16, float16 or float64")] = "auto",
    kv_blocks: Annotated[int | None, typer.Option("--kv-blocks", help="KV cache size in blocks of 16 tokens")] = None,
) -> None:
    """Replay a trace on a real engine: ground-truth cached tokens, prefill and decode time, time to first
    token, cold or warm, beside the provider-rule simulation and the observed usage.

    Requests are sent in recorded order with their concurrency (a request waits for those that had finished
    before it started). Where the provider reused less than the engine's ideal prefix cache, the table
    estimates what that cost in prefill time.

    Exit code 1 when every request failed (nothing was replayed).

    --engine openai-compatible replays against vLLM, SGLang or llama.cpp's servers (Anthropic bodies are converted to Chat
    Completions). llama.cpp (`llama-server`, or `python -m llama_cpp.server`): cached tokens come from its
    stream timings (llama-server) or stay unknown (llama-cpp-python); prompt sizes from its /tokenize when it
    reports none; a chat format that cannot render tools is flagged. Start vLLM with --enable-prompt-tokens-details (cached tokens in usage) and prefix caching
    on (--enable-prefix-caching; the default in vLLM V1); with tools, also --enable-auto-tool-choice
    --tool-call-parser <parser>. Start SGLang with --enable-cache-report.

    Example: kvprobe replay traces/session.jsonl --timing scaled:0.1 --what-if
    """
    from kvprobe.replay import RemoteTarget, Timing, replay_trace
    from kvprobe.trace import read_trace

    with user_errors():
        if engine not in ("local", "openai-compatible"):
            fail(f"--engine: expected local or openai-compatible, got {show(engine)}")
        if too_long not in ("truncate", "skip"):
            fail(f"--too-long: expected truncate or skip, got {show(too_long)}")
        if max_tokens < 0:
            fail("--max-tokens: expected 0 or more")
        if engine == "local":
            from kvprobe.cli.engine_extra import require_engine

            require_engine("replay --engine local")
        parsed_timing = Timing.parse(timing)
        records = list(read_trace(trace))
        if limit is not None:
            records = records[:max(limit, 0)]
        if engine == "openai-compatible":
            if not base_url:
                fail("--engine openai-compatible needs --base-url")
            target: Any = RemoteTarget(base_url, remote_model, max(max_tokens, 1), api_key=api_key)
        else:
            target = _local_target(model, device, dtype, kv_blocks, max_tokens, too_long)
        try:
            with _progress(enabled=err.is_terminal) as progress:
                report = replay_trace(records, target, timing=parsed_timing, what_if=what_if, progress=progress,
                                      max_tokens=max_tokens)
        finally:
            target.stop()
    if json_out:
        print_json(report.to_json())
    else:
        render(report)
    totals = report.baseline.totals
    if totals["requests"] and not totals["replayed"] and totals["failed"]:
        err.print(f"error: every request failed ({totals['failed']} of {totals['requests']}); nothing was replayed",
                  highlight=False)
        raise typer.Exit(1)


def _local_target(model: str, device: str, dtype: str, kv_blocks: int | None, max_tokens: int,
                  too_long: str) -> Any:
    from kvprobe.replay import LocalTarget
    from localengine import Engine

    err.print(f"loading {model} ...", highlight=False)
    try:
        return LocalTarget(None, max_tokens, too_long,
                           load=lambda: Engine(model=model, device=device, dtype=dtype, num_blocks=kv_blocks))
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc))


class _progress:
    """A progress bar with ETA per replay run, on stderr (only on a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                            TextColumn("requests", markup=False), TimeRemainingColumn(), console=err, transient=True) \
            if enabled else None

    def __enter__(self) -> Callable | None:
        if self.bar is None:
            return None
        self.bar.start()

        def factory(label: str, items: list) -> Callable:
            task = self.bar.add_task(f"replaying ({label})", total=len(items))  # type: ignore[union-attr]
            return lambda item, measured: self.bar.advance(task)  # type: ignore[union-attr]
        return factory

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _s(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}"


def render(report: Any) -> None:
    base = report.baseline
    cols = (Col("id", wrap=True),) + tuple(Col(name, "right", drop=drop) for name, drop in (
        ("prompt", None), ("cached", 2), ("hit%", None), ("prov%", None), ("TTFT", None), ("decode", 1),
        ("miss", 3)))
    rows: list[list[str | Text]] = []
    for row in base.rows:
        m = row.measured
        if m.status != "replayed":
            rows.append([m.id, Text(m.status, style="yellow"), "", "", "", "", "", ""])
            continue
        hit = m.cached_tokens / m.prompt_tokens if m.cached_tokens is not None and m.prompt_tokens else None
        short = row.shortfall_tokens
        cost = short * base.seconds_per_token if short and base.seconds_per_token else None
        prompt = f"{m.prompt_tokens:,}" + ("*" if m.truncated_from else "")
        observed = row.result is not None and row.result.observed
        rows.append([m.id, prompt, "-" if m.cached_tokens is None else f"{m.cached_tokens:,}", _pct(hit),
                     Text(_pct(row.provider_fraction), style="" if observed else "italic"),
                     _s(m.first_token_seconds), _s(m.decode_seconds),
                     Text(_s(cost), style="red" if cost else "dim")])
    print_table(f"Replay on {report.engine.get('model') or report.engine.get('base_url')} (timing {report.timing}, "
                f"replies ≤ {report.max_tokens} tokens; times in seconds)", cols, rows)
    out.print(Text("prov%: the provider's cache reads as a share of its input, observed (italic: simulated). "
                   "miss: estimated extra prefill from what the provider did not reuse but this cache did.",
                   style="dim"))
    _render_totals(report)
    if report.what_if:
        _render_what_if(report)
    for note in report.notes:
        out.print(Text(f"note: {note}", style="dim"))


def _render_totals(report: Any) -> None:
    t = report.baseline.totals
    hit = t["engine_hit_ratio"]
    out.print(Text.assemble(("Replayed ", "bold"), f"{t['replayed']} of {t['requests']} requests · ",
                            (f"engine hit ratio {100 * hit:.1f}%", "green") if hit is not None
                            else ("engine hit ratio unknown (the server reports no cached tokens)", "yellow"),
                            " · provider ",
                            f"{_pct(t['provider_hit_ratio'])}%" if t["provider_hit_ratio"] is not None else "n/a",
                            f" · prefill {t['prefill_seconds']:.2f} s · decode {t['decode_seconds']:.2f} s"))
    sources = [s for s in t.get("prompt_tokens_sources", []) if s != "engine"]
    if sources:
        out.print(Text(f"prompt sizes from: {', '.join(sources)}", style="dim"))
    unknown = f" · cache unknown {t['cache_unknown_requests']}" if t.get("cache_unknown_requests") else ""
    out.print(f"Cold {t['cold_requests']} (mean TTFT {_s(t['mean_first_token_seconds_cold'])} s) · warm "
              f"{t['warm_requests']} (mean TTFT {_s(t['mean_first_token_seconds_warm'])} s){unknown} · prefill "
              f"{t['prefill_tokens_per_second'] or '-'} tok/s on uncached tokens  "
              "(warm: at least half the prompt from the cache)", highlight=False)
    if t["provider_shortfall_tokens"]:
        out.print(Text(f"The provider reused {t['provider_shortfall_tokens']:,} engine tokens less than an ideal "
                       f"prefix cache: ≈ {_s(t['provider_shortfall_seconds_est'], 2)} s more prefill",
                       style="yellow"))
    if t["truncated"]:
        out.print(Text(f"{t['truncated']} prompts cut to the context (marked *)", style="yellow"))
    ids = t.get("not_replayed_ids", {})
    for reason, count in t["not_replayed"].items():
        who = ", ".join(ids.get(reason, [])[:4]) + (", ..." if len(ids.get(reason, [])) > 4 else "")
        out.print(Text(f"not replayed ({count}: {who}): {reason}", style="yellow"))


def _render_what_if(report: Any) -> None:
    cols = (Col("fix", wrap=True),) + tuple(Col(name, "right", wrap=True, drop=drop) for name, drop in (
        ("saving (input-eq.)", 2), ("engine hit %", None), ("provider hit %", None), ("prefill saved s", 3),
        ("TTFT saved s", None), ("provider prefill saved s (est.)", 1)))
    rows = [[w["kind"], f"{w['predicted_saving_input_equivalent_tokens']:,.0f}", _pct(w["engine_hit_ratio"]),
             _pct(w["provider_hit_ratio"]), _s(w["prefill_seconds_saved"]), _s(w["first_token_seconds_saved"]),
             _s(w["provider_prefill_seconds_saved_est"])] for w in report.what_if]
    print_table("What-if, replayed from a cold cache each", cols, rows)
