"""The local backend where the system forks: worker processes forked by `os.fork` when the map starts, each
claiming units from the front of the list, the caller taking them from the back while it waits, answers back
through one pipe per worker. The same contract as the standard pool (`pool.LocalPool`, which runs where there
is no fork): results in unit order, a unit that raises raised in the caller, a worker that dies or stalls
costing time, not answers.

Why not the standard pool here: its workers are started, fed and read by two threads of this process, and
while this process computes (the report diagnoses and prices the sets others start from while the pool prices
the rest) every hand-off between those threads and the computing one waits for the interpreter's lock. On a
315-request fleet the pool's one worker started its first unit 64 ms after the map began, and the what-if
was no faster on two processes than on one; a forked worker starts computing in ~2 ms (docs/scale.md).

How units are shared without a lock: every index is written to a pipe the workers read 4 bytes at a time (a
read that small is atomic, so no two workers get one index), and a shared byte per unit says who claimed it
(`_FREE`, `_WORKER`, `_CALLER`). The caller claims from the back; a worker skips a unit the caller claimed. Where
both claim the same unit at the same instant, both compute it: the answers are the same (a unit is a pure
function of its input), and the first one in is kept. Each worker's first unit is reserved for it before the
fork, so a worker always has work.

What travels back: per unit, its index, whether it returned, and its result or exception, pickled, each
framed by its length. The caller reads without blocking (a worker stopped mid-message never blocks it); a
worker that ends with units claimed and unanswered has died: those are computed here.
"""
from __future__ import annotations

import mmap
import os
import pickle
import select
import signal
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from kvprobe.run.base import Unit, named
from kvprobe.run.stall import StallWatch

POLL_S = 0.2  # how long the caller waits for an answer before it looks at the workers' state
_FREE, _WORKER, _CALLER = 0, 1, 2
_INDEX = 4  # bytes per unit index in the queue: an atomic pipe read (PIPE_BUF is at least 512)
_LENGTH = 8  # bytes of each answer's length
_CHUNK = 512  # bytes of indices written at once: POSIX's least PIPE_BUF, so each write is whole or refused
_PIPE_BYTES = 1 << 20  # sized so that a worker rarely waits for the caller to read (Linux; 64 KB elsewhere)


class ForkPool:
    name = "forked workers"

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)

    def start(self, fn: Unit, units: Sequence[Any], shared: Any = None,
              arrived: Callable[[int, Any], None] | None = None) -> _ForkRun:
        """`arrived(unit, result)`, where given, is called in the caller as each worker's result is taken (a
        stage's progress: the caller's own units can say theirs as they are computed)."""
        return _ForkRun(self.workers, fn, units, shared, arrived)


