"""When a process beside this one pays (`worth_forking`), and how a forked one ends with its parent.

This module imports little at its top: the report's early helper process (`analysis.helper`) imports it
before the command line has imported anything else. A fork inherits everything this process holds (a parsed
log, a pricer) without pickling it; the executor seam's forked workers (`kvprobe.run.forks`, the importers'
parallel read included) are forked, and `Child` is the report's helper over a `Channel`.
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
# shares with this process (copied on write), cost about what running beside this process saves. Measured
# with the seam's forked workers (`kvprobe.run.forks`), 11 interleaved runs each, one process / two: fleets of
# 33 requests 0.291 / 0.313 s, 63 0.364 / 0.367 s, 111 0.466 / 0.454 s, 158 0.565 / 0.519 s, 315 0.877 /
# 0.759 s (1,000 when the standard pool's start, ~64 ms under a busy caller, was the cost: stop 64).
MIN_REQUESTS = 100


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


class Channel:
    """One end of a two-way channel to a forked child, over two pipes: the `send_bytes`, `recv_bytes` and `poll`
    of multiprocessing's Connection, each message its length (8 bytes) and its bytes, without multiprocessing's
    imports and its Pipe's (~20 ms before the report's helper could be forked, `analysis.helper`). A closed other
    end is EOFError to a reader and BrokenPipeError to a writer, as with a Connection.

    Each pipe holds `PIPE_BYTES` where the system lets it be sized (Linux; 64 KB otherwise). A writer whose
    message does not fit waits for the reader, and says so every 0.1 s to `waiting` where one is given: the
    report's helper stopped or dead is then found while this process writes to it, not only while it reads."""

    __slots__ = ("_in", "_out", "_readable", "_writable")

    def __init__(self, read_fd: int, write_fd: int) -> None:
        import select

        self._in, self._out = read_fd, write_fd
        self._readable, self._writable = select.poll(), select.poll()
        self._readable.register(read_fd, select.POLLIN)
        self._writable.register(write_fd, select.POLLOUT)
        os.set_blocking(write_fd, False)

    @staticmethod
    def pair() -> tuple[Channel, Channel]:
        """Two connected ends (each inherited by a fork: each process closes the one it does not use)."""
        down_read, down_write = os.pipe()
        up_read, up_write = os.pipe()
        for fd in (down_write, up_write):
            _size_pipe(fd)
        return Channel(up_read, down_write), Channel(down_read, up_write)

    def fileno(self) -> int:
        return self._in

    def poll(self, timeout: float = 0.0) -> bool:
        """Whether a message (or the other end's close) waits to be read, waiting up to `timeout` seconds."""
        return bool(self._readable.poll(max(0, int(timeout * 1000))))

    def send_bytes(self, data: bytes, waiting: Callable[[], None] | None = None) -> None:
        """Send one message; `waiting()` is called every 0.1 s the reader takes no more of it (it may raise)."""
        self._write_all(len(data).to_bytes(8, "little"), waiting)
        self._write_all(data, waiting)

    def recv_bytes(self) -> bytearray:
        size = int.from_bytes(self._read_exactly(8), "little")
        return self._read_exactly(size)

    def close(self) -> None:
        for fd in (self._in, self._out):
            try:
                os.close(fd)
            except OSError:  # closed already
                pass

    def _write_all(self, data: bytes, waiting: Callable[[], None] | None) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._out, view):]
            except BlockingIOError:  # the pipe is full: the reader has not taken what was written yet
                if not self._writable.poll(100) and waiting is not None:
                    waiting()

    def _read_exactly(self, size: int) -> bytearray:
        buf = bytearray(size)
        view, got = memoryview(buf), 0
        while got < size:
            read = os.readv(self._in, [view[got:]])
            if not read:
                raise EOFError("the other process closed its end")
            got += read
        return buf


PIPE_BYTES = 1 << 20  # Linux's default most an unprivileged process may size a pipe to (/proc/sys/fs/pipe-max-size)


def _size_pipe(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):  # not Linux, or a lower limit: the system's size, 64 KB
        pass


class Child:
    """`fn(*args)` running in a forked child until it returns (then the child leaves by `os._exit`, 0; 1 where it
    raised): what the report's helper needs of multiprocessing's Process (`is_alive`, `pid`, `exitcode`,
    `terminate`, `kill`, `join`) without its imports. Raises OSError where no process can be forked."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._ended = False
        self._code: int | None = None  # once ended: its exit status, None where it could not be known
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            code = 1
            try:
                fn(*args)
                code = 0
            finally:
                os._exit(code)
        self.pid = pid

    @property
    def exitcode(self) -> int | None:
        """None while it runs; its exit status, or minus the signal that ended it (as multiprocessing says); None
        too where it was reaped elsewhere (SIGCHLD ignored), its status lost."""
        self._poll(block=False)
        return self._code

    def is_alive(self) -> bool:
        self._poll(block=False)
        return not self._ended

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def join(self, timeout: float | None = None) -> None:
        """Wait for it to end (at most `timeout` seconds), reaping it."""
        if timeout is None:
            self._poll(block=True)
            return
        import time

        deadline = time.monotonic() + timeout
        while self.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)

    def _signal(self, number: int) -> None:
        if self.is_alive():
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:  # ended meanwhile
                pass

    def _poll(self, block: bool) -> None:
        if self._ended:
            return
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): it has ended, how is not known
            self._ended = True
            return
        if pid:
            self._ended, self._code = True, os.waitstatus_to_exitcode(status)
