"""One function run in a forked child on the second core while this process goes on; its return value comes
back pickled.

This module imports little at its top: the report's early helper process (`analysis.helper`) imports it
before the command line has imported anything else.

A fork inherits everything this process holds (a parsed log, its simulation) without copying or pickling it,
so a stage that reads that state and returns little (the diagnoses) can run beside another. Whatever goes
wrong in the child — an error, a kill, a short answer, a stop — `result` says so with None and the caller
computes the value itself: the outcome is the same either way, only slower.
"""
from __future__ import annotations

import os
import pickle
import select
from collections.abc import Callable
from typing import Any

from kvprobe.cpus import usable_cpus

# Below this many requests a stage takes milliseconds: the fork, and the child's first writes to the memory it
# shares with this process (copied on write), cost about what running beside this process saves.
MIN_REQUESTS = 1_000
POLL_S = 0.2  # how often a wait for the child looks at its state


def worth_forking(requests: int) -> bool:
    """A log large enough, a second core to run on, and a system that forks."""
    return requests >= min_requests() and hasattr(os, "fork") and usable_cpus() >= 2


def min_requests() -> int:
    """The smallest log a second process helps with ($KVPROBE_FORK_MIN_REQUESTS overrides: 0 forks for any
    log, a large number never, e.g. to time one process against two)."""
    value = os.environ.get("KVPROBE_FORK_MIN_REQUESTS")
    return int(value) if value and value.isdigit() else MIN_REQUESTS


class Forked:
    """`fn()` in a child process, started at once; `result` waits for its value."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.pid: int | None = None
        self._fd: int | None = None
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:  # no process to spare: the caller computes it
            os.close(read_end)
            os.close(write_end)
            return
        if pid == 0:
            os.close(read_end)
            _child(fn, write_end)
        os.close(write_end)
        self.pid, self._fd = pid, read_end

    def result(self) -> tuple[bool, Any]:
        """(True, the value) once the child has sent it; (False, None) when it failed, could not start, or
        stalled (stopped, or using no CPU for the stall window: `run.stall`), the child then ended."""
        if self._fd is None:
            return False, None
        from kvprobe.run.stall import StallWatch

        chunks, watch = [], StallWatch()
        try:
            while True:
                if not select.select([self._fd], [], [], POLL_S)[0]:
                    if watch.stalled([self.pid] if self.pid is not None else []):
                        return False, None
                    continue
                chunk = os.read(self._fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                watch.progressed()
            ok, value = pickle.loads(b"".join(chunks))
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError):  # it died before the end
            ok, value = False, None
        finally:
            self.close()
        return bool(ok), value if ok else None

    def close(self) -> None:
        """End the child if it still runs, and reap it: an interrupted command leaves no process behind."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.pid is not None:
            import signal

            try:
                if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = None


def end_with_parent() -> None:
    """Linux: have the kernel end this process when the parent dies (killed, it cannot say so); elsewhere
    the child notices when it next writes to the parent."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _child(fn: Callable[[], Any], fd: int) -> None:
    """Run, send, and leave without this process's exit handlers or buffered output (they are the parent's)."""
    code = 1
    try:
        end_with_parent()
        try:
            answer: tuple[bool, Any] = (True, fn())
        except Exception:  # noqa: BLE001 - the parent computes it again and reports the error itself
            answer = (False, None)
        view = memoryview(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
        while view:
            view = view[os.write(fd, view):]
        code = 0
    except BaseException:  # noqa: BLE001 - Ctrl-C or a closed pipe: the parent copes with a short answer
        pass
    finally:
        os._exit(code)
