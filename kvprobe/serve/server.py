"""Start the server on a background thread (library use) or in the foreground (`kvprobe serve`)."""
from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import uvicorn

from kvprobe.serve.app import build_app
from kvprobe.serve.service import ServeConfig, ServeState

_START_TIMEOUT = 60.0


def load_engine(config: ServeConfig) -> Any:
    from localengine import Engine  # torch loads here, not at CLI start
    from localengine.config import AccountingConfig

    return Engine(model=config.model, device=config.device, dtype=config.dtype, block_size=config.block_size,
                  num_blocks=config.num_blocks, seed=config.seed,
                  accounting=AccountingConfig(window_tokens=config.model_window))


class ServerHandle:
    """A running server: `base_url`, `port`, `stop()`; a context manager."""

    def __init__(self, state: ServeState, server: uvicorn.Server, thread: threading.Thread, host: str,
                 port: int) -> None:
        self.state, self._server, self._thread = state, server, thread
        self.host, self.port = host, port
        self._stopped = False

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def engine(self) -> Any:
        return self.state.engine

    def clear_cache(self) -> None:
        """Forget every cached prefix on the engine (and every emulated cache entry)."""
        self.state.loop.call(lambda engine: engine.clear_cache()).result()
        if self.state.emulator is not None:
            self.state.emulator.reset()

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C in the calling thread stops it)."""
        try:
            while self._thread.is_alive():
                self._thread.join(0.5)
        finally:
            self.stop()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._server.should_exit = True
        self._thread.join(10)
        self.state.close()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def start_server(*, model: str = "smollm2-135m-instruct", cache: str = "engine",
                 emulate: str | list[str] = "anthropic/claude-sonnet-4-5", host: str = "127.0.0.1", port: int = 0,
                 clock: str = "real", device: str = "auto", dtype: str = "float32",
                 num_blocks: int | None = None, block_size: int = 16, seed: int = 0,
                 default_max_tokens: int = 256, trace: str | Path | None = None, trace_replace: bool = False,
                 engine: Any = None, log_level: str = "warning", max_output_tokens: int = 256,
                 model_window: int | None = 2048, max_prompt_tokens: int = 1_000_000,
                 responses_from: str | Path | None = None) -> ServerHandle:
    """Load the engine (or use `engine`), start the HTTP server on a background thread, return its handle.

    cache="engine" reports what the engine really reused; cache="emulate" reports usage by the rules of
    `emulate` ("PROVIDER/MODEL", or "PROVIDER" to take the model each client sends; a list: one per API).
    clock="virtual" lets a request header `X-Kvprobe-Clock: <epoch seconds>` set the time the emulated cache
    sees. `trace` appends every answered request to a JSONL trace. port=0 picks a free port (see `.port` /
    `.base_url`). A reply is at most `max_output_tokens` (a larger max_tokens is served that, and said);
    the model attends to at most `model_window` prompt tokens (None: all it can take), a longer prompt is
    answered in accounting mode (docs/engine.md); `responses_from`: a trace whose recorded responses answer
    the requests that match them (kvprobe.serve.cassette).
    """
    config = ServeConfig(model, cache, emulate, clock, device, dtype, num_blocks, block_size, seed,
                         default_max_tokens, trace, trace_replace, max_output_tokens=max_output_tokens,
                         model_window=model_window, max_prompt_tokens=max_prompt_tokens,
                         responses_from=responses_from)
    config.validate()
    sock = _bind(host, port)
    try:
        state = ServeState(config, engine, load=None if engine is not None else lambda: load_engine(config))
    except BaseException:
        sock.close()
        raise
    uv_config = uvicorn.Config(build_app(state), log_level=log_level, lifespan="off", access_log=False,
                               timeout_graceful_shutdown=5)
    server = uvicorn.Server(uv_config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="kvprobe-serve", daemon=True)
    thread.start()
    started = threading.Event()

    def watch() -> None:
        while thread.is_alive() and not server.started:
            thread.join(0.01)
        started.set()
    threading.Thread(target=watch, daemon=True).start()
    if not started.wait(_START_TIMEOUT) or not server.started:
        server.should_exit = True
        state.close()
        raise RuntimeError("the kvprobe server did not start")
    bound_port = sock.getsockname()[1]
    return ServerHandle(state, server, thread, host, bound_port)
