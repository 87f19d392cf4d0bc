"""Classes made while the methods' code is kept between runs (kvprobe.dataclass_code) behave as `dataclasses`
makes them, the second run compiles none of their methods, and a damaged cache only costs the compiling."""
from __future__ import annotations

import json
import marshal
import random
import subprocess
import sys

from conftest import ROOT

# Every kind of method dataclasses writes: __init__ with defaults, factories, kw-only fields, InitVar and
# __post_init__, init=False fields; __repr__; __eq__ and ordering; __hash__; a frozen class's __setattr__ and
# __delattr__; slots. What each does is printed, as a user of the classes would see it.
CLASSES = '''
import dataclasses as dc
from dataclasses import dataclass, field, InitVar

@dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 2

@dataclass(order=True)
class Job:
    priority: int
    name: str = field(compare=False)
    tags: list = field(default_factory=list)
    done: bool = field(default=False, init=False)

@dataclass(kw_only=True, unsafe_hash=True)
class Limits:
    tokens: int
    seconds: float = 300.0

@dataclass
class Scaled:
    raw: InitVar[int]
    ratio: float = 1.5
    value: float = field(init=False)

    def __post_init__(self, raw):
        self.value = raw * self.ratio

seen = []
p = Point(1)
seen.append(repr(p))
seen.append(p == Point(1, 2))
seen.append(hash(p) == hash(Point(1, 2)))
try:
    p.x = 5
except dc.FrozenInstanceError as exc:
    seen.append("frozen: " + str(exc))
try:
    del p.y
except dc.FrozenInstanceError as exc:
    seen.append("frozen: " + str(exc))
seen.append(hasattr(p, "__dict__"))
jobs = sorted([Job(3, "c"), Job(1, "a", ["x"]), Job(2, "b")])
seen.append([repr(j) for j in jobs])
seen.append(Job(1, "a") == Job(1, "z"))
seen.append(repr(Limits(tokens=4096)))
seen.append(hash(Limits(tokens=1)) == hash(Limits(tokens=1)))
try:
    Limits(4096)
except TypeError as exc:
    seen.append("kw_only: " + str(exc))
seen.append(repr(Scaled(4)))
seen.append(str(Point.__init__.__annotations__))
'''

_RUN = ("import json, sys\n"
        "if len(sys.argv) > 2:  # no home folder to find\n"
        "    import pathlib\n"
        "    def home(cls):\n"
        "        raise RuntimeError('Could not determine home directory')\n"
        "    pathlib.Path.home = classmethod(home)\n"
        "if sys.argv[1] == 'kept':\n"
        "    from kvprobe import dataclass_code\n"
        "    dataclass_code.install()\n"
        "exec(compile(sys.stdin.read(), 'classes', 'exec'))\n"
        "new = dataclass_code.compiled() if sys.argv[1] == 'kept' else None\n"
        "print(json.dumps({'seen': seen, 'compiled': new}))\n")


