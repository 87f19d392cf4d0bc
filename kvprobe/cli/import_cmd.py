"""placeholder (being written)."""
from kvprobe.cli.common import fail


def import_() -> None:
    """Not ready yet."""
    fail("not implemented yet")
