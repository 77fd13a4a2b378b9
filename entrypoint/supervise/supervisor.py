"""Supervision: start the children of a run, gate on health, watch, and end whole process trees.

Policy (`launch`), in one place:
  1. start the rollout server first (server mode) and wait for its /health/ within ROLLOUT_STARTUP_TIMEOUT,
     printing progress; then check it listens on the port the trainer was given (ms-swift moves to another
     port silently when its port is taken);
  2. start the trainer;
  3. the first child to exit ends the run: the trainer with 0 is `completed`; a trainer that fails after
     training had finished (`finished(child)` says why) is `completed` too, its exit recorded; anything else
     is `failed`, with the child's last lines;
  4. SIGINT/SIGTERM make it `stopped` (130/143);
  5. always: SIGTERM to every child's process group, SIGKILL after one shared grace period, and any
     descendant that left its group is found with psutil and killed (honcho's escalation).

State of a child (`ChildState`, after torchelastic's WorkerState):

    STARTING --(health endpoint 200)--> HEALTHY    (rollout server only)
    STARTING/HEALTHY --(exit 0)--> SUCCEEDED
    STARTING/HEALTHY --(exit != 0)--> FAILED
    any --(stop_all)--> STOPPED

Every child runs in its own session (process group). Signal handlers only raise `Interrupted` (signals.py);
cleanup happens in `supervised`'s `finally`. Each child's lines go to `<run>/logs/<role>.log` and, through the
one `Printer` (printer.py), to the console as `role | line`, those that entrypoint/supervise/console.py lets
through. Seams for tests: the process constructor (`popen`), the clock and sleep, the health probe and the
port lookup (`Supervisor.__init__`; their defaults: probes.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psutil

from entrypoint.child.wire import STACKS_DIR
from entrypoint.errors import EXIT_OK, EXIT_RUNTIME_FAILURE
from entrypoint.plan.build import Process
from entrypoint.record.status import Status
from entrypoint.supervise import deaths
from entrypoint.supervise.printer import Printer
from entrypoint.supervise.probes import http_ok, listening_ports, process_tree
from entrypoint.supervise.reaper import Reaper
from entrypoint.supervise.signals import Interrupted, deferred_signals, install_signal_handlers

TAIL_LINES = 40
POLL_SECONDS = 0.2
STACKS_SECONDS = 2.0  # for a stalled run's stack dumps to reach their files (ask_stacks)


class ChildState(enum.Enum):
    STARTING = "starting"
    HEALTHY = "healthy"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


class ChildFailed(Exception):
    """A child exited (or never became healthy); carries its role, return code, the signal that ended it
    (deaths.signal_of) and its last lines (deaths.Tail: start-up dumps folded)."""

    def __init__(
        self,
        role: str,
        returncode: int | None,
        tail: list[str],
        reason: str,
        signame: str | None = None,
        title: str = "Its last lines",
    ):
        self.role, self.returncode, self.tail, self.reason = role, returncode, tail, reason
        self.signal, self.title = signame, title
        super().__init__(f"{role} {reason}")

    def render(self) -> str:
        if deaths.disk_full(self.tail):  # the traceback of a failed write says nothing more than this
            return f"{self.role} {self.reason}: the disk is full ({deaths.disk_full(self.tail)})"
        lines = "\n".join(f"  {Printer.prefix(self.role)}{line}" for line in self.tail) or "  (no output)"
        return f"{self.role} {self.reason}. {self.title}:\n{lines}"


class Stalled(Exception):
    """A child made no progress for the stall bound (supervise/stall.py): the run is ended. `stack`: where
    it waited (deaths.stall_excerpt of the stacks its processes wrote)."""

    def __init__(self, reason: str, stack: list[str] | None = None):
        super().__init__(reason)
        self.stack = stack or []


@dataclasses.dataclass
class Child:
    role: str
    popen: subprocess.Popen
    log_path: Path
    tail: deaths.Tail
    reader: threading.Thread | None
    state: ChildState = ChildState.STARTING
    log_error: str = ""  # why the log file stopped being written (a full disk); the pipe is still drained

    @property
    def pid(self) -> int:
        return self.popen.pid


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a run's children ended."""

    status: Status  # COMPLETED, FAILED or STOPPED
    code: int  # the exit status the entrypoint returns (errors.EXIT_*)
    failure: dict | None = None  # role, returncode, reason, log_tail of the child that failed
    trainer_exit: dict | None = None  # a trainer crash after training had finished, accepted (why)
    log_errors: tuple[str, ...] = ()  # logs that stopped being written (a full disk), with why


