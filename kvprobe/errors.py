"""Domain errors. Library code raises these; the CLI turns them into clean messages and exit codes."""
from __future__ import annotations


class KvprobeError(Exception):
    """Base class for every error kvprobe reports to a user."""

    exit_code = 2


class InputError(KvprobeError):
    """Bad input: names the file, the line and the field, and what was expected."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.file, self.line, self.field, self.message = file, line, field, message
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "")
        if self.field:
            where = f"{where} field '{self.field}'" if where else f"field '{self.field}'"
        return f"{where}: {self.message}" if where else self.message


class CatalogError(KvprobeError):
    """A provider rules file is invalid."""


class UndecidableError(KvprobeError):
    """kvprobe cannot decide (e.g. a gate on a trace without usage)."""

    exit_code = 3


def not_a_file(path: object, what: str = "file") -> InputError:
    """The error for an input that is not a regular file, saying what it is instead (a FIFO exists)."""
    import os
    import stat

    try:
        mode = os.stat(str(path)).st_mode
    except FileNotFoundError:
        return InputError(f"{what} does not exist", file=str(path))
    except OSError as exc:
        return InputError(f"cannot read it: {exc.strerror or exc}", file=str(path))
    if stat.S_ISDIR(mode):
        return InputError(f"is a folder; expected a {what}", file=str(path))
    if stat.S_ISFIFO(mode):
        return InputError(f"is a named pipe (FIFO), not a {what}: kvprobe reads its inputs more than once; save "
                          "it to a file first", file=str(path))
    kind = "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) \
        else "not a regular file"
    return InputError(f"is {kind}, not a {what}", file=str(path))
