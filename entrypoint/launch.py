"""Supervise the child processes of a run: start, wait for health, watch, and end whole process trees.

State of a child (`ChildState`), after torchelastic's WorkerState:

    STARTING --(health endpoint 200)--> HEALTHY    (rollout server only)
    STARTING/HEALTHY --(exit 0)--> SUCCEEDED
    STARTING/HEALTHY --(exit != 0)--> FAILED
    any --(stop_all)--> STOPPED

Every child runs in its own session (process group), so a signal reaches its whole tree (torchrun and
its ranks, vLLM's workers); on stop the group gets SIGTERM, then SIGKILL after one shared grace period
(honcho's escalation), and any descendant that left the group is found with psutil and killed too.
Signal handlers only raise `Interrupted`; cleanup happens in the caller's `finally`.

Output: each child's lines go to `<run>/logs/<role>.log` and to the console prefixed `role | `.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

import psutil

from entrypoint.plan import Process

TAIL_LINES = 40
POLL_SECONDS = 0.2


class ChildState(enum.Enum):
    STARTING = "starting"
    HEALTHY = "healthy"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived; `signum` says which."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class ChildFailed(Exception):
    """A child exited (or never became healthy); carries its role, return code and last log lines."""

    def __init__(self, role: str, returncode: int | None, tail: list[str], reason: str):
        self.role, self.returncode, self.tail, self.reason = role, returncode, tail, reason
        super().__init__(f"{role} {reason}")

    def render(self) -> str:
        lines = "\n".join(f"  {role_prefix(self.role)}{line}" for line in self.tail) or "  (no output)"
        return f"{self.role} {self.reason}. Its last lines:\n{lines}"


def role_prefix(role: str) -> str:
    return f"{role:>8} | "


@dataclasses.dataclass
class Child:
    role: str
    popen: subprocess.Popen
    log_path: Path
    tail: collections.deque
    reader: threading.Thread
    state: ChildState = ChildState.STARTING

    @property
    def pid(self) -> int:
        return self.popen.pid


def install_signal_handlers() -> Callable[[], None]:
    """Make SIGINT/SIGTERM raise Interrupted in the main thread; returns a function restoring the old ones."""

    def handler(signum, frame):
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    return lambda: [signal.signal(s, h) for s, h in old.items()]


class Supervisor:
    """Starts children and guarantees that none outlives `stop_all()`."""

    def __init__(
        self, log_dir: Path, grace_seconds: float, console: TextIO = sys.stdout, secret_values: list[str] = ()
    ):
        self.log_dir = log_dir
        self.grace_seconds = grace_seconds
        self.console = console
        self.secret_values = list(secret_values)
        self.children: list[Child] = []
        self._console_lock = threading.Lock()

    def start(self, process: Process, base_env: Mapping[str, str] | None = None) -> Child:
        """Start `process` in a new session with `base_env` (default os.environ) plus its own env."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ if base_env is None else base_env)
        env.update(process.env)
        log_path = self.log_dir / f"{process.role}.log"
        try:
            popen = subprocess.Popen(  # noqa: S603 - argv list from the plan, never a shell string
                process.argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise ChildFailed(
                process.role, None, [], f"could not start ({process.argv[0]}: {exc.strerror})"
            ) from exc
        tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
        reader = threading.Thread(target=self._pump, args=(process.role, popen, log_path, tail), daemon=True)
        child = Child(process.role, popen, log_path, tail, reader)
        reader.start()
        self.children.append(child)
        return child

    def _pump(self, role: str, popen: subprocess.Popen, log_path: Path, tail: collections.deque) -> None:
        prefix = role_prefix(role)
        with log_path.open("a", encoding="utf-8") as log:
            for raw in iter(popen.stdout.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                for secret in self.secret_values:  # the log files are ours: no secret reaches them
                    line = line.replace(secret, "<redacted>")
                log.write(line + "\n")
                log.flush()
                # tqdm redraws with \r: keep the last frame only
                line = line.rsplit("\r", 1)[-1]
                tail.append(line)
                with self._console_lock:
                    self.console.write(prefix + line + "\n")
                    self.console.flush()
        popen.stdout.close()

    def _finished(self, child: Child) -> int | None:
        rc = child.popen.poll()
        if rc is not None:
            child.reader.join(timeout=5)
        return rc

    def wait_healthy(self, child: Child, url: str, timeout: float, progress_every: float = 15.0) -> float:
        """Poll GET `url` until it answers 200; returns the seconds it took.

        Raises ChildFailed if the child exits first or `timeout` seconds pass.
        """
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
        start = time.monotonic()
        next_progress = start + progress_every
        while True:
            rc = self._finished(child)
            if rc is not None:
                child.state = ChildState.FAILED
                raise ChildFailed(
                    child.role, rc, list(child.tail), f"exited with status {rc} before it was healthy"
                )
            try:
                with opener.open(url, timeout=2) as response:
                    if response.status == 200:
                        child.state = ChildState.HEALTHY
                        return time.monotonic() - start
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            now = time.monotonic()
            if now - start > timeout:
                raise ChildFailed(
                    child.role,
                    None,
                    list(child.tail),
                    f"was not healthy after {timeout:.0f} s (ROLLOUT_STARTUP_TIMEOUT); {url} did not answer 200",
                )
            if now >= next_progress:
                self._say(f"waiting for {child.role} at {url} ({now - start:.0f} s of {timeout:.0f} s)")
                next_progress = now + progress_every
            time.sleep(1.0)

    def listening_ports(self, child: Child) -> set[int]:
        """TCP ports in LISTEN state owned by the child's process tree."""
        found: set[int] = set()
        for proc in self._tree(child.pid):
            try:
                for conn in proc.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN and conn.laddr:
                        found.add(conn.laddr.port)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def pids(self) -> set[int]:
        """Every process of every child's tree (the GPU monitor attributes memory by PID)."""
        return {p.pid for c in self.children for p in self._tree(c.pid)}

    def wait(self, child: Child) -> int:
        """Block until `child` exits; returns its status and marks its state."""
        rc = child.popen.wait()
        child.reader.join(timeout=5)
        child.state = ChildState.SUCCEEDED if rc == 0 else ChildState.FAILED
        return rc

    def wait_any(self) -> Child:
        """Block until a child exits; return the first one that did (FAILED or SUCCEEDED)."""
        while True:
            for child in self.children:
                if child.state in (ChildState.STARTING, ChildState.HEALTHY):
                    rc = self._finished(child)
                    if rc is not None:
                        child.state = ChildState.SUCCEEDED if rc == 0 else ChildState.FAILED
                        return child
            time.sleep(POLL_SECONDS)

    @staticmethod
    def _tree(pid: int) -> list[psutil.Process]:
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop_all(self) -> None:
        """SIGTERM every child's process group, SIGKILL what remains after the grace period."""
        trees = {c.pid: self._tree(c.pid) for c in self.children}
        for child in self.children:
            if child.popen.poll() is None:
                child.state = ChildState.STOPPED
                self._signal_group(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_seconds
        for child in self.children:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                child.popen.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                self._say(f"{child.role} did not stop within {self.grace_seconds:.0f} s: killing it")
        for child in self.children:
            self._signal_group(child.pid, signal.SIGKILL)
            leftovers = [p for p in trees.get(child.pid, []) if p.is_running()]
            for proc in leftovers:  # descendants that moved to another process group
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
            psutil.wait_procs(leftovers, timeout=5)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=5)
            child.reader.join(timeout=5)

    @staticmethod
    def _signal_group(pid: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signum)

    def _say(self, text: str) -> None:
        with self._console_lock:
            self.console.write(f"grpo-rig | {text}\n")
            self.console.flush()