class Supervisor:
    """Starts children and guarantees that none outlives `stop_all()`."""

    def __init__(
        self,
        log_dir: Path,
        grace_seconds: float,
        printer: Printer | None = None,
        secret_values: list[str] = (),
        base_env: Mapping[str, str] = {},  # noqa: B006 - read only: the environment the children inherit
        *,
        popen: Callable[..., subprocess.Popen] = subprocess.Popen,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        health: Callable[[str], bool] = http_ok,
        ports_of: Callable[[int], set[int]] = listening_ports,
    ):
        self.log_dir, self.grace_seconds = log_dir, grace_seconds
        self.printer = printer or Printer()
        self.secret_values = list(secret_values)
        self.base_env = dict(base_env)
        self.popen, self.clock, self.sleep, self.health, self.ports_of = popen, clock, sleep, health, ports_of
        self.children: list[Child] = []
        self.reaper: Reaper | None = None  # started with the first real child (reaper.py says why)

    def start(self, process: Process) -> Child:
        """Start `process` in a new session with the base environment plus its own env."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**self.base_env, **process.env}
        log_path = self.log_dir / f"{process.role}.log"
        try:
            popen = self.popen(  # noqa: S603 - argv list from the plan, never a shell string
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
        # real processes only: a test's stand-in PIDs are nobody's sessions
        if self.popen is subprocess.Popen:
            if self.reaper is None:
                self.reaper = Reaper(self.grace_seconds)
            self.reaper.watch(popen.pid)
        child = Child(process.role, popen, log_path, deaths.Tail(TAIL_LINES), None)
        if popen.stdout is not None:
            child.reader = threading.Thread(target=self._pump, args=(child,), daemon=True)
            child.reader.start()
        self.children.append(child)
        return child

    def _pump(self, child: Child) -> None:
        """Copy the child's output to its log, its tail and the console until it closes. Nothing here may
        end the loop early: a child whose pipe is no longer read blocks on its next write (a full disk
        once killed this thread with ENOSPC). A log that cannot be written is given up, with the reason."""
        log = None
        try:
            log = child.log_path.open("a", encoding="utf-8")
        except OSError as exc:
            child.log_error = f"{child.log_path}: {exc.strerror or exc}"
        for raw in iter(child.popen.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            for secret in self.secret_values:  # the log files are ours: no secret reaches them
                line = line.replace(secret, "<redacted>")
            if log is not None:
                try:
                    log.write(line + "\n")
                    log.flush()
                except OSError as exc:
                    child.log_error, log = f"{child.log_path}: {exc.strerror or exc}", _close_quietly(log)
            line = line.rsplit("\r", 1)[-1]  # tqdm redraws with \r: keep the last frame only
            child.tail.append(line)
            with contextlib.suppress(Exception):  # a console that went away (a closed pipe) ends nothing
                self.printer.line(child.role, line)
        _close_quietly(log)
        child.popen.stdout.close()

    def _finished(self, child: Child) -> int | None:
        rc = child.popen.poll()
        if rc is not None and child.reader is not None:
            child.reader.join(timeout=5)
        return rc

    def wait_healthy(self, child: Child, url: str, timeout: float, progress_every: float = 15.0) -> float:
        """Poll `url` until it answers 200; returns the seconds it took. Raises ChildFailed if the child
        exits first or `timeout` seconds pass."""
        start = self.clock()
        next_progress = start + progress_every
        while True:
            rc = self._finished(child)
            if rc is not None:
                child.state = ChildState.FAILED
                raise ChildFailed(
                    child.role, rc, list(child.tail), f"exited with status {rc} before it was healthy"
                )
            if self.health(url):
                child.state = ChildState.HEALTHY
                return self.clock() - start
            now = self.clock()
            if now - start > timeout:
                raise ChildFailed(
                    child.role,
                    None,
                    list(child.tail),
                    f"was not healthy after {timeout:.0f} s (ROLLOUT_STARTUP_TIMEOUT); {url} did not answer "
                    "200",
                )
            if now >= next_progress:
                self.printer.say(
                    f"waiting for {child.role} at {url} ({now - start:.0f} s of {timeout:.0f} s)"
                )
                next_progress = now + progress_every
            self.sleep(1.0)

    def pids(self) -> set[int]:
        """Every process of every child's tree (the GPU monitor attributes memory by PID)."""
        return {p.pid for c in self.children for p in process_tree(c.pid)}

    def wait(self, child: Child, stalled: Callable[[], str] = lambda: "") -> int:
        """Block until `child` exits; returns its status and marks its state. Raises Stalled when `stalled`
        says why the child counts as stalled (a StallWatch's verdict)."""
        while (rc := self._finished(child)) is None:
            why = stalled()
            if why:
                raise Stalled(why, self.ask_stacks())
            self.sleep(POLL_SECONDS)
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
            self.printer.tick()
            stalled = self.printer.stalled()
            if stalled:
                raise Stalled(stalled, self.ask_stacks())
            self.sleep(POLL_SECONDS)

    def ask_stacks(self) -> list[str]:
        """Every process of every child writes its Python threads' stacks into a file of its own under
        logs/stacks/: SIGUSR1, on which the events hook registered faulthandler in each child
        (entrypoint/child/hooks/events.py). Waits STACKS_SECONDS for the dumps; a process without the hook
        dies of the signal, which the stop that follows would have done anyway. Returns the training
        process's main thread (deaths.stall_excerpt), [] without dumps."""
        for process in (p for c in self.children for p in process_tree(c.pid)):
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                process.send_signal(signal.SIGUSR1)
        self.sleep(STACKS_SECONDS)
        return deaths.stall_excerpt(_read_stacks(self.log_dir / STACKS_DIR))

    def stop_all(self) -> None:
        """SIGTERM every child's process group, SIGKILL what remains after the grace period."""
        trees = {c.pid: process_tree(c.pid) for c in self.children}
        for child in self.children:
            if child.popen.poll() is None:
                child.state = ChildState.STOPPED
                _signal_group(child.pid, signal.SIGTERM)
        deadline = self.clock() + self.grace_seconds
        for child in self.children:
            try:
                child.popen.wait(timeout=max(0.0, deadline - self.clock()))
            except subprocess.TimeoutExpired:
                self.printer.say(f"{child.role} did not stop within {self.grace_seconds:.0f} s: killing it")
        for child in self.children:
            _signal_group(child.pid, signal.SIGKILL)
            leftovers = [p for p in trees.get(child.pid, []) if p.is_running()]
            for proc in leftovers:  # descendants that moved to another process group
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
            psutil.wait_procs(leftovers, timeout=5)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=5)
            if child.reader is not None:
                child.reader.join(timeout=5)

    def close(self) -> None:
        """After stop_all: the reaper, finding nothing left of the children's sessions, exits; the stacks
        files of processes that were never asked for them go."""
        _drop_empty(self.log_dir / STACKS_DIR)
        if self.reaper is not None:
            self.reaper.close()
            self.reaper = None


