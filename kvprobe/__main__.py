import sys

try:  # Ctrl-C while the CLI's modules load is a clean stop too (exit 130, as in a command)
    from kvprobe.cli import entry
except KeyboardInterrupt:
    sys.stderr.write("interrupted\n")
    sys.exit(130)

entry()
