"""The second process of a large `report` (split_parse): started early, it loads the tokenizer while this
process is still importing and reading, then parses its share of the files or counts the tokens of the texts
this process sends it.

The tokenizer's load (25-45 ms for rs_bpe, ~0.25 s for quicktok, which large inputs load: `kvprobe.tokenizers`)
is the longest fixed cost of a report; `prestart`, called by the command line before it imports the analysis,
starts the helper ~50 ms earlier than parsing could. This module imports little at its top for that reason: the
helper imports what it needs after the fork, on its own core.
"""
from __future__ import annotations

import atexit
import os
import pickle
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kvprobe.forked import Channel, Child, end_with_parent
from kvprobe.tokenizers import EXACT_PROVIDER

# Below this, the texts a report counts mostly fit the shipped table's budget (kvprobe.tokentable): no tokenizer
# loads, and a helper that loads one would be waited for (a 150 KB capture of three Claude Code turns: 0.18 s
# alone, 0.25 s with it). Above, the tokenizer loads anyway, and loading it beside this process's imports
# saves most of its load: 1.3-5.4 MB traces (fleets, long sessions, real Claude Code captures) 0.31-0.38 s
# -> 0.24-0.32 s with quicktok (docs/benchmarks.md, stop 61). With rs_bpe's ~25 ms load the helper neither helps
# nor costs there (1.3-11 MB: within 10 ms either way, stop 63).
MIN_SPLIT_BYTES = 1_000_000
_PROTOCOL = pickle.HIGHEST_PROTOCOL
CLOSE_GRACE_S = 1.0  # how long a helper asked to end (SIGTERM) is given before it is killed
_PEEK_BYTES = 4_000_000  # a first record longer than this is not read to guess the tokenizer
_prestarted: Helper | None = None


def prestart(paths: Iterable[str | Path]) -> None:
    """Start the helper now if a large trace is among `paths` (arguments that may name files) and this
    system forks; `take` then hands it to the parse. Unused, it ends with this process."""
    global _prestarted
    if _prestarted is not None:
        return
    try:
        traces = [p for p in map(Path, paths) if p.suffix in (".jsonl", ".ndjson") and p.is_file()]
        large = [p for p in traces if p.stat().st_size >= min_split_bytes()]
        if large and _forks() and worth_splitting(large):
            _prestarted = Helper(large, traces)
    except OSError:  # no process to spare, or a file gone meanwhile: the parse decides again
        _prestarted = None


def min_split_bytes() -> int:
    """The smallest file a second process helps with ($KVPROBE_SPLIT_MIN_BYTES overrides, e.g. to check a
    small trace)."""
    value = os.environ.get("KVPROBE_SPLIT_MIN_BYTES")
    return int(value) if value and value.isdigit() else MIN_SPLIT_BYTES


def worth_splitting(paths: list[Path]) -> bool:
    from kvprobe.cpus import usable_cpus

    return usable_cpus() >= 2 and any(p.stat().st_size >= min_split_bytes() for p in paths)


def take(paths: list[Path], counting: bool) -> Helper | None:
    """The prestarted helper when it is still running, else a new one (its tokenizer guessed from `paths`);
    None when no process can be started, or when it would count texts where processes are spawned, not
    forked: there the texts would go down a pipe, which stalls this process until the new interpreter has
    imported kvprobe and loaded its tokenizer, longer than counting here takes on the sizes counted there."""
    global _prestarted
    helper, _prestarted = _prestarted, None
    if helper is not None and helper.alive():
        return helper
    if helper is not None:
        helper.close()
    if counting and not _forks():
        return None
    try:
        return Helper(paths, paths)
    except OSError:  # e.g. no more processes allowed: one process does it all
        return None


def _forks() -> bool:
    return hasattr(os, "fork")  # (what multiprocessing's "fork" start method needs, asked without importing it)


class Helper:
    """One process; given work once: parse the second part of each large file in input order (a piece each,
    `result`), then, when counting, count the texts sent to it (`send_texts`, `counts`)."""

    def __init__(self, guess_from: list[Path], inputs: list[Path]) -> None:
        """guess_from: the files whose first record names the tokenizer to load; inputs: every file the report
        reads, whose bytes choose the tokenizer's implementation as the report's own process chooses it."""
        # Forked where the system forks (no re-import, the scratch file inherited), by `forked.Child` over a
        # `forked.Channel`: multiprocessing's imports and its Pipe took ~20 ms before the fork. Elsewhere a
        # process spawned by multiprocessing (imported here, not at import: most reports start no helper).
        fork = _forks()
        ctx = None
        if fork:
            self._done = _SharedInt()  # bytes the helper has parsed
            self._conn, theirs = Channel.pair()
        else:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            self._done = ctx.Value("q", 0, lock=False)
            self._conn, theirs = ctx.Pipe()
        self._reported = 0
        # Texts to count go through a file in memory (inherited through the fork), with a short notice down the
        # pipe: writing there never waits, while a pipe fills up (1 MiB) long before the helper has loaded
        # its tokenizer and reads.
        self._scratch = _scratch_file() if fork else None
        # Once the helper has read everything written, the file is emptied and written from its start again:
        # it holds what waits to be counted, the texts of the ~0.25 s quicktok takes to load (8 MB at most
        # on 100 MB, 14 MB on 200 MB), then next to nothing while counting keeps up with reading; when it does
        # not, the sender counts some itself (split_parse.BEHIND_BYTES).
        self._sent = 0  # bytes of texts sent, ever
        self._read = _SharedInt() if fork else None  # of those, the bytes the helper has read
        self._end = 0  # the file's length
        self._unwanted = 0  # answers to pass over (`forgo_counts`)
        args = (theirs, self._conn if fork else None, self._done, self._scratch, self._read,
                [str(p) for p in guess_from], input_bytes(inputs))
        if ctx is None:
            self._proc: Any = Child(_main, *args)
        else:
            self._proc = ctx.Process(target=_main, daemon=True, args=args)
            self._proc.start()
        theirs.close()

    def alive(self) -> bool:
        return self._proc.is_alive()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def start(self, jobs: list[tuple[str, int, int]], counting: bool) -> None:
        """jobs: (path, first byte, end) of each part to parse there, in input order."""
        self._notify(("work", jobs, counting), "parsing or counting")

    def report(self, progress: Callable[[int], None]) -> None:
        done = self._done.value
        if done > self._reported:
            progress(done - self._reported)
            self._reported = done

    def ready(self) -> bool:
        """Whether an answer waits to be read (`result` then returns at once)."""
        try:
            return self._conn.poll(0)
        except OSError:  # its end closed: `result` says why
            return True

    def result(self, path: str, progress: Callable[[int], None] | None) -> Any:
        """The next parsed piece (split_parse.Piece)."""
        from kvprobe.analysis.split_piece import receive_piece

        what = f"parsing the second half of {path}"
        return receive_piece(lambda: self._receive(what, progress))

    def send_texts(self, batch: bytes) -> None:
        """A pickled list of (body hash, encoding, text, meta) to count (a forked helper only, `take`)."""
        assert self._scratch is not None and self._read is not None
        if self._end and self._read.value == self._sent:
            os.ftruncate(self._scratch, 0)
            self._end = 0
        view, at = memoryview(batch), self._end
        while view:
            written = os.pwrite(self._scratch, view, at)
            view, at = view[written:], at + written
        self._notify(("at", self._end, len(batch)), "counting tokens")
        self._end += len(batch)
        self._sent += len(batch)

    @property
    def unread_bytes(self) -> int | None:
        """Bytes of texts sent that the helper has not read yet (None without the scratch file)."""
        return None if self._read is None else self._sent - self._read.value

    def still_loading(self) -> bool:
        """The helper has read none of the texts sent (it reads them once its tokenizer has loaded)."""
        return self._read is not None and self._read.value == 0

    @property
    def scratch_bytes(self) -> int:
        """The scratch file's length now."""
        return self._end

    def counts(self) -> dict[int, int]:
        """Raw token counts of every text sent, by body hash. The helper then counts single texts (`count`)."""
        self._notify(("end",), "counting tokens")
        return self._receive("counting tokens", None)

    def forgo_counts(self) -> None:
        """`counts` without waiting for them (the texts were counted here): the helper sends them when it has,
        and the next answer read (`count`'s) passes over them."""
        self._notify(("end",), "counting tokens")
        self._unwanted += 1

    def count(self, texts: list[str], encoding: str) -> list[int] | None:
        """The texts' raw tokens, counted there after `counts`, in one round trip (each is ~0.5 ms of waiting
        for the helper to wake and answer: the few dozen texts a fleet's proposals count were ~20 ms one by
        one); None when the helper has ended."""
        try:
            # the answers passed over are read first: the helper may be writing one (its counts: more than a
            # pipe holds) while this process writes a long text to it, each waiting for the other to read
            while self._unwanted:
                self._receive("counting tokens", None)
                self._unwanted -= 1
            self._send(("count", texts, encoding), "counting texts")
            counted = self._receive("counting texts", None)
        except (OSError, EOFError, RuntimeError):  # ended or stuck: the caller counts them itself
            return None
        return counted if isinstance(counted, list) and len(counted) == len(texts) else None

    def _notify(self, message: tuple, what: str) -> None:
        try:
            self._send(message, what)
        except OSError:  # the helper has ended: say so now, with its traceback if it sent one
            self._receive(what, None)
            raise RuntimeError(self._ended(what)) from None

    def _send(self, message: tuple, what: str) -> None:
        """Write a message; where it waits on the helper to read (a forked helper's channel), a helper that has
        ended, or is stopped or idle for the stall window, is killed and raises OSError as a closed pipe would."""
        data = pickle.dumps(message, protocol=_PROTOCOL)
        if not isinstance(self._conn, Channel):
            self._conn.send_bytes(data)
            return
        watches: list[Any] = []  # made at the first wait: most messages never wait

        def waiting() -> None:
            if not watches:
                from kvprobe.run.stall import StallWatch

                watches.append(StallWatch())
            if not self._proc.is_alive():
                raise BrokenPipeError(f"the second process {what} ended")
            if watches[0].stalled([self._proc.pid]):
                self._proc.kill()
                raise BrokenPipeError(f"the second process {what} was stopped, or used no CPU")

        self._conn.send_bytes(data, waiting)

    def _receive(self, what: str, progress: Callable[[int], None] | None) -> Any:
        from kvprobe.run.stall import StallWatch

        watch = StallWatch()  # while this process waits, the helper works: stopped or idle, it is stuck
        while not self._conn.poll(0.1):
            if progress is not None:
                self.report(progress)
            if not self._proc.is_alive() and not self._conn.poll(0):
                raise RuntimeError(self._ended(what))
            if watch.stalled([self._proc.pid]):
                self._proc.kill()
                raise RuntimeError(f"{self._ended(what)}: it was stopped, or used no CPU for {watch.window:.0f} s "
                                   "($KVPROBE_STALL_S)")
        try:
            kind, payload = pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError):  # its end closed: it ended without a word (killed)
            raise RuntimeError(self._ended(what)) from None
        if progress is not None:
            self.report(progress)
        if kind == "crash":
            raise RuntimeError(f"{what} failed in a second process:\n{payload}")
        return payload

    def _ended(self, what: str) -> str:
        self._proc.join(1)
        code = self._proc.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return f"the second process {what} ended ({how})"

    def close(self) -> None:
        """End the helper (asked, then killed after a second: a stopped process never acts on SIGTERM, and
        joining it without a limit waited for ever) and close what this process holds of it."""
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(CLOSE_GRACE_S)
            if self._proc.is_alive():
                self._proc.kill()
        self._proc.join()
        self._release()

    def dismiss(self) -> None:
        """End a helper whose work is all done, without waiting for its end (`close` waited ~13 ms at the end
        of a 315-request fleet's report, polling while the process went): killed (it holds nothing to save),
        and reaped by the next `reap_dismissed`, at the latest when this process exits."""
        self._proc.kill()
        _dismissed.append(self._proc)
        self._release()

    def _release(self) -> None:
        self._conn.close()
        if self._scratch is not None:
            os.close(self._scratch)
            self._scratch = None


