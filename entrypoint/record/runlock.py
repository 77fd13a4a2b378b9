"""One run per run directory: an advisory lock on `<run dir>/run.lock`, held for the life of the command
that writes the run (`train`, its merged export, `rollout`, `evaluate` while it writes eval.*).

The lock is `fcntl.flock` on that file. The kernel drops it when the holder's descriptor closes, so a holder
that is gone (it exited, was killed, OOM-killed, or its machine rebooted) never blocks the next start: the
next command simply takes the lock over. A second start while the holder lives is refused at once
(errors.BadInput, exit 2) naming the holder's PID, host, start time and command line, which the holder
writes into the file once it holds the lock; a refused start only reads the file, so nothing of the first
run is touched (unlocked, two trainings of one RUN_NAME share logs/trainer.log and overwrite each other's
manifest). The descriptor is not inherited by the children (os.open's default), so the lock ends with the
entrypoint itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shlex
import socket
from pathlib import Path

import psutil

from entrypoint import redact
from entrypoint.errors import BadInput, Problem
from entrypoint.facts.facts import MANIFEST

LOCK_FILE = "run.lock"


def _holder(text: str) -> dict:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def held_by(directory: Path) -> dict | None:
    """The live holder of `directory`'s lock as it wrote itself ({} while it is still starting), or None when
    no process holds it (no lock file, or its holder is gone). Asks with a shared lock on a read-only
    descriptor, dropped at once: nothing is written, and the holder is not disturbed."""
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        with contextlib.suppress(OSError):
            return _holder(os.pread(fd, 65536, 0).decode("utf-8", "replace"))
        return {}
    except OSError:  # a file system without locks: nothing can be said
        return None
    finally:
        os.close(fd)  # drops the shared lock, if taken
    return None


def evaluating(holder: dict) -> bool:
    """The holder is `evaluate` (it writes only eval.* and the manifest's summary), not a training."""
    return " evaluate" in f" {holder.get('command', '')}"


def describe(holder: dict) -> str:
    """'PID 1234 on host h since 2026-12-01T12:00:00+00:00: python -m entrypoint train ...' (for messages)."""
    if not holder.get("pid"):
        return "a process that is still starting (it has not written its PID yet)"
    here = socket.gethostname()
    host = holder.get("host") or "?"
    where = "" if host == here else f" on host {host} (sharing this volume)"
    return f"PID {holder['pid']}{where} since {holder.get('started_at', '?')}: {holder.get('command', '?')}"


def _busy(directory: Path, holder: dict) -> Problem:
    """The refusal of a directory another process holds, in the holder's terms: an evaluation ends by itself
    and writes only eval.*; a training run is stopped with its checkpoint exported."""
    pid = holder.get("pid", "<pid>")
    if evaluating(holder):
        return Problem(
            f"run directory {directory}",
            f"is being evaluated: {describe(holder)}",
            f"wait for that evaluation to end (it writes only eval.* and the manifest's summary), or stop "
            f"it (kill -TERM {pid}: it writes nothing)",
        )
    return Problem(
        f"run directory {directory}",
        f"is in use by another run: {describe(holder)}",
        f"wait for it to end, or stop it (kill -TERM {pid}: it exports its newest checkpoint and records the "
        "run as stopped); to run both, give this one another RUN_NAME",
    )


class RunLock:
    """`with RunLock() as lock: lock.take(directory)`; released (and the lock file left in place) on exit.
    A directory the lock created, that holds nothing else when it is released (a start refused by
    preflight), is removed again."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.fd: int | None = None
        self.created: list[Path] = []  # directories this lock made, deepest last
        self.made_file = False  # the lock file did not exist before this holder
        self.previous: dict = {}  # what the file said before this holder: a holder that is gone

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def take(self, directory: Path, required: bool = True) -> bool:
        """Hold `directory`/run.lock (creating the directory); True once held. Raises BadInput when a live
        process holds it. When the directory or the file cannot be made (OUTPUT_DIR not writable, a file in
        the way): raises BadInput naming the OS's reason if `required`, else returns False (preflight says
        why first). Taking the directory already held is a no-op; another one releases the first."""
        path = directory / LOCK_FILE
        if self.path == path and self.fd is not None:
            return True
        self.release()
        try:
            self._make(directory)
            self.made_file = not path.exists()
            for _ in range(5):  # the file may be removed by a releasing holder between open and flock
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # never O_TRUNC: it may be someone's
                if self._lock(fd, path, directory):
                    break
            else:
                raise OSError(f"{path} was replaced while it was being locked, five times")
        except OSError as exc:
            if required:
                raise BadInput(
                    [
                        Problem(
                            f"run directory {directory}",
                            f"cannot hold {path} ({exc.strerror or exc})",
                            "make OUTPUT_DIR a writable directory (validate says more)",
                        )
                    ]
                ) from None
            return False
        self.path, self.fd = path, fd
        self._write_holder(fd)
        return True

    def _make(self, directory: Path) -> None:
        missing = []
        probe = directory
        while not probe.exists() and probe != probe.parent:
            missing.append(probe)
            probe = probe.parent
        directory.mkdir(parents=True, exist_ok=True)
        self.created = list(reversed(missing))

    def _lock(self, fd: int, path: Path, directory: Path) -> bool:
        """flock `fd` (closing it when that fails); False when `path` is no longer the locked file."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
                holder = _holder(f.read())
            raise BadInput([_busy(directory, holder)]) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
        return same

    def _write_holder(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            self.previous = _holder(os.pread(fd, 65536, 0).decode("utf-8", "replace"))
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join(redact.words(psutil.Process().cmdline())),
        }
        with contextlib.suppress(OSError):  # a full disk: the lock still holds, only its label is missing
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)

    def release(self) -> None:
        """Drop the lock; remove what `take` created when nothing else was put there."""
        if self.fd is None:
            return
        path, fd = self.path, self.fd
        self.path = self.fd = None
        try:
            names = [p.name for p in path.parent.iterdir()]
            if self.created and names == [LOCK_FILE]:
                path.unlink()  # still locked: a start waiting on this inode re-checks it (_lock)
                for directory in reversed(self.created):
                    with contextlib.suppress(OSError):
                        directory.rmdir()
            elif self.made_file and MANIFEST not in names:  # a refused start in a directory that was there
                path.unlink()
        except OSError:
            pass
        finally:
            os.close(fd)
            self.created = []