class _ForkRun:
    def __init__(self, workers: int, fn: Unit, units: Sequence[Any], shared: Any,
                 arrived: Callable[[int, Any], None] | None = None) -> None:
        self._fn, self._units, self._shared, self._arrived = fn, units, shared, arrived
        n = len(units)
        self._out: list[Any] = [None] * n
        self._done = bytearray(n)  # 1 where a result is in `_out`
        self._left = n
        self._claims = mmap.mmap(-1, max(n, 1))  # anonymous and shared: the workers see the caller's claims
        self._workers: dict[int, _Worker] = {}  # by pid, while it runs
        self._failure: tuple[BaseException, int] | None = None
        if n:
            self._fork(min(workers, n))

    def _fork(self, count: int) -> None:
        read, write = os.pipe()
        _size(write)
        os.set_blocking(write, False)
        queued = b"".join(k.to_bytes(_INDEX, "little") for k in range(count, len(self._units)))
        for at in range(0, len(queued), _CHUNK):  # (the first `count` units are the workers' first ones)
            try:
                os.write(write, queued[at:at + _CHUNK])  # all of it or nothing: at most PIPE_BUF bytes
            except BlockingIOError:  # more units than the pipe holds: the rest are the caller's, from the back
                break
        os.close(write)  # an empty queue then reads as its end
        for k in range(count):
            self._claims[k] = _WORKER
            try:
                worker = _Worker.fork(self, read, first=k)
            except OSError:  # no process to spare: what is not claimed is computed here
                self._claims[k] = _FREE
                break
            self._workers[worker.pid] = worker
        os.close(read)

    # -- in a worker -------------------------------------------------------------------------------------
    def _serve(self, queue: int, answers: int, first: int) -> None:
        """A worker's life: its first unit, then each one the queue gives it that the caller has not claimed."""
        # (no `forked.end_with_parent`: its ctypes import was ~11 ms of each worker's start; a worker whose
        # caller died fails on writing its next answer, the pipe's reader gone, and ends there)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # ^C ends the whole group: no traceback from each worker
        out = _Outbox(answers)
        out.send(self._answer(first))
        while len(got := os.read(queue, _INDEX)) == _INDEX:
            i = int.from_bytes(got, "little")
            if self._claims[i] == _FREE:
                self._claims[i] = _WORKER
                out.send(self._answer(i))
        out.flush(wait=True)

    def _answer(self, i: int) -> bytes:
        """Unit `i`'s answer as it travels: its length, its index, and whether it returned with what it
        returned or raised, pickled (nothing where that cannot be pickled: the caller computes it itself)."""
        try:
            answer: tuple[bool, Any] = (True, self._fn(self._shared, self._units[i]))
        except Exception as exc:  # noqa: BLE001 - raised again in the caller, where it happened said
            answer = (False, with_worker_traceback(exc))
        try:
            data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - an answer that cannot travel: the caller computes the unit itself
            data = b""
        return len(data).to_bytes(_LENGTH, "little") + i.to_bytes(_INDEX, "little") + data

    # -- in the caller -----------------------------------------------------------------------------------
    def results(self) -> list[Any]:
        try:
            watch = StallWatch()
            back = len(self._units)
            while self._left:
                if self._read_answers(0):
                    watch.progressed()
                back = self._claim_from(back - 1)
                if back >= 0:
                    self._compute(back)
                    watch.progressed()
                    continue
                if not self._workers:
                    break
                if self._read_answers(POLL_S):
                    watch.progressed()
                elif watch.stalled(list(self._workers)):
                    self._stop_workers()  # their claimed units get no answer: computed below
            for i in range(len(self._units)):  # claimed by a worker that ended without answering
                if not self._done[i]:
                    self._compute(i)
        finally:
            self.close()
        return self._out

    def _claim_from(self, i: int) -> int:
        """The last unit at or before `i` nobody has claimed, now the caller's (-1: none)."""
        claims = self._claims
        while i >= 0 and claims[i] != _FREE:
            i -= 1
        if i >= 0:
            claims[i] = _CALLER
        return i

    def _compute(self, i: int) -> None:
        if self._done[i]:
            return
        try:
            value = self._fn(self._shared, self._units[i])
        except Exception as exc:
            raise named(exc, i, self._units)
        self._keep(i, value)

    def _keep(self, i: int, value: Any) -> None:
        if not self._done[i]:  # (both computed it: the answers are the same)
            self._out[i], self._done[i] = value, 1
            self._left -= 1

    def _read_answers(self, timeout: float) -> bool:
        """Take what the workers have sent (waiting up to `timeout` for anything); whether any answer came."""
        if not self._workers:
            return False
        poller = select.poll()
        for worker in self._workers.values():
            poller.register(worker.answers, select.POLLIN)
        by_fd = {w.answers: w for w in self._workers.values()}
        came = False
        for fd, _ in poller.poll(int(timeout * 1000)):
            came = self._drain(by_fd[fd], ended=False) or came
        if not came:  # a worker that has ended while its pipe stays open (a process it started holds it)
            for worker in [w for w in self._workers.values() if w.exited()]:
                came = self._drain(worker, ended=True) or came
        return came

    def _drain(self, worker: _Worker, ended: bool) -> bool:
        """Take the worker's answers read so far (ending it once its pipe, or the worker, has ended); whether
        any came."""
        ended = worker.take() or ended
        messages = worker.messages()
        for i, answer in messages:
            if answer is None:  # sent or read back it could not be: computed here, as in one process
                self._compute(i)
            elif not answer[0]:
                raise named(answer[1], i, self._units)
            else:
                kept = not self._done[i]
                self._keep(i, answer[1])
                if kept and self._arrived is not None:
                    self._arrived(i, answer[1])
        if ended:
            self._end(worker)
        return bool(messages)

    def _end(self, worker: _Worker) -> None:
        del self._workers[worker.pid]
        worker.reap()

    def _stop_workers(self) -> None:
        for worker in list(self._workers.values()):
            worker.kill()
            self._end(worker)

    def close(self) -> None:
        self._stop_workers()
        if not self._claims.closed:
            self._claims.close()


