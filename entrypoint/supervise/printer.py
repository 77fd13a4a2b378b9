"""The console of a command that runs children (honcho's Printer): the entrypoint's own lines as
`grpo-rig | ...`, each child's as `<role> | ...` (those that console.Console lets through), one lock for both,
and a heartbeat when it has been quiet."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from entrypoint.supervise.console import HEARTBEAT_SECONDS


class Printer:
    """The console: `say` for the entrypoint's own lines, `line` for a child's, one lock for both."""

    def __init__(
        self, console: TextIO | None = None, shown=None, clock: Callable[[], float] = time.monotonic
    ):
        self.console = console if console is not None else sys.stdout  # the command's, redact.Scrubbing
        self._lock = threading.Lock()
        self.shown = shown  # console.Console: which child lines reach the console; None: all of them
        self.clock = clock
        self.last_write = clock()

    @staticmethod
    def prefix(role: str) -> str:
        return f"{role:>8} | "

    def say(self, text: str) -> None:
        self._write(f"grpo-rig | {text}")

    def line(self, role: str, text: str) -> None:
        if self.shown is not None:
            text = self.shown.shown(role, text)
            if text is None:
                return
        self._write(self.prefix(role) + text)

    def stalled(self) -> str:
        """Why the run counts as stalled, '' while it does not (console.Console.stalled)."""
        return self.shown.stalled() if self.shown is not None and hasattr(self.shown, "stalled") else ""

    def tick(self) -> None:
        """A heartbeat line when the console has been quiet for a while (console.HEARTBEAT_SECONDS)."""
        if self.shown is not None and self.clock() - self.last_write >= HEARTBEAT_SECONDS:
            self.say(self.shown.heartbeat())

    def _write(self, text: str) -> None:
        with self._lock:
            self.console.write(text + "\n")
            self.console.flush()
            self.last_write = self.clock()