def _classes(way: str, cache, homeless: bool = False) -> dict:
    env = {"PATH": "/usr/bin:/bin"} if homeless else {"PATH": "/usr/bin:/bin", "KVPROBE_CACHE_DIR": str(cache)}
    run = subprocess.run([sys.executable, "-c", _RUN, way, *(["homeless"] if homeless else [])], input=CLASSES,
                         capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return json.loads(run.stdout)


def test_classes_behave_the_same_and_the_second_run_compiles_nothing(tmp_path):
    plain = _classes("plain", tmp_path)
    first = _classes("kept", tmp_path)
    kept = list(tmp_path.glob("dataclass-code-*.marshal"))
    second = _classes("kept", tmp_path)
    assert first["seen"] == second["seen"] == plain["seen"]
    assert plain["seen"][:6] == ["Point(x=1, y=2)", True, True, "frozen: cannot assign to field 'x'",
                                 "frozen: cannot delete field 'y'", False]
    assert "Scaled(ratio=1.5, value=6.0)" in plain["seen"]
    # 4 classes: __init__, __repr__, __eq__ each; __setattr__, __delattr__, __hash__ of Point; Job's 4 orderings;
    # Limits' __hash__
    assert first["compiled"] == 3 * 4 + 3 + 4 + 1
    assert len(kept) == 1 and second["compiled"] == 0


def test_a_damaged_cache_only_costs_the_compiling(tmp_path):
    """Cut short, replaced, one to three bytes changed anywhere (which unmarshalled as they were could crash the
    interpreter), an entry that holds no code: the classes are the same, compiled again, and the file mended."""
    plain = _classes("plain", tmp_path)
    _classes("kept", tmp_path)
    (kept,) = tmp_path.glob("dataclass-code-*.marshal")
    whole = kept.read_bytes()
    rng = random.Random(63)
    damaged = [b"", b"\x00garbage", whole[:100]]
    for _ in range(12):
        data = bytearray(whole)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(200, len(data))] ^= rng.randint(1, 255)  # past the header: inside an entry
        damaged.append(bytes(data))
    fmt, version, packed = marshal.loads(whole)
    damaged.append(marshal.dumps((fmt, version, {module: 0 for module in packed})))
    for damage in damaged:
        kept.write_bytes(damage)
        again = _classes("kept", tmp_path)
        assert again["seen"] == plain["seen"] and again["compiled"] in (20, 0)
        if damage in damaged[:3] or damage == damaged[-1]:
            assert again["compiled"] == 20
        assert _classes("kept", tmp_path)["compiled"] == 0  # written again, whole


def test_a_cache_file_others_can_write_is_not_read(tmp_path):
    _classes("kept", tmp_path)
    (kept,) = tmp_path.glob("dataclass-code-*.marshal")
    kept.chmod(0o666)
    assert _classes("kept", tmp_path)["compiled"] == 20


def test_no_home_folder_is_no_error(tmp_path):
    """Where no home folder can be found (a user without one, HOME unset) nothing is kept: nothing fails."""
    assert _classes("kept", tmp_path, homeless=True)["seen"] == _classes("plain", tmp_path)["seen"]


def test_an_unwritable_cache_folder_is_no_error(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would be")
    assert _classes("kept", blocked / "cache")["seen"] == _classes("plain", tmp_path)["seen"]


def test_the_command_line_keeps_its_classes_code(tmp_path):
    """`kvprobe diff` twice: the first run writes the kept code, the second finds all it needs there."""
    env = {"PATH": "/usr/bin:/bin", "KVPROBE_CACHE_DIR": str(tmp_path)}
    args = [sys.executable, "-m", "kvprobe", "diff", str(ROOT / "examples" / "request_a.json"),
            str(ROOT / "examples" / "request_b.json"), "--json"]
    first = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    (kept,) = tmp_path.glob("dataclass-code-*.marshal")
    written = kept.stat().st_mtime_ns
    second = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert first.returncode == second.returncode == 0 and first.stdout == second.stdout
    assert json.loads(second.stdout)["first_change"]["token_position"] > 0
    assert kept.stat().st_mtime_ns == written  # nothing new compiled, nothing rewritten


_EDITED = ("import sys\nfrom kvprobe import dataclass_code\ndataclass_code.install()\n"
           "from dataclasses import dataclass\n"
           "exec(f'@dataclass(frozen=True)\\nclass Edited:\\n    field_{sys.argv[1]}: int = 1\\n',"
           " {'dataclass': dataclass, '__name__': 'edited'})\n")


def test_a_class_edited_again_and_again_leaves_nothing_stale(tmp_path):
    """A module's kept methods are the ones its classes made in the last run that compiled any: the file does not
    grow with every edit of a class."""
    env = {"PATH": "/usr/bin:/bin", "KVPROBE_CACHE_DIR": str(tmp_path)}
    sizes = []
    for edit in range(12):
        subprocess.run([sys.executable, "-c", _EDITED, str(edit)], check=True, cwd=ROOT, env=env, timeout=60)
        sizes.append(next(tmp_path.glob("dataclass-code-*.marshal")).stat().st_size)
    assert max(sizes) - min(sizes) < 100  # the same methods but for a field's name (field_9 -> field_10)