def _read_stacks(folder: Path) -> list[tuple[str, str]]:
    """(file name, text) of each process's stacks file that holds a dump."""
    out = []
    for path in sorted(folder.glob("*.txt")) if folder.is_dir() else []:
        with contextlib.suppress(OSError):
            text = path.read_text(encoding="utf-8", errors="replace")
            if text.strip():
                out.append((path.name, text))
    return out


def _drop_empty(folder: Path) -> None:
    for path in folder.glob("*.txt") if folder.is_dir() else []:
        with contextlib.suppress(OSError):
            if path.stat().st_size == 0:
                path.unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()  # only when empty


def _close_quietly(f) -> None:
    """Close a log file whose last write may have failed (its buffer cannot be flushed either)."""
    if f is not None:
        with contextlib.suppress(OSError):
            f.close()


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


@contextlib.contextmanager
def supervised(
    log_dir: Path,
    grace_seconds: float,
    printer: Printer | None = None,
    secret_values: list[str] = (),
    base_env: Mapping[str, str] = {},  # noqa: B006 - read only
    *,
    signals: bool = True,
    **seams,
) -> Iterator[Supervisor]:
    """The one way children run (train, rollout and the merged export alike): a Supervisor whose children
    never outlive the block; with `signals`, SIGINT/SIGTERM raise Interrupted inside it. `seams` are the
    Supervisor's test seams (popen, clock, sleep, health, ports_of)."""
    supervisor = Supervisor(log_dir, grace_seconds, printer, secret_values, base_env, **seams)
    restore = install_signal_handlers() if signals else (lambda: None)
    try:
        yield supervisor
    finally:
        with deferred_signals():  # a second Ctrl-C must not leave children running
            supervisor.stop_all()
            supervisor.close()
        restore()


