"""When a run counts as stalled: the one policy, fed with the signs of progress one attempt shows.

A sign of progress is anything that says the trainer (or the merged export) moved on, with its time: a phase
event of this attempt (a rollout scored, a micro-batch trained, a weight sync, a start-up mark:
entrypoint/child/hooks/events.py), a step line, a checkpoint save starting, bytes written under the run's
training directory (a save of many GiB, the final checkpoint) or the export's output. Only this attempt's
signs count: the events file of a resumed run holds every earlier attempt's rows too (supervise/console.py
reads from where this attempt began).

The bound, in seconds without a sign of progress:
- STALL_TIMEOUT when the recipe sets it;
- otherwise STALL_FACTOR x what this run has shown, at least STALL_FLOOR_SECONDS: before its first sign after
  the watch is armed, the start-up's own length (from the command to "trainer ready": the first step holds
  the warm-up, the first generation, kernel and allocator caches); after it, the longest wait between two
  signs so far, the first one included (a step 1 of 979 s on a busy CPU is what the next step may take). The
  plan's predicted wait (Plan.step_seconds; x LOGGING_STEPS when the trainer's phase events are off, as the
  step lines then come only every LOGGING_STEPS steps) widens either.
Before the watch is armed nothing is bounded (a model download's length is unknown). The watchdogs upstream
wait 30 minutes (NCCL's, ms-swift's weight sync) or forever (a reward function that never returns).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

STALL_FLOOR_SECONDS = 600.0  # the automatic bound never goes below (the first steps warm caches up)
STALL_FACTOR = 10  # x the longest wait the run has shown: the automatic bound
PROBE_SECONDS = 10.0  # how often the bytes under a watched directory are counted


class StallWatch:
    """Signs of progress in (`arm`, `progress`), the verdict out (`stalled`). Pure but for `clock` and the
    optional `probe` (a callable whose changing answer is a sign of progress: dir_bytes of a directory)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 0.0,
        predicted: float = 0.0,
        probe: Callable[[], object] | None = None,
    ):
        self.clock = clock
        self.timeout = timeout  # STALL_TIMEOUT, seconds; 0: automatic
        self.predicted = predicted  # the plan's predicted wait between two signs, seconds; 0 unknown
        self.probe = probe
        self.started = clock()
        self.armed_at: float | None = None
        self.last: float | None = None  # the newest sign of progress after arming
        self.signs = 0  # signs since arming
        self.longest = 0.0  # the longest wait between two signs, the first (from arming) included
        self._probed: object = None
        self._probe_at = -PROBE_SECONDS

    def arm(self, at: float | None = None) -> None:
        """The start-up is over (the trainer said "trainer ready", or its first step came): from now on a
        wait without progress is bounded. Arming twice keeps the first."""
        if self.armed_at is None:
            self.armed_at = self.last = self.clock() if at is None else at

    @property
    def armed(self) -> bool:
        return self.armed_at is not None

    def progress(self, at: float | None = None) -> None:
        """A sign of progress at `at` (this watch's clock; default now). Before arming it arms the watch."""
        at = self.clock() if at is None else at
        if self.last is None:
            self.arm(at)
            return
        if at <= self.last:
            return
        self.longest = max(self.longest, at - self.last)
        self.last = at
        self.signs += 1

    def _poll_probe(self) -> None:
        now = self.clock()
        if self.probe is None or not self.armed or now - self._probe_at < PROBE_SECONDS:
            return
        self._probe_at = now
        seen = self.probe()
        if self._probed is not None and seen != self._probed:
            self.progress(now)
        self._probed = seen

    def bound(self) -> tuple[float, str]:
        """(seconds without progress that count as stalled, the rule in words)."""
        if self.timeout:
            return self.timeout, f"STALL_TIMEOUT={self.timeout:g}"
        if self.signs == 0:
            basis, what = (self.armed_at or self.started) - self.started, "the start-up"
        else:
            basis, what = self.longest, "the longest wait between two signs of progress"
        if self.predicted > basis:
            basis, what = self.predicted, "the plan's predicted step"
        bound = max(STALL_FLOOR_SECONDS, STALL_FACTOR * basis)
        return bound, f"{STALL_FACTOR} x {what} ({basis:.0f} s), at least {STALL_FLOOR_SECONDS:.0f} s"

    def stalled(self) -> tuple[float, str] | None:
        """(seconds waited, the rule) once the wait since the last sign of progress reaches the bound; None
        while it does not, and before the watch is armed."""
        self._poll_probe()
        if self.last is None:
            return None
        bound, rule = self.bound()
        waited = self.clock() - self.last
        return (waited, rule) if waited >= bound else None


def dir_bytes(root: Path) -> Callable[[], tuple[int, int]]:
    """A probe for StallWatch: (files, bytes) under `root` (a checkpoint or an export being written grows it).
    A file that vanishes while counted is skipped; a missing root counts (0, 0)."""

    def count() -> tuple[int, int]:
        files = size = 0
        for folder, _, names in os.walk(root):
            for name in names:
                try:
                    size += os.stat(os.path.join(folder, name)).st_size
                except OSError:
                    continue
                files += 1
        return files, size

    return count
