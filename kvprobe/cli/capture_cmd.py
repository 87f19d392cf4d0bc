"""`kvprobe capture [OPTIONS] -- COMMAND...` and `kvprobe capture serve`: record an agent's provider calls."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer

from kvprobe.agents import client_of
from kvprobe.capture.proxy import CaptureProxy, ClientLimits
from kvprobe.capture.runner import make_proxy, run_command, serve
from kvprobe.cli.common import Force, err, fail, print_json, user_errors
from kvprobe.output import check_append_output

# Options end at the command: `kvprobe capture python agent.py --verbose` passes --verbose to the agent.
CONTEXT = {"allow_interspersed_args": False}


def _summary(proxy: CaptureProxy, out: str, exit_code: int | None) -> dict:
    stats = proxy.recorder.stats if proxy.recorder else None
    data = {"out": out, "url": proxy.url, "recorded": stats.recorded if stats else 0,
            "with_error": stats.errors if stats else 0, "not_recorded": stats.not_recorded if stats else 0,
            # requests outside every mount: answered 502 and sent nowhere (the path names the client to fix)
            "unrouted": sum(proxy.unrouted.values()), "unrouted_paths": sorted(proxy.unrouted)[:10],
            # forwarded but not written (a full disk): the trace holds only whole lines, these ids are missing
            "lost": len(stats.lost) if stats else 0, "lost_ids": stats.lost[:20] if stats else [],
            "lost_reason": stats.lost_reason if stats else None}
    if exit_code is not None:
        data["exit_code"] = exit_code
    return data


def capture(
    ctx: typer.Context,
    command: Annotated[list[str] | None, typer.Argument(
        help="The command to run under the proxy (after --), or 'serve' to run the proxy alone")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="Trace file to write (JSON Lines, one line per "
                                        "request as it ends)")] = "trace.jsonl",
    session: Annotated[str | None, typer.Option("--session", help="Session name for every record "
                                                "(X-Kvprobe-Session header or KVPROBE_SESSION otherwise)")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Agent name for every record")] = None,
    upstream: Annotated[str | None, typer.Option(
        "--upstream", help="One server for every mount that has no --NAME-upstream, speaking each API at its "
        "own paths (kvprobe serve: OpenAI and DeepSeek under /v1)")] = None,
    anthropic_upstream: Annotated[str | None, typer.Option(
        "--anthropic-upstream",
        help="Anthropic API URL (default: $ANTHROPIC_BASE_URL, else https://api.anthropic.com)")] = None,
    openai_upstream: Annotated[str | None, typer.Option(
        "--openai-upstream", help="OpenAI API URL (default: $OPENAI_BASE_URL, else https://api.openai.com/v1)")] = None,
    deepseek_upstream: Annotated[str | None, typer.Option(
        "--deepseek-upstream",
        help="DeepSeek API URL (default: $DEEPSEEK_BASE_URL, else https://api.deepseek.com)")] = None,
    gemini_upstream: Annotated[str | None, typer.Option(
        "--gemini-upstream", help="Gemini API URL (default: $GOOGLE_GEMINI_BASE_URL, else "
        "https://generativelanguage.googleapis.com)")] = None,
    vertex_upstream: Annotated[str | None, typer.Option(
        "--vertex-upstream", help="Vertex AI URL (default: $GOOGLE_VERTEX_BASE_URL, else the host of each "
        "request's location, e.g. https://us-east5-aiplatform.googleapis.com)")] = None,
    bedrock_upstream: Annotated[str | None, typer.Option(
        "--bedrock-upstream", help="Bedrock runtime URL (default: $ANTHROPIC_BEDROCK_BASE_URL, else "
        "https://bedrock-runtime.$AWS_REGION.amazonaws.com)")] = None,
    redact: Annotated[bool, typer.Option("--redact", help="Scrub API keys, tokens and cloud credentials "
                                         "inside request and response bodies")] = False,
    hash_only: Annotated[bool, typer.Option("--hash-only", help="Store digests and token counts instead of "
                                            "prompt text (diff and report still work)")] = False,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (loopback unless told otherwise)")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: any free port)")] = 0,
    upstream_timeout: Annotated[float, typer.Option("--upstream-timeout", help="Seconds without upstream "
                                                    "progress before a request is cut")] = 600.0,
    client_timeout: Annotated[float, typer.Option(
        "--client-timeout", min=0.1, help="Seconds a client may go silent in the middle of a request (then 408)")
    ] = 60.0,
    max_request_mb: Annotated[float, typer.Option(
        "--max-request-mb", min=0.001, help="Largest request body accepted, in MB (then 413; the default is "
        "above every provider's own limit)")] = 64.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary (and, for serve, "
                                           "a JSON line with the proxy's URLs when it is ready)")] = False,
    append: Annotated[bool, typer.Option("--append", help="Add to an existing trace instead of refusing it")]
    = False,
    force: Force = False,
    out_alias: Annotated[str | None, typer.Option("--out", hidden=True)] = None,
) -> None:
    """Record every provider request an agent makes, through a local reverse proxy.

    COMMAND runs with the base-URL variables of every mount pointed at the proxy: ANTHROPIC_BASE_URL,
    OPENAI_BASE_URL (and OPENAI_API_BASE), DEEPSEEK_BASE_URL, GOOGLE_GEMINI_BASE_URL, GOOGLE_VERTEX_BASE_URL,
    ANTHROPIC_VERTEX_BASE_URL, and for bearer-token Bedrock ANTHROPIC_BEDROCK_BASE_URL (docs/capture.md; Codex:
    a config.toml model provider). A request outside every mount is answered 502 and sent nowhere.
    One trace record per request is written to --output as it ends (an existing file is refused unless
    --append or --force); kvprobe exits with COMMAND's exit code, or 2 when
    records could not be written (a full disk: they are named, the trace keeps only whole lines).
    API keys and auth headers are never written.

    Example: kvprobe capture -o trace.jsonl --session fix-login -- claude -p "fix the login bug"

    Example: kvprobe capture serve --port 8787 -o trace.jsonl --append
    """
    args = list(command or [])
    if args[:1] == ["serve"] and len(args) > 1:  # `capture serve --port 8787`: options after the word serve
        sub = ctx.command.make_context(ctx.info_name or "capture", [*args[1:], "--", "serve"], parent=ctx.parent)
        with sub:
            return sub.command.invoke(sub)
    if not args:
        fail("no command given: kvprobe capture [OPTIONS] -- COMMAND [ARGS...] (or: kvprobe capture serve)")
    if port < 0 or port > 65535:
        fail("field '--port': expected a port number between 0 and 65535")
    if host not in ("127.0.0.1", "::1", "localhost"):
        err.print(f"warning: listening on {host}: anyone who can reach it can use your API keys through it",
                  markup=False)
    upstreams = {"anthropic": anthropic_upstream, "openai": openai_upstream, "deepseek": deepseek_upstream,
                 "gemini": gemini_upstream, "vertex": vertex_upstream, "bedrock": bedrock_upstream}
    with user_errors():
        out = str(out_alias or output)
        check_append_output(out, force=force, append=append)
        try:
            proxy = make_proxy(out, session=session, agent=agent, redact=redact, hash_only=hash_only,
                               upstreams=upstreams, host=host, port=port, timeout=upstream_timeout,
                               replace=force and not append,
                               limits=ClientLimits(read=client_timeout, max_body=int(max_request_mb * 1e6)),
                               everything=upstream, client=client_of(args) if args != ["serve"] else None)
        except ValueError as exc:
            fail(f"field '--*-upstream': {exc}")
        if args == ["serve"]:
            serve(proxy, lambda p: _ready(p, out, json_out))
            code = None
        else:
            code = run_command(args, proxy, session=session, agent=agent).exit_code
    summary = _summary(proxy, out, code)
    if json_out:
        print_json(summary)
    else:
        err.print(f"kvprobe capture: {summary['recorded']} requests recorded to {out}"
                  + (f" ({summary['with_error']} with errors)" if summary["with_error"] else ""), markup=False)
        if summary["lost"]:
            named = ", ".join(summary["lost_ids"]) + (", …" if summary["lost"] > len(summary["lost_ids"]) else "")
            err.print(f"kvprobe capture: {summary['lost']} requests were forwarded but could not be written "
                      f"({summary['lost_reason']}): {named}; the trace holds every other one, whole", markup=False)
        if summary["unrouted"]:
            err.print(f"kvprobe capture: {summary['unrouted']} requests were outside every mount and sent nowhere "
                      f"({', '.join(summary['unrouted_paths'])}): point that client at a mount (docs/capture.md)",
                      markup=False)
    if summary["lost"]:  # an incomplete trace is an I/O failure (exit 2), whatever the command did
        raise typer.Exit(2)
    if code:
        raise typer.Exit(code)


def _ready(proxy: CaptureProxy, out: str, json_out: bool) -> None:
    env = proxy.base_urls()
    if json_out:  # one compact line, so a script can read it as soon as the proxy listens
        sys.stdout.write(orjson.dumps({"url": proxy.url, "out": out, "env": env}).decode() + "\n")
        sys.stdout.flush()
        return
    err.print(f"kvprobe capture: proxy on {proxy.url}, recording to {out}. Point your agent at it:")
    for key, value in env.items():
        err.print(f"  export {key}={value}", soft_wrap=True)
    err.print("Ctrl-C stops it (requests in flight are recorded first).")
