"""When a process beside this one pays (`worth_forking`), and how a forked one ends with its parent.

This module imports little at its top: the report's early helper process (`analysis.helper`) imports it
before the command line has imported anything else. A fork inherits everything this process holds (a parsed
log, a pricer) without pickling it; the executor seam's local pool (`kvprobe.run.pool`) forks its workers, and
`Forked` runs one call in a child (the importers' parallel read).
"""
from __future__ import annotations

import os
import signal

from kvprobe.cpus import usable_cpus

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Below this many requests a stage takes milliseconds: the fork, and the child's first writes to the memory it
# shares with this process (copied on write), cost about what running beside this process saves.
MIN_REQUESTS = 1_000


def worth_forking(requests: int) -> bool:
    """A log large enough, a second core to run on, and a system that forks."""
    return requests >= min_requests() and hasattr(os, "fork") and usable_cpus() >= 2


def min_requests() -> int:
    """The smallest log a second process helps with ($KVPROBE_FORK_MIN_REQUESTS overrides: 0 forks for any
    log, a large number never, e.g. to time one process against two)."""
    value = os.environ.get("KVPROBE_FORK_MIN_REQUESTS")
    return int(value) if value and value.isdigit() else MIN_REQUESTS


def end_with_parent() -> None:
    """Linux: have the kernel end this process when the parent dies (killed, it cannot say so); elsewhere
    the child notices when it next writes to the parent."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class ChildLost(Exception):
    """A forked child ended without an answer (killed, out of memory): what it had to do is still to do."""


class Forked:
    """`fn(*args)` running in a forked child: `result()` waits for what it returned (raising what it raised,
    `ChildLost` where it died without a word); `close()` ends it where the answer is not wanted any more.

    For the files `kvprobe.importers.loading` reads beside this process: a standard pool's imports and start
    (multiprocessing, concurrent.futures) were ~16-26 ms of `usage` on a 203 MB folder, more than the pool
    saved there over one child per share. The child answers once, through a pipe, and leaves by `os._exit`:
    none of the parent's exit handlers or buffered output run twice."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        import pickle  # (here: the report's early helper imports this module before anything else)

        read, write = os.pipe()
        try:
            self.pid: int | None = os.fork()
        except OSError:  # no process to spare (EAGAIN, ENOMEM): the caller does the work itself
            os.close(read)
            os.close(write)
            raise
        if self.pid == 0:  # the child: never returns into the caller's code
            code = 1
            try:
                os.close(read)
                try:
                    answer: tuple[bool, Any] = (True, fn(*args))
                except BaseException as exc:  # noqa: BLE001 - raised again in the parent
                    answer = (False, exc)
                try:
                    data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
                except Exception as exc:  # noqa: BLE001 - an answer that cannot travel: said so
                    data = pickle.dumps((False, RuntimeError(f"a forked child's answer could not be sent: {exc}")))
                with os.fdopen(write, "wb") as out:
                    out.write(data)
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self._read: int | None = read

    def result(self) -> Any:
        import pickle

        assert self._read is not None, "result() is asked once"
        with os.fdopen(self._read, "rb") as pipe:
            self._read = None
            data = pipe.read()
        self._reap()
        if not data:
            raise ChildLost("the child process ended without an answer")
        ok, value = pickle.loads(data)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """End the child if it still runs (the caller stopped early or failed), leaving no zombie."""
        if self._read is not None:
            os.close(self._read)
            self._read = None
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self._reap()

    def _reap(self) -> None:
        if self.pid:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = None
