"""The local backend: a standard process pool (`concurrent.futures.ProcessPoolExecutor`) of one worker fewer
than the CPUs this process may use, and the caller as the last: while it waits, it computes, from the end of
the list, units no worker has started (on two cores, one worker and the caller, as many processes as cores).

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
import threading
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
        self.workers = workers or max(1, usable_cpus() - 1)  # the caller computes too

    def start(self, fn: Unit, units: Sequence[Any], shared: Any = None) -> _PoolRun:
        return _PoolRun(self.workers, fn, units, shared)


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


class _PoolRun:
    """The units still to do form a list: the pool is fed from its front (a unit per worker and one more
    queued, so none waits between two units; fed again as each result arrives, by the pool's own thread,
    while the caller computes), the caller takes from its back."""

    def __init__(self, workers: int, fn: Unit, units: Sequence[Any], shared: Any) -> None:
        self._fn, self._units, self._shared = fn, units, shared
        self._workers = max(1, min(workers, len(units)))
        self._out: list[Any] = [None] * len(units)
        self._pool: ProcessPoolExecutor | None = None
        self._pids: Any = ()
        self._futures: dict[Future, int] = {}
        self._todo = list(range(len(units)))
        self._front, self._back = 0, len(self._todo)  # not handed out: self._todo[front:back]
        self._rounds = 0
        self._lock = threading.RLock()  # the pool's thread feeds it while the caller takes units
        self._feeding = False
        self._launch()

    def _launch(self) -> None:
        """A pool started on the units still to do (none when no process can be started)."""
        self._rounds += 1
        self._front, self._back = 0, len(self._todo)
        if not self._todo:
            return
        ctx = _context()
        try:
            self._pids = ctx.Array("q", self._workers)
            self._pool = ProcessPoolExecutor(self._workers, mp_context=ctx, initializer=_install,
                                             initargs=(self._shared, self._pids))
            self._feeding = True
            self._feed()
        except (OSError, BrokenProcessPool):  # no process to spare: the caller computes them
            self._end_pool(kill=True)

    def _feed(self, _done: Future | None = None) -> None:
        with self._lock:
            pool, running = self._pool, sum(not f.done() for f in self._futures)
            while self._feeding and pool is not None and running <= self._workers and self._front < self._back:
                i = self._todo[self._front]
                self._front += 1
                try:
                    future = pool.submit(_call, self._fn, self._units[i])
                except (RuntimeError, BrokenProcessPool):  # shut or broken meanwhile: done again
                    self._front -= 1
                    return
                self._futures[future] = i
                running += 1
                future.add_done_callback(self._feed)

    def _take(self) -> int | None:
        """The last unit not handed to the pool, for the caller."""
        with self._lock:
            if self._front >= self._back:
                return None
            self._back -= 1
            return self._todo[self._back]

    def results(self) -> list[Any]:
        try:
            while True:
                if self._pool is not None:
                    self._todo = sorted(self._gather())
                self._end_pool(kill=bool(self._todo))
                if not self._todo or self._rounds >= ROUNDS:
                    break
                self._launch()
            run_here(self._fn, self._units, self._todo, self._shared, self._out)
        finally:
            self.close()
        return self._out

    def _gather(self) -> list[int]:
        """Results into place until every unit is done; the indices of units whose worker died or stalled."""
        watch, lost = StallWatch(), []
        while self._futures or self._front < self._back:
            with self._lock:
                futures = list(self._futures)
            done, _ = wait(futures, timeout=0 if self._front < self._back else POLL_S, return_when=FIRST_COMPLETED)
            for future in done:
                with self._lock:
                    i = self._futures.pop(future)
                try:
                    self._out[i] = future.result()
                except BrokenProcessPool:
                    lost.append(i)
                except Exception as exc:
                    raise named(exc, i, self._units)
            if lost:  # the pool is broken: what it was given and what it was not are run again
                return lost + self._stop()
            if done:
                watch.progressed()
            elif (i := self._take()) is not None:
                run_here(self._fn, self._units, [i], self._shared, self._out)
                watch.progressed()
            elif watch.stalled([p for p in self._pids if p]):
                return self._stop()
        return lost

    def _stop(self) -> list[int]:
        """The pool fed no more; the units it was given and has not answered, and those never given."""
        with self._lock:
            self._feeding = False
            return list(self._futures.values()) + self._todo[self._front:self._back]

    def _end_pool(self, kill: bool) -> None:
        """The pool shut; its workers killed first when some may hang (a stopped one never reads a request
        to stop)."""
        with self._lock:
            self._futures, pool, self._pool, self._feeding = {}, self._pool, None, False
        if pool is None:
            return
        for pid in (p for p in self._pids if p and kill):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        self._end_pool(kill=True)
