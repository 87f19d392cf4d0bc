"""The local backend: a standard process pool (`concurrent.futures.ProcessPoolExecutor`) sized to the CPUs this
process may use.

Where the system forks, the workers are forked when the map starts, so `shared` (a parsed log, a pricer) is
inherited, not pickled: only the units and the small results cross a pipe. Elsewhere each worker receives
`shared` pickled once, when it starts.

A worker that dies breaks the pool (`BrokenProcessPool` on every unit not done); one that stalls is found by
`StallWatch`. Either way the units not done are run again in a fresh pool, and if that one breaks too, in
the caller: the answers are the same, only later.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from kvprobe.cpus import usable_cpus
from kvprobe.run.base import Unit, named, run_here
from kvprobe.run.stall import StallWatch

POLL_S = 0.2  # how often a wait looks at the workers' state
ROUNDS = 2  # pools tried before the caller computes what is left

_shared: Any = None  # in a worker: the map's `shared` value


def _install(shared: Any, pids: Any) -> None:
    """A worker's start: keep `shared`, say which process this is, end with the caller."""
    global _shared
    _shared = shared
    with pids.get_lock():
        for k in range(len(pids)):
            if pids[k] == 0:
                pids[k] = os.getpid()
                break
    from kvprobe.forked import end_with_parent

    end_with_parent()


def _call(fn: Unit, unit: Any) -> Any:
    return fn(_shared, unit)


class LocalPool:
    name = "local pool"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or usable_cpus()

    def start(self, fn: Unit, units: Sequence[Any], shared: Any = None) -> _PoolRun:
        return _PoolRun(self.workers, fn, units, shared)


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


class _PoolRun:
    def __init__(self, workers: int, fn: Unit, units: Sequence[Any], shared: Any) -> None:
        self._fn, self._units, self._shared = fn, units, shared
        self._workers = max(1, min(workers, len(units)))
        self._out: list[Any] = [None] * len(units)
        self._pool: ProcessPoolExecutor | None = None
        self._pids: Any = ()
        self._futures: dict[Future, int] = {}
        self._rounds = 0
        self._todo = list(range(len(units)))
        self._launch()

    def _launch(self) -> None:
        """A pool started on the units still to do (none when no process can be started)."""
        self._rounds += 1
        if not self._todo:
            return
        ctx = _context()
        try:
            self._pids = ctx.Array("q", self._workers)
            self._pool = ProcessPoolExecutor(self._workers, mp_context=ctx, initializer=_install,
                                             initargs=(self._shared, self._pids))
            self._futures = {self._pool.submit(_call, self._fn, self._units[i]): i for i in self._todo}
        except (OSError, BrokenProcessPool):  # no process to spare: the caller computes them
            self._end_pool(kill=True)

    def results(self) -> list[Any]:
        try:
            while True:
                self._todo = sorted(self._gather()) if self._pool is not None else self._todo
                self._end_pool(kill=bool(self._todo))
                if not self._todo or self._rounds >= ROUNDS:
                    break
                self._launch()
            run_here(self._fn, self._units, self._todo, self._shared, self._out)
        finally:
            self.close()
        return self._out

    def _gather(self) -> list[int]:
        """Results into place until none is pending; the indices of units whose worker died or stalled."""
        watch, lost = StallWatch(), []
        while self._futures:
            done, _ = wait(self._futures, timeout=POLL_S, return_when=FIRST_COMPLETED)
            for future in done:
                i = self._futures.pop(future)
                try:
                    self._out[i] = future.result()
                except BrokenProcessPool:
                    lost.append(i)
                except Exception as exc:
                    raise named(exc, i, self._units)
            if done:
                watch.progressed()
            elif watch.stalled([p for p in self._pids if p]):
                lost.extend(self._futures.values())
                self._futures = {}
        return lost

    def _end_pool(self, kill: bool) -> None:
        """The pool shut; its workers killed first when some may hang (a stopped one never reads a request
        to stop)."""
        if self._pool is None:
            return
        for pid in (p for p in self._pids if p and kill):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None

    def close(self) -> None:
        self._futures = {}
        self._end_pool(kill=True)
