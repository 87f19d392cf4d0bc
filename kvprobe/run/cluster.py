"""The cluster backend: Dask `distributed` (`report --cluster tcp://HOST:8786`, the `cluster` extra).

`shared` is scattered to every worker once; each unit is one task (`Client.map`), its result gathered by unit
index. The workers, and the scheduler (it unpickles the task graph), import kvprobe: they need the same
version installed.

Failure costs time, not answers: the scheduler reruns on another worker a task whose worker died (up to its
`allowed-failures`; past that, or with no worker left, the caller computes the unit). A stopped or hung worker
still holds its connection, and the scheduler would wait minutes (`worker-ttl`) before giving its tasks away:
a worker holding one of these units whose heartbeat has not moved for the stall window is taken as stalled,
and the caller computes its units. A scheduler that cannot be reached mid-run leaves what is left to the
caller too.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from kvprobe.run.base import Unit, named, run_here
from kvprobe.run.stall import stall_seconds

POLL_S = 0.2  # how often a wait asks the scheduler how the tasks stand
CONNECT_TIMEOUT_S = 10


class ClusterUnavailable(Exception):
    """No client: the extra is not installed, or the scheduler cannot be reached."""


class DaskCluster:
    name = "dask cluster"
    remote = True  # (its units' shared value travels: `current(cluster=False)` stages stay on this machine)

    def __init__(self, address: str) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise ClusterUnavailable("a cluster needs Dask's `distributed`: install kvprobe with the `cluster` "
                                     "extra (pip install 'kvprobe[cluster]')") from None
        try:
            self.client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ClusterUnavailable(f"cannot reach the Dask scheduler at {address}: {exc}") from None
        self.address = address
        self.stalled: set[str] = set()  # workers found stalled: later maps leave them out

    def start(self, fn: Unit, units: Sequence[Any], shared: Any = None) -> _ClusterRun:
        return _ClusterRun(self, fn, units, shared)

    def close(self) -> None:
        self.client.close()


def kvprobe_unit(fn: Unit, shared: Any, unit: Any) -> Any:
    """One unit on a worker (the task's name on the scheduler's dashboard: kvprobe_unit-…)."""
    return fn(shared, unit)


class _ClusterRun:
    def __init__(self, cluster: DaskCluster, fn: Unit, units: Sequence[Any], shared: Any) -> None:
        self._cluster, self._client = cluster, cluster.client
        self._fn, self._units, self._shared = fn, units, shared
        self._out: list[Any] = [None] * len(units)
        self._futures: dict[Any, int] = {}
        self._here: list[int] = []  # units the caller computes: no worker could be given them
        if units:
            self._submit()

    def _submit(self) -> None:
        """`shared` copied to every worker not known to be stalled (a copy each: no task waits for another
        worker's), then a task per unit, on those workers only. A copy that does not arrive within the stall
        window (a worker stopped since the last map) leaves the whole map to the caller."""
        client, units = self._client, list(self._units)
        try:
            workers = [w for w in client.scheduler_info(n_workers=-1).get("workers", {})
                       if w not in self._cluster.stalled]
            if not workers:
                self._here = list(range(len(units)))
                return
            there = client.scatter(self._shared, workers=workers, broadcast=True, hash=False,
                                   timeout=stall_seconds())
            futures = client.map(kvprobe_unit, [self._fn] * len(units), [there] * len(units), units, pure=False,
                                 workers=workers, allow_other_workers=False)
        except (OSError, TimeoutError):
            self._here = list(range(len(units)))
            return
        self._futures = {f: i for i, f in enumerate(futures)}

    def results(self) -> list[Any]:
        try:
            run_here(self._fn, self._units, sorted(self._here + self._gather()), self._shared, self._out)
        finally:
            self.close()
        return self._out

    def _gather(self) -> list[int]:
        """Results into place; the indices of the units the caller must compute."""
        from distributed.client import FutureCancelledError
        from distributed.scheduler import KilledWorker

        lost: list[int] = []
        heartbeats = _Heartbeats(self._client, stall_seconds(), self._cluster.stalled)
        arrived = threading.Event()
        for future in self._futures:
            future.add_done_callback(lambda _: arrived.set())
        while self._futures:
            arrived.wait(POLL_S)
            arrived.clear()
            finished = [f for f in self._futures if f.done()]
            for future in finished:
                i = self._futures.pop(future)
                try:
                    self._out[i] = future.result()
                except (KilledWorker, FutureCancelledError):  # it killed every worker it was given, or the
                    lost.append(i)  # scheduler's connection was lost: computed here
                except Exception as exc:
                    raise named(exc, i, self._units)
            try:
                stalled = heartbeats.stalled({f.key for f in self._futures}, bool(finished))
            except (OSError, TimeoutError):  # the scheduler is gone: what is left is computed here
                stalled = {f.key for f in self._futures}
            for future in [f for f in self._futures if f.key in stalled]:
                lost.append(self._futures.pop(future))
                future.cancel()
        return lost

    def close(self) -> None:
        for future in self._futures:
            future.cancel()
        self._futures = {}


class _Heartbeats:
    """Which of our tasks the caller should take over: those on a worker whose heartbeat has not moved for the
    window, and all of them once no worker with a live heartbeat has held one for the window (the workers they
    may run on are gone)."""

    def __init__(self, client: Any, window: float, found: set[str]) -> None:
        self._client, self._window, self._found = client, window, found
        self._seen: dict[str, tuple[float, float]] = {}  # worker -> (its last heartbeat, when we saw it move)
        self._busy_since = time.monotonic()  # when a live worker last held one of our tasks

    def stalled(self, keys: set, progressed: bool) -> set:
        now = time.monotonic()
        if not keys:
            return set()
        if progressed:
            self._busy_since = now
        workers = self._client.scheduler_info(n_workers=-1).get("workers", {})
        processing = self._client.processing()
        out: set = set()
        for address, info in workers.items():
            beat = info.get("last_seen", 0.0)
            last, moved = self._seen.get(address, (None, now))
            if beat != last:
                moved = now
            self._seen[address] = (beat, moved)
            held = keys & set(processing.get(address, ()))
            if now - moved > self._window:
                self._found.add(address)
                out |= held
            elif held:
                self._busy_since = now
        return set(keys) if now - self._busy_since > self._window else out
