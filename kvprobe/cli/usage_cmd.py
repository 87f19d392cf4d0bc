"""placeholder (being written)."""
from kvprobe.cli.common import fail


def usage() -> None:
    """Not ready yet."""
    fail("not implemented yet")
