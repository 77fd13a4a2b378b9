"""SIGINT and SIGTERM in a command that runs children (torchelastic's rule): the handlers only raise
`Interrupted`, and the cleanup happens in one `finally` (supervisor.supervised), where the signals are
deferred so that a second Ctrl-C cannot cut it short. A command exits 128 + the signal (cli.py)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived; `signum` says which."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def install_signal_handlers() -> Callable[[], None]:
    """Make SIGINT/SIGTERM raise Interrupted in the main thread; returns a function restoring the old ones."""

    def handler(signum, frame):
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    return lambda: [signal.signal(s, h) for s, h in old.items()]


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT/SIGTERM raise Interrupted anywhere inside the block (a whole command's life, so that every
    moment of it ends through its cleanup, never by the default action, whenever SIGTERM comes)."""
    restore = install_signal_handlers()
    try:
        yield
    finally:
        restore()


@contextlib.contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """SIGINT/SIGTERM are remembered, not raised, inside the block: cleanup that must finish (stopping the
    children, the final manifest) is not cut short by a second Ctrl-C. Yields the signals received."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield received
        return
    old = {
        s: signal.signal(s, lambda signum, frame: received.append(signum))
        for s in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield received
    finally:
        for s, h in old.items():
            signal.signal(s, h)
