"""Run the capture proxy: alone (`serve`) or around one command whose exit code passes through."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvprobe.capture.mounts import MOUNTS, default_upstream, env_upstream
from kvprobe.capture.proxy import CaptureProxy, ClientLimits
from kvprobe.capture.recorder import AGENT_ENV, SESSION_ENV, Recorder
from kvprobe.errors import InputError


def default_upstreams(overrides: dict[str, str | None], env: dict[str, str] | None = None,
                      everything: str | None = None) -> dict[str, str]:
    """Explicit flags, else `everything` (one server speaking every API at its own paths, as kvprobe serve
    does), else a base URL already in the environment (a gateway the user relies on), else the provider's
    public endpoint."""
    env = dict(os.environ) if env is None else env
    chosen = {}
    for mount in MOUNTS:
        name = mount.name
        one = everything.rstrip("/") + mount.under_root if everything else None
        gateway = env_upstream(mount, env)
        url = overrides.get(name) or one or gateway or default_upstream(mount, env)
        if not url.startswith(("http://", "https://")):
            source = f"--{name}-upstream" if overrides.get(name) else "--upstream" if one else \
                next(v.name for v in mount.variables if env.get(v.name))
            raise InputError(f"expected an http(s) URL, got {url!r}", field=source)
        chosen[name] = url
    return chosen


class ProxyThread:
    """The proxy on its own event loop in a background thread (the main thread runs the command)."""

    def __init__(self, proxy: CaptureProxy) -> None:
        self.proxy = proxy
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kvprobe-proxy", daemon=True)
        self._started = False

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self._loop).result()
        self._started = True

    def stop(self, grace: float = 5.0) -> None:
        if self._loop.is_closed():
            return
        if self._started:
            self._started = False
            asyncio.run_coroutine_threadsafe(self.proxy.stop(grace), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> "ProxyThread":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(slots=True)
class RunResult:
    exit_code: int
    url: str


def run_command(command: Sequence[str], proxy: CaptureProxy, *, session: str | None = None,
                agent: str | None = None, grace: float = 5.0) -> RunResult:
    """Start the proxy, run `command` with the providers' base URLs pointed at it, stop with it.

    Ctrl-C reaches the command from the terminal (it shares the process group); kvprobe ignores it while
    the command runs and forwards SIGTERM/SIGHUP, then flushes every request still in flight.
    """
    if not command:
        raise InputError("no command given: kvprobe capture [OPTIONS] -- COMMAND [ARGS...]", field="COMMAND")
    env = dict(os.environ)
    with ProxyThread(proxy) as thread:
        env.update(proxy.base_urls(env))
        if session:
            env[SESSION_ENV] = session
        if agent:
            env[AGENT_ENV] = agent
        try:
            child = subprocess.Popen(list(command), env=env)
        except OSError as exc:
            raise InputError(f"cannot run {command[0]!r}: {exc.strerror or exc}", field="COMMAND") from None
        restore = _forward_signals(child)
        try:
            code = child.wait()
        finally:
            restore()
        thread.stop(grace)
    return RunResult(128 - code if code < 0 else code, proxy.url)


def _forward_signals(child: subprocess.Popen) -> Callable[[], None]:
    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, lambda *_: None)}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, forward)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return restore


def serve(proxy: CaptureProxy, on_ready: Callable[[CaptureProxy], None], grace: float = 5.0) -> None:
    """Run the proxy until SIGINT/SIGTERM, then flush every request in flight."""
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await proxy.start()
        on_ready(proxy)
        await stop.wait()
        await proxy.stop(grace)

    asyncio.run(main())


def make_proxy(out: str, *, session: str | None, agent: str | None, redact: bool, hash_only: bool,
               upstreams: dict[str, str | None], host: str, port: int, timeout: float,
               replace: bool = False, limits: ClientLimits | None = None,
               everything: str | None = None, client: str | None = None) -> CaptureProxy:
    chosen = default_upstreams(upstreams, everything=everything)  # checked before the trace file is opened
    recorder = Recorder(out, session=session, agent=agent, redact=redact, hash_only=hash_only, replace=replace,
                        client=client)
    return CaptureProxy(recorder, chosen, host=host, port=port, upstream_timeout=timeout, limits=limits)
