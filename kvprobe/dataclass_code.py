"""The methods `dataclasses` writes for each class, compiled once and kept between runs.

`dataclasses` makes a class's `__init__`, `__repr__`, `__eq__` (and a frozen class's `__setattr__` and
`__delattr__`) by writing their source and passing it to `exec`: a report's ~80 classes are ~300 compiles,
~28 ms of the ~40 ms their definitions take, a sixth of a small report's run. `install` gives the module an
`exec` of its own (a module's globals are looked up before the builtins) that compiles each source once and
keeps the code in the user's cache (kvprobe.user_cache), one marshal file per Python build, as Python keeps a
module's code in `__pycache__`. The code is what `exec` compiles from the same text, with the same flags (none
inherited), so the classes are the same; only the compiling is skipped. A cache that is missing, damaged, from
another Python or unwritable only costs the compiling; `$KVPROBE_CACHE_DIR` moves it like every other.

The file holds one entry per module that made classes (the module whose globals the methods get), each marshalled
on its own: a run unpacks only the modules it imports (every command's classes together are ~1,100 methods,
1.2 MB; a report's ~300), and a module whose classes compiled anything new is written again with exactly the
methods its import made this run, so an edited class leaves nothing stale behind.
"""
from __future__ import annotations

import builtins
import marshal
import sys

from kvprobe import user_cache

FORMAT = 2  # raised when what is kept changes

_packed: dict[str, bytes] | None = None  # module -> its methods' code, marshalled; read at the first class made
_unpacked: dict[str, dict[str, object]] = {}  # module -> source -> code, as kept
_made: dict[str, dict[str, object]] = {}  # module -> source -> code, made in this process
_changed: set[str] = set()  # modules whose classes compiled something not kept
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


def compiled() -> int:
    """Methods compiled in this process (not found kept)."""
    return sum(len(made) - len(made.keys() & _kept(module).keys()) for module, made in _made.items())


def _exec(source: object, globals: dict | None = None, locals: dict | None = None) -> None:  # noqa: A002
    if globals is None:
        globals = _module_globals[0]  # noqa: A001
    if isinstance(source, str):
        module = str(globals.get("__name__", ""))
        code = _kept(module).get(source)
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)
            _changed.add(module)
        _made.setdefault(module, {})[source] = code
        source = code
    builtins.exec(source, globals, locals)  # noqa: S102 - dataclasses' own generated source, as its exec runs it


def _kept(module: str) -> dict[str, object]:
    global _packed
    found = _unpacked.get(module)
    if found is None:
        if _packed is None:
            _packed = _read()
        try:
            found = marshal.loads(_packed[module]) if module in _packed else {}
        except (ValueError, EOFError, TypeError):
            found = {}
        _unpacked[module] = found if isinstance(found, dict) else {}
    return _unpacked[module]


def _path():  # noqa: ANN202
    tag = f"{sys.implementation.cache_tag}-{sys.hexversion:08x}"
    return user_cache.folder() / f"dataclass-code-{tag}.marshal"


def _read() -> dict[str, bytes]:
    try:
        fmt, version, packed = marshal.loads(_path().read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if fmt != FORMAT or version != sys.version or not isinstance(packed, dict):
        return {}
    return packed


def keep() -> None:
    """Write the modules whose classes compiled something new; run at exit (a forked child ends without it), and
    by the command line before it ends a fast path at once (`cli.entry`)."""
    if not _changed:
        return
    packed = dict(_read())  # (as it is now: another run may have kept other modules meanwhile)
    try:
        for module in _changed:
            packed[module] = marshal.dumps(_made[module])
        data = marshal.dumps((FORMAT, sys.version, packed))
    except ValueError:  # an object marshal cannot write (none expected): nothing is kept
        return
    _changed.clear()
    user_cache.write(_path(), data, 0o600)
