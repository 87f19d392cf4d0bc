"""The executor seam's one interface, and the in-process backend every other is held to.

A stage hands the executor a plain, picklable, top-level function, the units to map it over, and optionally
one `shared` value every call reads (sent once per worker, never once per unit): `fn(shared, unit)`. The
results come back in unit order, whatever order they were computed in, so a report does not depend on which
backend ran it.

Failure costs time, not answers: a unit whose worker dies or stalls is run again (elsewhere, at last in the
caller); a unit that raises raises in the caller, the exception's notes naming the unit.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

Unit = Callable[[Any, Any], Any]  # fn(shared, unit) -> a small, picklable result


class Pending(Protocol):
    def results(self) -> list[Any]:
        """Every unit's result, in unit order (waits for them)."""

    def close(self) -> None:
        """Stop what still runs (an interrupted caller leaves no work behind)."""


class Executor(Protocol):
    name: str

    def start(self, fn: Unit, units: Sequence[Any], shared: Any = None) -> Pending:
        """Start mapping `fn` over `units` and return at once; the caller may work meanwhile."""


def named(exc: BaseException, index: int, units: Sequence[Any]) -> BaseException:
    """The exception with a note saying which unit raised it."""
    shown = repr(units[index])
    if len(shown) > 80:
        shown = shown[:77] + "..."
    exc.add_note(f"in unit {index} of {len(units)} ({shown})")
    return exc


def run_here(fn: Unit, units: Sequence[Any], indices: Sequence[int], shared: Any, into: list[Any]) -> None:
    """The given units computed in this process, into their places."""
    for i in indices:
        try:
            into[i] = fn(shared, units[i])
        except Exception as exc:
            raise named(exc, i, units)


class InProcess:
    """Every unit in the caller, in order, when its results are asked for: the reference the others equal."""

    name = "in-process"

    def start(self, fn: Unit, units: Sequence[Any], shared: Any = None) -> Pending:
        return _Later(fn, units, shared)


class _Later:
    def __init__(self, fn: Unit, units: Sequence[Any], shared: Any) -> None:
        self._fn, self._units, self._shared = fn, units, shared

    def results(self) -> list[Any]:
        out: list[Any] = [None] * len(self._units)
        run_here(self._fn, self._units, range(len(self._units)), self._shared, out)
        return out

    def close(self) -> None:
        pass