def launch(
    processes: list[Process],
    supervisor: Supervisor,
    startup_timeout: float,
    finished: Callable[[Child], str | None] = lambda child: None,
) -> Outcome:
    """Run `processes` (a rollout server, then the trainer) under the policy in this module's docstring,
    inside `supervised` (which stops them all and handles the signals). `finished(trainer)` says why a
    failed trainer had still finished training (None: it had not)."""
    say = supervisor.printer.say
    try:
        for process in processes:
            if process.role == "rollout":
                _start_healthy(supervisor, process, startup_timeout)
        trainer = supervisor.start(next(p for p in processes if p.role == "trainer"))
        try:
            first = supervisor.wait_any()
        except Stalled as exc:  # the policy: a stalled trainer ends the run, shown where it waited
            why = finished(trainer)
            if why is None:
                if exc.stack:
                    raise ChildFailed("trainer", None, exc.stack, str(exc), title="Where it waits") from None
                raise ChildFailed("trainer", None, list(trainer.tail), str(exc)) from None
            say(f"trainer {exc}")
            say(f"training had finished before it stalled ({why}); the run counts as completed")
            return Outcome(
                Status.COMPLETED,
                EXIT_OK,
                trainer_exit={
                    "returncode": None,
                    "signal": None,
                    "accepted": True,
                    "reason": f"{exc}; {why}",
                },
            )
        if first is trainer and first.state is ChildState.SUCCEEDED:
            return Outcome(Status.COMPLETED, EXIT_OK)
        rc = first.popen.returncode
        why = finished(first) if first is trainer else None
        signame = exit_signal(rc, first.log_path)
        if why is None:
            own = deaths.signal_of(rc, signame)
            raise ChildFailed(first.role, rc, list(first.tail), deaths.describe_exit(rc, signame), own)
        say(
            f"trainer exited with status {rc}{f' ({signame})' if signame else ''} after training had "
            f"finished ({why}); the run counts as completed"
        )
        return Outcome(
            Status.COMPLETED,
            EXIT_OK,
            trainer_exit={"returncode": rc, "signal": signame, "accepted": True, "reason": why},
        )
    except ChildFailed as exc:
        say(exc.render())
        failure = {
            "role": exc.role,
            "returncode": exc.returncode,
            "reason": exc.reason,
            "log_tail": exc.tail,
            "signal": exc.signal,
        }
        return Outcome(Status.FAILED, EXIT_RUNTIME_FAILURE, failure=failure)
    except Interrupted as exc:
        say(
            f"{signal.Signals(exc.signum).name} received: stopping all processes (grace "
            f"{supervisor.grace_seconds:.0f} s)"
        )
        return Outcome(Status.STOPPED, 128 + exc.signum)


def _start_healthy(supervisor: Supervisor, process: Process, timeout: float) -> Child:
    supervisor.printer.say(f"starting the rollout server; waiting for {process.health_url}")
    child = supervisor.start(process)
    seconds = supervisor.wait_healthy(child, process.health_url, timeout)
    port = process.port
    bound = supervisor.ports_of(child.pid)
    if port not in bound:
        reason = f"answered on port {port} but listens on {sorted(bound)}: another server holds {port}"
        raise ChildFailed("rollout", None, list(child.tail), reason)
    supervisor.printer.say(f"rollout server healthy after {seconds:.0f} s on port {port}")
    return child


def exit_signal(returncode: int | None, log_path: Path) -> str | None:
    """The signal that ended the trainer: from a negative status, or from torchrun's failure report
    ("Signal 6 (SIGABRT) received by PID ...", "exitcode : -11"), which is what a torchrun'ed rank's
    crash leaves (the torchrun process itself exits 1)."""
    import re

    if returncode is not None and returncode < 0:
        return signal.Signals(-returncode).name
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")[-20000:]
    except OSError:
        return None
    named = re.findall(r"Signal \d+ \((SIG[A-Z]+)\) received by PID", text)
    if named:
        return named[-1]
    codes = re.findall(r"exitcode\s*:\s*(-\d+)", text)
    if codes:
        with contextlib.suppress(ValueError):
            return signal.Signals(-int(codes[-1])).name
    return None
