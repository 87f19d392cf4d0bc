"""A Ctrl-C ends every command the same way (exit 130, one line), however Python delivers it.

This module imports only `sys`: `python -m kvprobe` uses it before the command line has loaded.
"""
from __future__ import annotations

import sys

_CHAIN_LIMIT = 32  # causes followed at most (a chain can loop through __context__)


def interrupt_behind(exc: BaseException | None) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt `exc` is or was raised because of, if any: Python 3.11 wraps an interrupt that
    lands while a class names its attributes (dataclasses' fields) in RuntimeError("Error calling
    __set_name__ ..."), typer turns one into its Exit(130), and cleanup that fails while an interrupt unwinds
    has it as its context."""
    for _ in range(_CHAIN_LIMIT):
        if exc is None or isinstance(exc, KeyboardInterrupt):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def say_interrupted(exc: BaseException | None) -> None:
    """The one line a Ctrl-C prints, once however many layers see its interrupt (`exc`, or what it caused);
    plain, not through rich: the interrupt may have landed in one of rich's imports and left it broken."""
    interrupt = interrupt_behind(exc)
    if interrupt is not None:
        if getattr(interrupt, "kvprobe_told", False):
            return
        interrupt.kvprobe_told = True  # type: ignore[attr-defined]
    try:
        sys.stderr.write("interrupted\n")
    except (OSError, ValueError):  # no stderr to write to: the exit code says it
        pass


def forget_caught_interrupts() -> None:
    """CPython (3.8-3.13) marks a KeyboardInterrupt that ends code compiled from a string (what dataclasses,
    typer and namedtuple run to build a class) as unhandled even when a caller catches it; under `python -m`
    the interpreter then ends itself by SIGINT (exit -2) after kvprobe chose its exit code. Running any such
    code clears the mark; an interrupt that does leave `python -m kvprobe` sets it again."""
    exec("", {})  # noqa: S102 - an empty program, for its side effect on the interpreter's mark


def import_whole(name: str) -> None:
    """Import `name` with Ctrl-C held back until it has loaded (then raised as usual). orjson's initialization
    assumes its own imports succeed: an interrupt raised inside one (uuid, dataclasses) crashed the process
    (SIGSEGV, no message; ijl/orjson#310), seen in 1 of ~50 Ctrl-Cs in a report's first 0.2 s."""
    import importlib
    import signal

    if name in sys.modules:
        return
    try:
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except (AttributeError, ValueError, OSError):  # no such call here, or not the main thread
        importlib.import_module(name)
        return
    try:
        importlib.import_module(name)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def raise_swallowed_interrupts() -> None:
    """A Ctrl-C that lands in a finalizer or a weakref callback (importlib's module locks have one) is printed
    as "Exception ignored" and lost, and the command ran on to its end: from now on it is raised again in the
    code that runs next, as if the key were pressed once more. Installed once per process (`main` may run
    more than once in one, as in tests)."""
    previous = sys.unraisablehook
    if getattr(previous, "raises_interrupts", False):
        return

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            import _thread

            # from another thread: called here, the interrupt would be raised in this hook, and lost again
            try:
                _thread.start_new_thread(_thread.interrupt_main, ())
            except RuntimeError:  # the interpreter is ending: nothing runs on that the interrupt could stop
                pass
            return
        previous(unraisable)

    hook.raises_interrupts = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook
