"""The cluster backend: Dask `distributed` (`report --cluster tcp://HOST:8786`, the `cluster` extra).

`shared` is scattered to every worker once; each unit is one task (`Client.map`), its result gathered by unit
index. The workers import kvprobe themselves: they need the same version installed.

Failure costs time, not answers: the scheduler reruns on another worker a task whose worker died (up to its
`allowed-failures`; past that, or with no worker left, the caller computes the unit). A stopped or hung worker
still holds its connection, and the scheduler would wait minutes (`worker-ttl`) before giving its tasks away:
a worker holding one of these units whose heartbeat has not moved for the stall window is taken as stalled,
and the caller computes its units.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from kvprobe.run.base import Unit, named, run_here
from kvprobe.run.stall import stall_seconds

POLL_S = 0.2
CONNECT_TIMEOUT_S = 10


class ClusterUnavailable(Exception):
    """No client: the extra is not installed, or the scheduler cannot be reached."""


class DaskCluster:
    name = "dask cluster"

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

    def start(self, fn: Unit, units: Sequence[Any], shared: Any = None) -> _ClusterRun:
        return _ClusterRun(self.client, fn, units, shared)

    def close(self) -> None:
        self.client.close()


def _call(fn: Unit, shared: Any, unit: Any) -> Any:
    return fn(shared, unit)


class _ClusterRun:
    def __init__(self, client: Any, fn: Unit, units: Sequence[Any], shared: Any) -> None:
        self._client, self._fn, self._units, self._shared = client, fn, units, shared
        self._out: list[Any] = [None] * len(units)
        self._futures: dict[Any, int] = {}
        if units:
            there = client.scatter(shared, broadcast=True, hash=False)
            futures = client.map(_call, [fn] * len(units), [there] * len(units), list(units), pure=False)
            self._futures = {f: i for i, f in enumerate(futures)}

    def results(self) -> list[Any]:
        try:
            run_here(self._fn, self._units, sorted(self._gather()), self._shared, self._out)
        finally:
            self.close()
        return self._out

    def _gather(self) -> list[int]:
        """Results into place; the indices of the units the caller must compute."""
        from distributed.scheduler import KilledWorker

        lost: list[int] = []
        heartbeats = _Heartbeats(self._client, stall_seconds())
        arrived = threading.Event()
        for future in self._futures:
            future.add_done_callback(lambda _: arrived.set())
        while self._futures:
            arrived.wait(POLL_S)
            arrived.clear()
            for future in [f for f in self._futures if f.done()]:
                i = self._futures.pop(future)
                try:
                    self._out[i] = future.result()
                except KilledWorker:  # it killed every worker it was given: computed here
                    lost.append(i)
                except Exception as exc:
                    raise named(exc, i, self._units)
            stalled = heartbeats.stalled({f.key for f in self._futures})
            for future in [f for f in self._futures if f.key in stalled]:
                lost.append(self._futures.pop(future))
                future.cancel()
        return lost

    def close(self) -> None:
        for future in self._futures:
            future.cancel()
        self._futures = {}


class _Heartbeats:
    """Which of our tasks sit on a worker whose heartbeat has not moved for the window (or wait with no
    worker at all for that long)."""

    def __init__(self, client: Any, window: float) -> None:
        self._client, self._window = client, window
        self._seen: dict[str, tuple[float, float]] = {}  # worker -> (its last heartbeat, when we saw it move)
        self._workers_since = time.monotonic()

    def stalled(self, keys: set) -> set:
        if not keys:
            return set()
        now = time.monotonic()
        workers = self._client.scheduler_info(n_workers=-1).get("workers", {})
        if workers:
            self._workers_since = now
        elif now - self._workers_since > self._window:
            return set(keys)
        out: set = set()
        processing = self._client.processing()
        for address, info in workers.items():
            beat = info.get("last_seen", 0.0)
            last, moved = self._seen.get(address, (None, now))
            if beat != last:
                moved = now
            self._seen[address] = (beat, moved)
            if now - moved > self._window:
                out |= keys & set(processing.get(address, ()))
        return out
