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
methods its import made this run, so an edited class leaves nothing stale behind. Each entry carries a checksum
of its bytes: a damaged one is compiled again and written anew. The file is read only where it is the user's own
and no one else can write it.
"""
from __future__ import annotations

import builtins
import marshal
import os
import sys
import zlib
from types import CodeType

from kvprobe import user_cache

FORMAT = 3  # raised when what is kept changes

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
    if not isinstance(source, str):
        builtins.exec(source, globals, locals)  # noqa: S102
        return
    module = str(globals.get("__name__", ""))
    code = _kept(module).get(source)
    if code is not None:
        try:
            builtins.exec(code, globals, locals)  # noqa: S102 - dataclasses' own generated source, compiled before
        except Exception:  # noqa: BLE001 - kept code that does not run as its source does: compiled again
            code = None
        else:
            _made.setdefault(module, {})[source] = code
            return
    code = compile(source, "<string>", "exec", dont_inherit=True)
    _changed.add(module)
    _made.setdefault(module, {})[source] = code
    builtins.exec(code, globals, locals)  # noqa: S102 - as dataclasses' own `exec` runs its source


def _kept(module: str) -> dict[str, object]:
    """The module's kept code by source; {} where there is none, or its entry is damaged (its checksum differs,
    it does not unmarshal, or it holds anything but code objects by their source)."""
    global _packed
    found = _unpacked.get(module)
    if found is None:
        if _packed is None:
            _packed = _read()
        found = _unpack(_packed.get(module))
        _unpacked[module] = found
    return found


def _unpack(entry: object) -> dict[str, object]:
    if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], bytes)):
        return {}
    checksum, data = entry
    if checksum != zlib.crc32(data):
        return {}
    try:
        found = marshal.loads(data)
    except Exception:  # noqa: BLE001 - marshal raises ValueError, EOFError, TypeError or SystemError on bad data
        return {}
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, CodeType)
                                              for k, v in found.items()):
        return {}
    return found


def _path():  # noqa: ANN202 - the cache file's Path; RuntimeError where no home folder can be found
    tag = f"{sys.implementation.cache_tag}-{sys.hexversion:08x}"
    return user_cache.folder() / f"dataclass-code-{tag}.marshal"


def _read() -> dict[str, object]:
    """The file's entries by module, where it is this user's own and no one else can write it (the code in it is
    run, as `__pycache__`'s is); {} otherwise."""
    try:
        with open(_path(), "rb") as fh:
            if not _trusted(os.fstat(fh.fileno())):
                return {}
            fmt, version, packed = marshal.loads(fh.read())
    except Exception:  # noqa: BLE001 - no home, no file, or a damaged one: nothing kept
        return {}
    if fmt != FORMAT or version != sys.version or not isinstance(packed, dict):
        return {}
    return packed


def _trusted(stat: os.stat_result) -> bool:
    getuid = getattr(os, "getuid", None)
    return getuid is None or (stat.st_uid == getuid() and not stat.st_mode & 0o022)


def keep() -> None:
    """Write the modules whose classes compiled something new; run at exit (a forked child ends without it), and
    by the command line before it ends a fast path at once (`cli.entry`)."""
    if not _changed:
        return
    packed = dict(_read())  # (as it is now: another run may have kept other modules meanwhile)
    try:
        for module in _changed:
            data = marshal.dumps(_made[module])
            packed[module] = (zlib.crc32(data), data)
        data = marshal.dumps((FORMAT, sys.version, packed))
        path = _path()
    except (ValueError, RuntimeError):  # an object marshal cannot write (none expected), or no home folder
        return
    _changed.clear()
    user_cache.write(path, data, 0o600)
