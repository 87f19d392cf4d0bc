"""`kvprobe serve`: the local engine behind the Anthropic, OpenAI (Chat, Responses) and Gemini APIs."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvprobe.cli.common import Force, err, fail, out, user_errors
from kvprobe.output import check_append_output

DEFAULT_EMULATE = "anthropic/claude-sonnet-4-5"


def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: any free port)")] = 8089,
    model: Annotated[str, typer.Option("--model", help="smollm2-135m-instruct, tiny-random, a .gguf file "
                                       "or a Hugging Face model directory")] = "smollm2-135m-instruct",
    cache: Annotated[str, typer.Option("--cache", help="engine: report what the engine really reused; "
                                       "emulate: report a provider's usage (see --emulate)")] = "engine",
    emulate: Annotated[list[str] | None, typer.Option("--emulate", metavar="PROVIDER/MODEL",
                                                      help="Report usage by this provider's caching rules, e.g. "
                                                      "anthropic/claude-sonnet-4-5, openai/gpt-5, gemini, "
                                                      "deepseek/deepseek-chat; repeat it for other APIs (each API "
                                                      "not named follows its own provider's rules for the "
                                                      "model asked for). Implies --cache emulate")] = None,
    virtual_clock: Annotated[bool, typer.Option("--virtual-clock", help="Let the X-Kvprobe-Clock request "
                                                "header (epoch seconds) set the time the emulated cache sees")] = False,
    trace: Annotated[Path | None, typer.Option("--output", "-o", help="Write every answered request to this "
                                               "JSONL trace (replay it with `kvprobe replay`)")] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda")] = "auto",
    dtype: Annotated[str, typer.Option("--dtype", help="auto (the fast path: bfloat16 where the CPU has it, as "
                                       "replay and run-probe use), float32, bfloat16 or float16")] = "auto",
    kv_blocks: Annotated[int | None, typer.Option("--kv-blocks", help="KV cache size in blocks of 16 tokens "
                                                  "(default: sized from the model and memory)")] = None,
    default_max_tokens: Annotated[int, typer.Option("--default-max-tokens", help="Reply limit for OpenAI "
                                                    "requests that set none")] = 256,
    max_output_tokens: Annotated[int, typer.Option("--max-output-tokens", min=1, help="The most tokens the "
                                                   "engine writes a reply: a larger max_tokens is served this "
                                                   "many (the response's kvprobe object says so)")] = 256,
    model_window: Annotated[int, typer.Option("--model-window", min=64, help="The most prompt tokens the model "
                                              "attends to; a longer prompt is answered on its start and end "
                                              "while the prefix ledger accounts for all of it (docs/engine.md)")]
    = 2048,
    max_prompt_tokens: Annotated[int, typer.Option("--max-prompt-tokens", min=1, help="Refuse longer prompts, "
                                                   "as a provider refuses those over its context")] = 1_000_000,
    responses_from: Annotated[Path | None, typer.Option("--responses-from", metavar="TRACE", help="Answer each "
                                                        "request with the recorded response of its matching "
                                                        "request in this trace (usage is still computed for the "
                                                        "request sent); docs/serve.md says how they match")]
    = None,
    append: Annotated[bool, typer.Option("--append", help="Add to an existing --output trace")] = False,
    force: Force = False,
    trace_alias: Annotated[Path | None, typer.Option("--trace", hidden=True)] = None,
) -> None:
    """Serve the bundled local engine over the Anthropic, OpenAI and Gemini APIs, with prompt-cache usage.

    The official SDKs and agent CLIs work unchanged: anthropic.Anthropic(base_url="http://127.0.0.1:8089"),
    openai.OpenAI(base_url="http://127.0.0.1:8089/v1") (Chat Completions and Responses), Gemini at
    http://127.0.0.1:8089 (GOOGLE_GEMINI_BASE_URL). Streaming, count_tokens and cache_control work; prompts
    of any length are answered; every response also carries a `kvprobe` object with the engine's ground truth
    (cached tokens, timings) and what was clamped or replayed.

    Example: kvprobe serve --emulate anthropic/claude-sonnet-4-5 --virtual-clock

    Example: kvprobe serve --emulate anthropic/claude-opus-5 --responses-from recorded.jsonl -o ci.jsonl
    """
    from kvprobe.cli.engine_extra import require_engine

    require_engine("serve")
    from kvprobe.serve import start_server
    from kvprobe.serve.emulation import parse_specs

    if emulate:
        cache = "emulate"
    if cache not in ("engine", "emulate"):
        fail(f"--cache: expected engine or emulate, got {cache}")
    specs = list(emulate or [DEFAULT_EMULATE])
    try:
        parse_specs(specs)
    except ValueError as exc:
        fail(str(exc))
    trace = trace_alias or trace
    if trace is not None:
        with user_errors():
            check_append_output(trace, force=force, append=append)
    err.print(f"loading {model} ...", highlight=False)
    try:
        with user_errors():
            handle = start_server(model=model, cache=cache, emulate=specs, host=host, port=port,
                                  clock="virtual" if virtual_clock else "real", device=device, dtype=dtype,
                                  num_blocks=kv_blocks, trace=trace, trace_replace=force and not append,
                                  default_max_tokens=default_max_tokens, max_output_tokens=max_output_tokens,
                                  model_window=model_window, max_prompt_tokens=max_prompt_tokens,
                                  responses_from=responses_from)
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    state = handle.state
    out.print(f"kvprobe serve: {model} at {handle.base_url}  (cache: {state.cache_mode}, clock: {state.config.clock}, "
              f"context: {state.context_tokens} tokens)", highlight=False)
    out.print(f"  Anthropic: anthropic.Anthropic(base_url=\"{handle.base_url}\", api_key=\"x\")", highlight=False)
    out.print(f"  OpenAI:    openai.OpenAI(base_url=\"{handle.base_url}/v1\", api_key=\"x\")", highlight=False)
    out.print(f"  Gemini:    GOOGLE_GEMINI_BASE_URL={handle.base_url}", highlight=False)
    if state.cassette is not None:
        out.print(f"  answers from {responses_from} ({state.cassette.stats.records} recorded responses)",
                  highlight=False)
    out.print("  Ctrl-C to stop", style="dim")
    try:
        handle.wait()
    except KeyboardInterrupt:
        pass
    finally:
        handle.stop()
    _summary(state)


def _summary(state) -> None:
    """What was recorded, lost and replayed (exit 1 when a record was lost: the trace misses requests)."""
    if state.cassette is not None:
        c = state.cassette.stats
        err.print(f"kvprobe serve: cassette answered {c.exact} exactly, {c.diverged} diverged, "
                  f"{c.unmatched} unmatched (the engine answered those)", highlight=False)
    if state.recorder is not None:
        r = state.recorder
        lost = f", {r.lost} lost ({r.last_error})" if r.lost else ""
        err.print(f"kvprobe serve: {r.recorded} requests recorded to {r.path}{lost}", highlight=False)
        if r.lost:
            raise typer.Exit(1)
