"""The channel and child the report's helper is forked with (kvprobe.forked.Channel, Child): messages of any
size arrive whole and in order both ways, a closed end reads as EOFError and writes as BrokenPipeError, and the
child's end is told as multiprocessing tells it (exit code, minus the signal)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from kvprobe.forked import Channel, Child

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the system does not fork")


def _echo(channel: Channel, other: Channel) -> None:
    other.close()
    while True:
        try:
            message = channel.recv_bytes()
        except EOFError:
            return
        channel.send_bytes(bytes(reversed(message)))


def test_messages_of_any_size_go_both_ways_whole_and_in_order():
    mine, theirs = Channel.pair()
    child = Child(_echo, theirs, mine)
    theirs.close()
    sent = [b"", b"x", os.urandom(65_537), os.urandom(5_000_000), b"last"]  # one over a pipe's buffer, one far over
    for message in sent:
        mine.send_bytes(message)
        assert mine.poll(10)
        assert bytes(mine.recv_bytes()) == message[::-1]
    assert not mine.poll(0.05)  # nothing more waits
    mine.close()
    child.join(10)
    assert child.exitcode == 0 and not child.is_alive()


def test_a_closed_end_is_eof_to_read_and_a_broken_pipe_to_write():
    mine, theirs = Channel.pair()
    theirs.close()
    assert mine.poll(0)  # the end's close is there to read
    with pytest.raises(EOFError):
        mine.recv_bytes()
    with pytest.raises(BrokenPipeError):
        mine.send_bytes(b"anyone?")
    mine.close()


def _raise() -> None:
    raise ValueError("in the child")


def test_the_childs_end_is_told_as_multiprocessing_tells_it():
    assert _ended(Child(time.sleep, 0)) == 0
    assert _ended(Child(_raise)) == 1
    sleeper = Child(time.sleep, 30)
    assert sleeper.is_alive() and sleeper.exitcode is None
    sleeper.terminate()
    sleeper.join(10)
    assert sleeper.exitcode == -signal.SIGTERM
    killed = Child(time.sleep, 30)
    killed.kill()
    killed.join()
    assert killed.exitcode == -signal.SIGKILL
    killed.terminate()  # ended and reaped: nothing to signal, no error


def _ended(child: Child) -> int | None:
    child.join(10)
    return child.exitcode


def test_a_writer_whose_reader_takes_nothing_is_told_while_it_waits():
    """A message larger than the pipe holds, to a reader that reads nothing (a stopped helper): the writer's
    `waiting` is called every 0.1 s, and what it raises ends the write."""
    mine, theirs = Channel.pair()
    calls = []

    def waiting() -> None:
        calls.append(time.monotonic())
        if len(calls) == 3:
            raise BrokenPipeError("the reader is stopped")

    start = time.monotonic()
    with pytest.raises(BrokenPipeError, match="stopped"):
        mine.send_bytes(os.urandom(3 << 20), waiting)
    assert len(calls) == 3 and 0.25 < time.monotonic() - start < 5
    mine.close()
    theirs.close()
