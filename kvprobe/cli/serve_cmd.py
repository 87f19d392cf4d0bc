"""`kvprobe serve`: the local engine behind the Anthropic Messages and OpenAI Chat Completions APIs."""
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
    emulate: Annotated[str | None, typer.Option("--emulate", metavar="PROVIDER/MODEL",
                                                help="Report usage by this provider's caching rules, e.g. "
                                                "anthropic/claude-sonnet-4-5, openai/gpt-4o, deepseek/deepseek-chat "
                                                "(implies --cache emulate)")] = None,
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
    append: Annotated[bool, typer.Option("--append", help="Add to an existing --output trace")] = False,
    force: Force = False,
    trace_alias: Annotated[Path | None, typer.Option("--trace", hidden=True)] = None,
) -> None:
    """Serve the bundled local engine over the Anthropic and OpenAI APIs, with prompt-cache usage.

    The official SDKs work unchanged: anthropic.Anthropic(base_url="http://127.0.0.1:8089") and
    openai.OpenAI(base_url="http://127.0.0.1:8089/v1"). Streaming, count_tokens and cache_control work; every
    response also carries a `kvprobe` object with the engine's ground truth (cached tokens, timings).

    Example: kvprobe serve --emulate anthropic/claude-sonnet-4-5 --virtual-clock
    """
    from kvprobe.cli.engine_extra import require_engine

    require_engine("serve")
    from kvprobe.serve import start_server
    from kvprobe.serve.emulation import EmulateSpec

    if emulate is not None:
        cache = "emulate"
    if cache not in ("engine", "emulate"):
        fail(f"--cache: expected engine or emulate, got {cache}")
    try:
        EmulateSpec.parse(emulate or DEFAULT_EMULATE)
    except ValueError as exc:
        fail(str(exc))
    trace = trace_alias or trace
    if trace is not None:
        with user_errors():
            check_append_output(trace, force=force, append=append)
    err.print(f"loading {model} ...", highlight=False)
    try:
        handle = start_server(model=model, cache=cache, emulate=emulate or DEFAULT_EMULATE, host=host, port=port,
                              clock="virtual" if virtual_clock else "real", device=device, dtype=dtype,
                              num_blocks=kv_blocks, trace=trace, trace_replace=force and not append)
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    state = handle.state
    out.print(f"kvprobe serve: {model} at {handle.base_url}  (cache: {state.cache_mode}, clock: {state.config.clock}, "
              f"context: {state.context_tokens} tokens)", highlight=False)
    out.print(f"  Anthropic: anthropic.Anthropic(base_url=\"{handle.base_url}\", api_key=\"x\")", highlight=False)
    out.print(f"  OpenAI:    openai.OpenAI(base_url=\"{handle.base_url}/v1\", api_key=\"x\")", highlight=False)
    out.print("  Ctrl-C to stop", style="dim")
    try:
        handle.wait()
    except KeyboardInterrupt:
        pass
    finally:
        handle.stop()
