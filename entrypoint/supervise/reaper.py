"""No child outlives the entrypoint, even one killed with SIGKILL.

The supervisor starts each child in a session of its own (so a Ctrl-C reaches the entrypoint first, which
then stops them in order: Supervisor.stop_all). But an entrypoint that dies without running stop_all (kill -9,
the kernel's OOM killer choosing it) left its trainer running under PID 1: seen on 2026-12-03, the orphan
went on for minutes, wrote a `global_step 2` row into the next attempt's logging.jsonl and overwrote a
checkpoint of a run marked completed. A process session cannot be tied to its parent's life by the kernel
for a whole tree (PR_SET_PDEATHSIG reaches one process, and is fired by the exit of the forking thread).

So a small watcher, the reaper, starts first, in a session of its own, with the read end of a pipe whose
only writer is the entrypoint. The supervisor writes each child's session id (its PID: start_new_session)
to it. When the pipe reaches end of file (the entrypoint exited, however it died), the reaper sends
SIGTERM to every process still in those sessions, waits up to the grace period, then SIGKILLs what remains.
After a normal stop_all nothing is left in them and the reaper exits at once.

The reaper itself is `python -m entrypoint.supervise.reaper GRACE_SECONDS`: the standard library only,
reading /proc (Linux: the image and every supported host).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

PROC = "/proc"
CLOSED = "closed"  # the entrypoint's last line after stop_all: end of file without it means it died


def _after_name(stat: str) -> list[str]:
    """The fields of a /proc/<pid>/stat line after the command name (field 2, which may hold spaces and
    parentheses, so fields are counted after its last ')'): the state first."""
    return stat.rpartition(")")[2].split()


def session_of(stat: str) -> int | None:
    """The session id in a /proc/<pid>/stat line (field 6); None for a line that is not one."""
    fields = _after_name(stat)
    return int(fields[3]) if len(fields) > 3 and fields[3].lstrip("-").isdigit() else None


def state_of(stat: str) -> str:
    """The state letter in a /proc/<pid>/stat line (field 3: "R", "S", "Z" for a zombie, ...)."""
    fields = _after_name(stat)
    return fields[0] if fields else ""


def members(sessions: set[int], proc: str = PROC) -> list[int]:
    """PIDs of the live processes (other than this one) whose session is one of `sessions`. A zombie is not
    one: it has exited and waits only for its parent (PID 1, for a child's orphan) to collect it."""
    found = []
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, name, "stat"), encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:  # gone since the listing
            continue
        if session_of(stat) in sessions and state_of(stat) != "Z":
            found.append(int(name))
    return found


def _signal_all(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def reap(
    sessions: set[int], grace_seconds: float, proc: str = PROC, poll: float = 0.2, closed: bool = False
) -> list[int]:
    """SIGTERM every process of `sessions`, SIGKILL those still there after `grace_seconds`; returns the
    PIDs it found at first (empty when the entrypoint had stopped them itself). `closed`: the entrypoint said
    it had stopped its children (Reaper.close), so what is found is what they left behind, not orphans of a
    dead entrypoint."""
    found = members(sessions, proc)
    if not found:
        return []
    what = (
        "the children left behind at their exit"
        if closed
        else "the entrypoint had started: the entrypoint is gone"
    )
    print(
        f"grpo-rig: stopping {len(found)} process(es) {what} (SIGTERM, then SIGKILL after "
        f"{grace_seconds:.0f} s)",
        file=sys.stderr,
        flush=True,
    )
    _signal_all(found, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline and members(sessions, proc):
        time.sleep(poll)
    _signal_all(members(sessions, proc), signal.SIGKILL)
    return found


class Reaper:
    """The entrypoint's end of the pipe: `watch(pid)` after each child starts; `close()` once stop_all ran."""

    def __init__(self, grace_seconds: float):
        self.popen = subprocess.Popen(  # noqa: S603 - this interpreter, this module
            [sys.executable, "-m", "entrypoint.supervise.reaper", str(grace_seconds)],
            stdin=subprocess.PIPE,
            start_new_session=True,
            text=True,
        )

    def watch(self, session: int) -> None:
        """Tell the reaper about a child's session (its PID: the child was started in a new session)."""
        with contextlib.suppress(OSError, ValueError):  # a reaper that died itself leaves the old guarantee
            self.popen.stdin.write(f"{session}\n")
            self.popen.stdin.flush()

    def close(self) -> None:
        """End of file for the reaper: it stops what is left of the watched sessions (nothing, after
        stop_all), then exits; waited for briefly so no zombie stays."""
        with contextlib.suppress(OSError, ValueError):
            self.popen.stdin.write(f"{CLOSED}\n")
            self.popen.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)


def main() -> None:
    """Read session ids, one per line, until end of file; then reap them (module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the entrypoint's to handle
    grace = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    sessions: set[int] = set()
    closed = False
    for line in sys.stdin:
        if line.strip().isdigit():
            sessions.add(int(line))
        closed = line.strip() == CLOSED
    reap(sessions, grace, closed=closed)


if __name__ == "__main__":
    main()
