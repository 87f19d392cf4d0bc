"""The executor seam: map a plain, picklable, top-level function over independent units and gather the results
in unit order, in this process, on a local process pool, or on a Dask cluster (docs/scale.md).

It knows nothing of the analysis (tests/test_pipeline_layers.py keeps it so): the stages own their unit
functions and import this package. A stage asks `current(parallel=...)` for the executor: the one a caller
set with `using` (the command line's `--cluster`), else a pool sized to the usable CPUs (and to the memory
its forked workers may copy, `room`) when the stage says its work is large enough to pay for processes, else
this process.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from kvprobe.cpus import usable_cpus
from kvprobe.run.base import Executor, InProcess, Pending

__all__ = ["Executor", "InProcess", "Pending", "connect", "current", "using"]

_chosen: ContextVar[Executor | None] = ContextVar("kvprobe_executor", default=None)


def current(parallel: bool, cluster: bool = True) -> Executor:
    """The executor a stage maps its units with. parallel: the stage's work is large enough that processes
    pay for their start (a cluster set by `using` is used whatever the size: the caller asked for it).
    cluster: False for a stage whose shared value is too large to send for what it computes: where a cluster
    was chosen it runs in this process (not forked: the cluster's client runs threads here, and a fork of a
    process with threads may deadlock in the child)."""
    chosen = _chosen.get()
    if chosen is not None:
        return chosen if cluster or not getattr(chosen, "remote", False) else InProcess()
    if parallel and usable_cpus() >= 2:
        from kvprobe.run.room import workers_with_room

        workers = workers_with_room(usable_cpus() - 1)  # the caller computes too
        if workers and hasattr(os, "fork"):
            from kvprobe.run.forks import ForkPool

            return ForkPool(workers)
        if workers:
            from kvprobe.run.pool import LocalPool

            return LocalPool(workers)
    return InProcess()


@contextmanager
def using(executor: Executor) -> Iterator[Executor]:
    """Every stage run inside maps its units with `executor`."""
    token = _chosen.set(executor)
    try:
        yield executor
    finally:
        _chosen.reset(token)


def connect(address: str) -> Executor:
    """A Dask cluster's executor (raises run.cluster.ClusterUnavailable when it cannot be had)."""
    from kvprobe.run.cluster import DaskCluster

    return DaskCluster(address)
