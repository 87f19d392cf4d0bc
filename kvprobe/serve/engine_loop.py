"""Drive one `localengine.Engine` from a single thread and hand its updates to asyncio clients.

The engine is not thread-safe: every call into it (add, abort, step, cache ops) happens on the loop thread.
Clients submit work through an inbox; each request's updates go to a sink the client registered (for the
HTTP server: `call_soon_threadsafe` into an asyncio queue). A forward pass that raises fails only the
requests in flight at that moment; the loop keeps serving.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

_IDLE_SLEEP = 0.0005  # a step that scheduled nothing (a prompt waiting on a shared prefix): yield the CPU


@dataclass(slots=True)
class Prefilled:
    """The prompt was computed; the first tokens (if any) follow in the same update."""

    cached_tokens: int  # prompt tokens the prefix cache reused (ground truth; the ledger's when windowed)
    at: float  # perf_counter when the prefill finished
    window: Any = None  # localengine.accounting.Window: which prompt tokens the model attended to
    model_cached_tokens: int = 0  # of those, tokens whose K/V came from the KV store


@dataclass(slots=True)
class Tokens:
    token_ids: list[int]


@dataclass(slots=True)
class Finished:
    result: Any  # localengine.GenerationResult


@dataclass(slots=True)
class Failed:
    error: BaseException


Event = Prefilled | Tokens | Finished | Failed
Sink = Callable[[Event], None]


class EngineLoop:
    """The engine's single owner thread.

    Give it `load` (a function returning the engine) rather than an engine loaded elsewhere wherever speed
    matters: the engine is then built on this thread, and no other thread ever runs torch's parallel regions.
    OpenMP (libgomp) keeps a pool of worker threads for each thread that ran one, and once more threads are
    pooled than there are cores its workers stop spinning between regions and sleep: each of the few hundred
    small ops of a decoded token then pays a wake-up. On 2 cores decode ran 40-50% slower on a loop thread
    than on the thread that had loaded the engine, and as fast once the loop thread loaded it.
    """

    def __init__(self, engine: Any = None, *, load: Callable[[], Any] | None = None) -> None:
        if (engine is None) == (load is None):
            raise ValueError("give an engine or a function that loads one")
        self.engine = engine
        self._cond = threading.Condition()
        self._inbox: list[Callable[[], None]] = []
        self._sinks: dict[int, Sink] = {}
        self._started: set[int] = set()
        self._stopping = False
        self.step_failures = 0
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(load,), name="kvprobe-engine", daemon=True)
        self._thread.start()
        if load is not None:
            self._loaded.wait()
            if self._load_error is not None:
                self._thread.join()
                raise self._load_error

    # -- client side (any thread) ---------------------------------------------------------------------
    def call(self, fn: Callable[[Any], Any]) -> concurrent.futures.Future:
        """Run `fn(engine)` on the loop thread between steps; its result or exception lands in the future."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def op() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn(self.engine))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                fut.set_exception(exc)
        self._post(op)
        return fut

    def submit(self, prompt_ids: list[int], sink: Sink, **params: Any) -> concurrent.futures.Future:
        """Queue a request; the future resolves to its request id (or raises the engine's ValueError)."""
        def add(engine: Any) -> int:
            request_id = engine.add_request(prompt_ids, **params)
            self._sinks[request_id] = sink
            return request_id
        return self.call(add)

    def abort(self, request_id: int) -> None:
        def drop(engine: Any) -> None:
            self._sinks.pop(request_id, None)
            self._started.discard(request_id)
            engine.abort_request(request_id)
        try:
            self.call(drop)
        except RuntimeError:  # stopped: nothing left to abort
            pass

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _post(self, op: Callable[[], None]) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError("the engine loop has stopped")
            self._inbox.append(op)
            self._cond.notify_all()

    # -- the loop thread --------------------------------------------------------------------------------
    def _run(self, load: Callable[[], Any] | None) -> None:
        if load is not None:
            try:
                self.engine = load()
            except BaseException as exc:  # noqa: BLE001 - raised again in the thread that started the loop
                self._load_error = exc
                return
            finally:
                self._loaded.set()
        while True:
            with self._cond:
                while not self._inbox and not self._stopping and not self.engine.has_unfinished_requests():
                    self._cond.wait()
                if self._stopping:
                    break
                ops, self._inbox = self._inbox, []
            for op in ops:
                op()
            if self.engine.has_unfinished_requests():
                self._step()
        self._fail_all(RuntimeError("the server is shutting down"))

    def _step(self) -> None:
        try:
            updates = self.engine.step()
        except Exception as exc:  # noqa: BLE001 - one bad batch must not stop the server
            self.step_failures += 1
            self._fail_all(exc)
            return
        if not updates:
            time.sleep(_IDLE_SLEEP)
            return
        now = time.perf_counter()
        for update in updates:
            sink = self._sinks.get(update.request_id)
            if sink is None:
                continue
            if update.request_id not in self._started:
                self._started.add(update.request_id)
                sink(Prefilled(update.num_cached_tokens, now, getattr(update, "window", None),
                               getattr(update, "model_cached_tokens", update.num_cached_tokens)))
            if update.new_token_ids:
                sink(Tokens(list(update.new_token_ids)))
            if update.finished:
                self._sinks.pop(update.request_id, None)
                self._started.discard(update.request_id)
                sink(Finished(update.result))

    def _fail_all(self, exc: BaseException) -> None:
        sinks, self._sinks = self._sinks, {}
        self._started.clear()
        for request_id, sink in sinks.items():
            try:
                self.engine.abort_request(request_id)
            except Exception:  # noqa: BLE001 - the engine is already in trouble; the client hears below
                pass
            sink(Failed(exc))


async def stream(loop: EngineLoop, prompt_ids: list[int], **params: Any) -> AsyncIterator[Event]:
    """Submit a request and yield its events on the caller's event loop; closing the iterator aborts it."""
    aloop = asyncio.get_running_loop()
    queue: asyncio.Queue[Event] = asyncio.Queue()

    def sink(event: Event) -> None:
        try:
            aloop.call_soon_threadsafe(queue.put_nowait, event)
        except RuntimeError:  # the client's loop is gone
            pass
    submitted = loop.submit(prompt_ids, sink, **params)
    try:
        request_id = await asyncio.wrap_future(submitted)
    except asyncio.CancelledError:  # the client left while the request was being queued
        submitted.add_done_callback(lambda f: None if f.cancelled() or f.exception() else loop.abort(f.result()))
        raise
    done = False
    try:
        while True:
            event = await queue.get()
            if isinstance(event, (Finished, Failed)):
                done = True
            yield event
            if done:
                return
    finally:
        if not done:
            loop.abort(request_id)
