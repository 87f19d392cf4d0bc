"""The methods `dataclasses` writes for each class, compiled once and kept between runs.

`dataclasses` makes a class's `__init__`, `__repr__`, `__eq__` (and a frozen class's `__setattr__` and
`__delattr__`) by writing their source and passing it to `exec`: a report's ~80 classes are ~300 compiles,
~28 ms of the ~40 ms their definitions take, a sixth of a small report's run. `install` gives the module an
`exec` of its own (a module's globals are looked up before the builtins) that compiles each source once and
keeps the code in the user's cache (kvprobe.user_cache), one marshal file per Python build, as Python keeps a
module's code in `__pycache__`. The code is what `exec` compiles from the same text, with the same flags (none
inherited), so the classes are the same; only the compiling is skipped. A cache that is missing, damaged, from
another Python or unwritable only costs the compiling; `$KVPROBE_CACHE_DIR` moves it like every other.
"""
from __future__ import annotations

import builtins
import marshal
import sys

from kvprobe import user_cache

FORMAT = 1  # raised when what is kept changes
MAX_KEPT = 4096  # sources kept at most (kvprobe and what it imports define a few hundred)

_code: dict[str, object] | None = None  # read at the first class made: a command that makes none reads nothing
_new = 0
_module_globals: list[dict] = []  # dataclasses' own globals: where its `exec` without globals would run


def install() -> None:
    """From now on, classes `dataclasses` makes in this process compile their methods once across runs."""
    import dataclasses

    if getattr(dataclasses, "exec", None) is _exec:
        return
    _module_globals[:] = [vars(dataclasses)]
    dataclasses.exec = _exec  # type: ignore[attr-defined]  # (the module's own lookups find it first)
    import atexit

    atexit.register(keep)


def _exec(source: object, globals: dict | None = None, locals: dict | None = None) -> None:  # noqa: A002
    global _code, _new
    if isinstance(source, str):
        if _code is None:
            _code = _read()
        code = _code.get(source)
        if code is None:
            code = _code[source] = compile(source, "<string>", "exec", dont_inherit=True)
            _new += 1
        source = code
    # (dataclasses' own generated source, run as its `exec` would run it)
    builtins.exec(source, _module_globals[0] if globals is None else globals, locals)  # noqa: S102


def _path():  # noqa: ANN202
    tag = f"{sys.implementation.cache_tag}-{sys.hexversion:08x}"
    return user_cache.folder() / f"dataclass-code-{tag}.marshal"


def _read() -> dict[str, object]:
    try:
        fmt, version, kept = marshal.loads(_path().read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if fmt != FORMAT or version != sys.version or not isinstance(kept, dict):
        return {}
    return kept


def keep() -> None:
    """Write the kept code where this process compiled any; run at exit (a forked child ends without it), and
    by the command line before it ends a fast path at once (`cli.entry`)."""
    if not _new or _code is None or len(_code) > MAX_KEPT:
        return
    try:
        data = marshal.dumps((FORMAT, sys.version, _code))
    except ValueError:  # an object marshal cannot write (none expected): nothing is kept
        return
    user_cache.write(_path(), data, 0o600)
