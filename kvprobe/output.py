"""The one convention for files kvprobe writes (traces, baselines, HTML, charts, probe logs).

* `check_output` refuses, before any work is done, an output that is a folder, sits in a missing folder,
  is one of the command's inputs (`baseline t.jsonl -o t.jsonl` would destroy the trace), or already
  exists unless the user said `--force`.
* `atomic_output` writes through a temp file in the target's folder and renames it over the target only
  when everything was written: a reader never sees half a file, a failure keeps the old one. The temp file
  is removed on every exit path: an exception, Ctrl-C, SIGTERM (turned into SystemExit while writing), and
  even SIGKILL, whose leftovers carry the dead writer's pid and are removed by the next write to the same
  target.
* A target that is a character device or a named pipe (`-o /dev/null`, `-o /dev/stdout`, a FIFO a reader
  waits on) is written in place and never replaced: renaming a file over it would put a regular file where
  the system's node was. Nothing is replaced, so it needs no `--force`. Block devices and sockets are refused.
"""
from __future__ import annotations

import contextlib
import os
import signal
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from kvprobe.errors import InputError

TYPE_CHECKING = False  # true for type checkers only: typing is not imported at run time (start-up)
if TYPE_CHECKING:
    from typing import BinaryIO

_TEMP_TAG = ".kvprobe-"  # .{name}.kvprobe-{pid}-{random}.tmp


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return a.resolve() == b.resolve()


def written_in_place(path: str | Path) -> bool:
    """A character device or a named pipe: written as it is, never replaced (see the module doc)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _refuse_special(path: Path, field: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        kind = "a block device" if stat.S_ISBLK(mode) else "a socket"
        raise InputError(f"is {kind}; expected a file name", file=str(path), field=field)


def check_output(path: str | Path, inputs: Iterable[str | Path] = (), *, force: bool = False,
                 field: str = "--output") -> Path:
    """Validate where a command will write; InputError (exit 2) before anything is read or written."""
    path = Path(path)
    if path.is_dir():
        raise InputError("is a folder; expected a file name", file=str(path), field=field)
    _refuse_special(path, field)
    if written_in_place(path):
        return path
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError("its folder does not exist", file=str(path), field=field)
    if not os.access(folder, os.W_OK | os.X_OK):  # said now, not after all the work (nor naming the temp file)
        raise InputError(f"cannot write in its folder ({folder}): permission denied", file=str(path), field=field)
    for source in inputs:
        source = Path(source)
        if source.exists() and _same_file(path, source):
            raise InputError(f"is also an input ({source}); write to another file", file=str(path), field=field)
    if path.exists() and not force:
        raise InputError("already exists; pass --force to replace it", file=str(path), field=field)
    return path


def temp_name(path: Path) -> Path:
    """Where `path`'s content is written until it is complete: beside it, named after it and this process."""
    # (os.urandom, as secrets.token_hex reads it: importing secrets loads hmac, random and more, ~5 ms of a
    # run whose only write is a cache file)
    folder = path.parent if str(path.parent) else Path(".")
    return folder / f".{path.name}{_TEMP_TAG}{os.getpid()}-{os.urandom(4).hex()}.tmp"


def remove_stale_temps(path: Path) -> None:
    """Temp files of this target left by writers that were killed (SIGKILL, power loss); a temp database's
    write-ahead log (.tmp.wal) too."""
    prefix = f".{path.name}{_TEMP_TAG}"
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent if str(path.parent) else "."):
            if not (entry.name.startswith(prefix) and entry.name.endswith((".tmp", ".tmp.wal"))):
                continue
            pid = entry.name[len(prefix):].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """While writing, SIGTERM unwinds the stack (so the temp file is removed) instead of killing outright."""
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):  # someone else handles SIGTERM: leave theirs alone
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)
    try:
        signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread, the only one that may set a handler (threading not imported)
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def atomic_output(path: str | Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """A binary file handle whose content replaces `path` only if the block completes."""
    path = Path(path)
    if written_in_place(path):  # a device or a pipe: never renamed over (nothing to roll back either)
        with os.fdopen(os.open(path, os.O_WRONLY), "wb") as fh:
            yield fh
        return
    remove_stale_temps(path)
    tmp = temp_name(path)
    with sigterm_raises():
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            except OSError as exc:  # the target is what the user named; the temp file is ours
                raise InputError(f"cannot write it: {exc.strerror or exc}", file=str(path), field="--output") \
                    from None
            with os.fdopen(fd, "wb") as fh:
                yield fh
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def write_bytes_atomic(path: str | Path, data: bytes, mode: int = 0o644) -> None:
    """Write a whole file atomically (see `atomic_output`)."""
    with atomic_output(path, mode) as fh:
        fh.write(data)


def check_append_output(path: str | Path, inputs: Iterable[str | Path] = (), *, force: bool = False,
                        append: bool = False, field: str = "--output") -> Path:
    """For writers that stream records as they happen (capture, serve): a new file, `--force` to replace an
    existing one, or `--append` to add to an existing trace, which must end with a whole line."""
    path = Path(path)
    if written_in_place(path):  # appended to as it is (opening a device or pipe replaces nothing)
        return check_output(path, inputs, force=True, field=field)
    if not (append and path.exists()):
        if path.exists() and not force:
            check_output(path, inputs, force=True, field=field)
            raise InputError("already exists; pass --append to add to it or --force to replace it",
                             file=str(path), field=field)
        return check_output(path, inputs, force=force, field=field)
    check_output(path, inputs, force=True, field=field)
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell():
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                raise InputError("does not end with a whole line (cut short?); cannot append to it",
                                 file=str(path), field=field)
    return path
