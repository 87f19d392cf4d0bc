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
