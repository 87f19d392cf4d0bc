import sys

try:  # Ctrl-C while the CLI's modules load is a clean stop too (exit 130, as in a command)
    from kvprobe.interrupts import forget_caught_interrupts
    from kvprobe.cli import entry
except BaseException as exc:
    from kvprobe.interrupts import forget_caught_interrupts, interrupt_behind, say_interrupted

    if not interrupt_behind(exc):
        raise
    say_interrupted(exc)
    forget_caught_interrupts()
    sys.exit(130)

try:
    entry()
finally:
    forget_caught_interrupts()