_dismissed: list[Any] = []  # helpers killed and not reaped yet (`Helper.dismiss`)


def reap_dismissed(wait: bool = False) -> None:
    """Reap the dismissed helpers that have ended (all of them, waiting, with `wait`)."""
    for proc in list(_dismissed):
        if wait:
            proc.join()
        if wait or not proc.is_alive():  # (is_alive reaps one that has ended)
            _dismissed.remove(proc)


atexit.register(reap_dismissed, True)  # (a process that leaves by os._exit leaves them to the system)


class _SharedInt:
    """An integer both processes see (one writes it), in memory shared across a fork: ctx.Value would cost
    ~7 ms of imports (ctypes, tempfile) before the helper starts."""

    __slots__ = ("_view",)

    def __init__(self) -> None:
        import mmap

        self._view = memoryview(mmap.mmap(-1, 8)).cast("q")

    @property
    def value(self) -> int:
        return self._view[0]

    @value.setter
    def value(self, value: int) -> None:
        self._view[0] = value


def _scratch_file() -> int:
    """A file descriptor of an unnamed file, in memory where the system has such files."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("kvprobe-texts")
    import tempfile

    with tempfile.TemporaryFile() as fh:  # the descriptor is duplicated: the file lives on while it is open
        return os.dup(fh.fileno())


# ---------------------------------------------------------------- in the helper


def _main(conn: Any, parent_end: Any, done: Any, scratch: int | None, read: _SharedInt | None,
          guess_from: list[str], input_bytes: int) -> None:
    if parent_end is not None:  # forked: this process's copy of the other end closed, so that it sees the
        parent_end.close()      # channel end if the other process dies
        end_with_parent()
    from kvprobe.nesting import allow_deep_json

    allow_deep_json()  # a spawned helper starts with Python's default limit
    try:
        _preload(guess_from, input_bytes)
        try:
            _, jobs, counting = pickle.loads(conn.recv_bytes())
        except EOFError:  # never given work: the other process has ended
            return
        from kvprobe.analysis.split_piece import parse_parts

        if parse_parts(jobs, conn, done) and counting:
            _count_texts(conn, scratch, read)
    except (EOFError, BrokenPipeError, ConnectionResetError):  # the parent has ended: no one to tell
        return
    except BaseException:  # noqa: BLE001 - the parent reports it
        import traceback

        try:
            conn.send_bytes(pickle.dumps(("crash", traceback.format_exc())))
        except OSError:
            pass


def _preload(paths: list[str], input_bytes: int) -> None:
    """Load the tokenizer the first record of the first file will be counted with, before any text arrives
    (a wrong guess costs only this process's time: the right one loads at its first text); then import what
    reading and counting take, while the other process reads on.

    A record that names a provider other than OpenAI near its start (kvprobe traces write `provider` among their
    first keys) is counted with the estimate encoding: that one loads before anything else is imported here
    (this process is forked before the other has imported orjson: ~20 ms of imports off the load's path)."""
    from kvprobe.tokenizers import ESTIMATE_ENCODING, expect_input, load

    expect_input(input_bytes)
    try:
        named = _named_provider(paths[0]) if paths else None
        if named is not None and named != EXACT_PROVIDER:
            encoding: str | None = ESTIMATE_ENCODING
            load(encoding)
        else:
            encoding = _likely_encoding(paths[0]) if paths else None
    except Exception:  # noqa: BLE001 - a guess: whatever the first line holds, the parse reports it
        encoding = None
    if encoding is not None:
        from kvprobe.tokens import _encoding

        _encoding(encoding)  # (noted as loaded there: counts are made with it, not with the shipped tables)
    import kvprobe.analysis.split_piece  # noqa: F401 - what the work, once given, runs


def input_bytes(paths: list[Path]) -> int:
    """The bytes of the files a report reads, which choose its tokenizer (`tokenizers.expect_input`): the same
    figure in the report's process and in its helper."""
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:  # gone meanwhile: the parse reports it
            pass
    return total


_PROVIDER_KEY = (b'"provider":"', b'"provider": "')
_PEEK_HEAD = 4096  # where a kvprobe trace record names its provider


def _named_provider(path: str) -> str | None:
    """The provider the file's first record names in its first few KB, read as bytes (nothing imported to parse
    it); None where it names none there."""
    with open(path, "rb") as fh:
        head = fh.read(_PEEK_HEAD)
    for key in _PROVIDER_KEY:
        at = head.find(key)
        if at >= 0:
            start = at + len(key)
            end = head.find(b'"', start)
            return head[start:end].decode("ascii", "replace") if end > start else None
    return None


def _likely_encoding(path: str) -> str | None:
    import orjson

    from kvprobe.catalog import rules_for
    from kvprobe.errors import InputError
    from kvprobe.tokens import TokenCounter
    from kvprobe.trace.reader import record_from_json

    try:
        with open(path, "rb") as fh:
            line = fh.readline(_PEEK_BYTES)
        rec = record_from_json(orjson.loads(line))
    except (OSError, ValueError, InputError):  # unreadable, blank, cut at the peek's length, or not a record
        return None
    model = rec.request.get("model") if rec.request else None
    return TokenCounter(rules_for(rec.provider or "anthropic", model if isinstance(model, str) else None)).encoding


def _count_texts(conn: Any, scratch: int | None, read: _SharedInt | None) -> None:
    from kvprobe.tokens import count_block_text

    counts: dict[int, int] = {}
    while True:
        message = pickle.loads(conn.recv_bytes())
        if message[0] == "end":
            break
        assert read is not None
        batch = _read_at(scratch, message[1], message[2])
        read.value += len(batch)  # after the read: the file may be emptied once all is read
        for body, encoding, text, meta in pickle.loads(batch):
            counts[body] = count_block_text(text, meta, encoding)
    conn.send_bytes(pickle.dumps(("counts", counts), protocol=_PROTOCOL))
    _serve_counts(conn)


def _serve_counts(conn: Any) -> None:
    """After the parse: count the texts the other process asks for, until it closes the pipe or ends this
    process (split_parse.end_counting)."""
    from kvprobe.tokens import count_text

    while True:
        message = pickle.loads(conn.recv_bytes())  # EOFError at the other end's close: the caller returns
        if message[0] != "count":
            return
        counted = [count_text(text, message[2]) for text in message[1]]
        conn.send_bytes(pickle.dumps(("counted", counted), protocol=_PROTOCOL))


def _read_at(fd: int | None, offset: int, size: int) -> bytes:
    assert fd is not None
    parts = []
    while size:
        part = os.pread(fd, size, offset)
        if not part:
            raise EOFError(f"the texts to count end {size} bytes early")
        parts.append(part)
        offset, size = offset + len(part), size - len(part)
    return b"".join(parts)