def with_worker_traceback(exc: BaseException) -> BaseException:
    """The exception with its traceback in this worker as a note (the traceback itself does not travel)."""
    import traceback

    exc.add_note("in a forked worker:\n" + "".join(traceback.format_exception(exc)).rstrip())
    return exc


class _Outbox:
    """A worker's answers on their way: written as far as the pipe takes them without waiting, the rest kept
    here while the worker computes its next unit. The caller reads its pipe only between the units it
    computes itself: a worker that waited for it to make room (answers larger than the pipe, whole records
    of an `import`) sat idle for most of each of the caller's units."""

    __slots__ = ("fd", "parts")

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd, self.parts = fd, deque[memoryview]()

    def send(self, data: bytes) -> None:
        self.parts.append(memoryview(data))
        self.flush(wait=False)

    def flush(self, wait: bool) -> None:
        """Write what the pipe takes now; `wait`: all of it, waiting for the caller to read."""
        if wait:
            os.set_blocking(self.fd, True)
        parts = self.parts
        while parts:
            try:
                n = os.write(self.fd, parts[0])
            except BlockingIOError:
                return
            if n == len(parts[0]):
                parts.popleft()
            else:
                parts[0] = parts[0][n:]


class _Worker:
    """A forked worker as the caller sees it: its pid and the read end of its answers, with what was read of
    them not yet a whole answer."""

    __slots__ = ("pid", "answers", "_buf")

    def __init__(self, pid: int, answers: int) -> None:
        self.pid, self.answers, self._buf = pid, answers, bytearray()

    @staticmethod
    def fork(run: _ForkRun, queue: int, first: int) -> _Worker:
        read, write = os.pipe()
        _size(write)
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            raise
        if pid == 0:  # the worker: never returns into the caller's code
            code = 1
            try:
                os.close(read)
                for other in run._workers.values():  # (its siblings' pipes are not its to hold open)
                    os.close(other.answers)
                run._serve(queue, write, first)
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        os.set_blocking(read, False)
        return _Worker(pid, read)

    def take(self) -> bool:
        """Read what the pipe holds now; True once the worker has closed it (ended)."""
        while True:
            try:
                data = os.read(self.answers, _PIPE_BYTES)
            except BlockingIOError:
                return False
            if not data:
                return True
            self._buf += data

    def messages(self) -> list[tuple[int, tuple[bool, Any] | None]]:
        """The whole answers read so far, each (unit, (returned, value)), or (unit, None) for one that could
        not be sent or read back (a partial one stays until the rest comes)."""
        out: list[tuple[int, tuple[bool, Any] | None]] = []
        buf, at, head = self._buf, 0, _LENGTH + _INDEX
        while len(buf) - at >= head:
            size = int.from_bytes(buf[at:at + _LENGTH], "little")
            if len(buf) - at - head < size:
                break
            i = int.from_bytes(buf[at + _LENGTH:at + head], "little")
            try:
                answer = pickle.loads(buf[at + head:at + head + size]) if size else None
            except Exception:  # noqa: BLE001 - pickled, but its type cannot be made again from it
                answer = None
            out.append((i, answer))
            at += head + size
        del buf[:at]
        return out

    def exited(self) -> bool:
        """Whether the process has ended (it is then reaped by `reap`, its status kept by the system till then)."""
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except (ChildProcessError, AttributeError):  # reaped elsewhere; no waitid (not POSIX)
            return False

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass

    def reap(self) -> None:
        try:
            os.close(self.answers)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped elsewhere
            pass


def _size(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except (ImportError, AttributeError, OSError):  # not Linux, or a lower limit: the system's size
        pass
