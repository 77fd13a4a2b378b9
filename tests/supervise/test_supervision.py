"""The supervision policy (supervisor.launch) replayed against scripted histories: fake processes, a fake
clock, a scripted health endpoint. Milliseconds each; tests/supervise/test_supervisor.py keeps the
real-process ones."""

from __future__ import annotations

import io
import signal

import pytest

from entrypoint.errors import EXIT_OK, EXIT_RUNTIME_FAILURE
from entrypoint.plan.build import Process
from entrypoint.supervise import printer, signals, supervisor

PORT = 8123
ROLLOUT = Process("rollout", {}, ["swift", "rollout"], host="127.0.0.1", port=PORT)
TRAINER = Process("trainer", {}, ["swift", "rlhf"])


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeProcess:
    """Exits with `rc` at time `exit_at` (None: runs until signalled). pids are far above pid_max, so
    the supervisor's killpg finds nothing real."""

    pid_counter = 2**30

    def __init__(self, clock: Clock, exit_at: float | None, rc: int):
        FakeProcess.pid_counter += 1
        self.pid, self.clock, self.exit_at, self.rc = FakeProcess.pid_counter, clock, exit_at, rc
        self.returncode = None
        self.stdout = None

    def poll(self):
        if self.returncode is None and self.exit_at is not None and self.clock.now >= self.exit_at:
            self.returncode = self.rc
        return self.returncode

    def wait(self, timeout=None):
        if self.poll() is None:  # stop_all's SIGTERM: a well-behaved child goes
            self.returncode = -signal.SIGTERM
        return self.returncode


def replay(history: dict, timeout: float = 60, finished=lambda child: None, tmp_path=None):
    """Run launch() on `history`: {role: (exit_at, rc)}, "healthy_at", "listens"."""
    clock = Clock()
    started: list[str] = []

    def popen(argv, **kw):
        role = "rollout" if argv[1] == "rollout" else "trainer"
        started.append(role)
        return FakeProcess(clock, *history[role])

    console = io.StringIO()
    processes = [ROLLOUT, TRAINER] if "rollout" in history else [TRAINER]
    with supervisor.supervised(
        tmp_path,
        2.0,
        printer.Printer(console),
        base_env={},
        popen=popen,
        clock=clock,
        sleep=clock.sleep,
        health=lambda url: history.get("healthy_at") is not None and clock.now >= history["healthy_at"],
        ports_of=lambda pid: history.get("listens", {PORT}),
    ) as sup:
        outcome = supervisor.launch(processes, sup, timeout, finished)
    return outcome, started, console.getvalue(), clock.now


CASES = {
    "healthy rollout, then a trainer that finishes": (
        {"rollout": (None, 0), "trainer": (30, 0), "healthy_at": 3},
        ("completed", EXIT_OK, None, "rollout server healthy after 3 s on port 8123"),
    ),
    "rollout dies while starting (C10)": (
        {"rollout": (2, 3), "trainer": (30, 0)},
        ("failed", EXIT_RUNTIME_FAILURE, "rollout", "exited with status 3 before it was healthy"),
    ),
    "rollout never healthy (C10)": (
        {"rollout": (None, 0), "trainer": (30, 0)},
        ("failed", EXIT_RUNTIME_FAILURE, "rollout", "was not healthy after 5 s (ROLLOUT_STARTUP_TIMEOUT)"),
    ),
    "another server answers on the port": (
        {"rollout": (None, 0), "trainer": (30, 0), "healthy_at": 1, "listens": {8124}},
        ("failed", EXIT_RUNTIME_FAILURE, "rollout", "listens on [8124]: another server holds 8123"),
    ),
    "trainer fails": (
        {"rollout": (None, 0), "trainer": (20, 7), "healthy_at": 1},
        ("failed", EXIT_RUNTIME_FAILURE, "trainer", "trainer exited with status 7"),
    ),
    "rollout dies during training": (
        {"rollout": (10, 1), "trainer": (30, 0), "healthy_at": 1},
        ("failed", EXIT_RUNTIME_FAILURE, "rollout", "rollout exited with status 1"),
    ),
    "colocate trainer alone": (
        {"trainer": (5, 0)},
        ("completed", EXIT_OK, None, ""),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_policy(name, tmp_path):
    history, (status, code, failed_role, text) = CASES[name]
    outcome, started, console, _ = replay(history, timeout=5, tmp_path=tmp_path)
    assert (outcome.status, outcome.code) == (status, code)
    assert (outcome.failure or {}).get("role") == failed_role
    assert text in console
    if "rollout" in history and (
        failed_role == "rollout" and "before" in text or "not healthy" in text or "holds" in text
    ):
        assert started == ["rollout"]  # the trainer never starts before the server is healthy
    elif "rollout" in history:
        assert started == ["rollout", "trainer"]


def test_a_trainer_crash_after_training_finished_completes_the_run(tmp_path):
    outcome, *_ = replay(
        {"trainer": (5, -6)}, finished=lambda child: "checkpoint-6 holds step 6 of 6", tmp_path=tmp_path
    )
    assert (outcome.status, outcome.code) == ("completed", EXIT_OK)
    assert outcome.trainer_exit == {
        "returncode": -6,
        "signal": "SIGABRT",
        "accepted": True,
        "reason": "checkpoint-6 holds step 6 of 6",
    }


def test_progress_lines_while_waiting_for_health(tmp_path):
    outcome, _, console, now = replay(
        {"rollout": (None, 0), "trainer": (40, 0), "healthy_at": 31}, tmp_path=tmp_path
    )
    assert outcome.status == "completed"
    assert console.count("waiting for rollout at http://127.0.0.1:8123/health/") == 2  # at 15 s and 30 s


def test_a_signal_stops_the_run_as_stopped(tmp_path):
    def health(url):
        raise signals.Interrupted(signal.SIGTERM)

    clock = Clock()
    with supervisor.supervised(
        tmp_path,
        2.0,
        printer.Printer(io.StringIO()),
        base_env={},
        popen=lambda argv, **kw: FakeProcess(clock, None, 0),
        clock=clock,
        sleep=clock.sleep,
        health=health,
        ports_of=lambda pid: {PORT},
    ) as sup:
        outcome = supervisor.launch([ROLLOUT, TRAINER], sup, 60)
    assert (outcome.status, outcome.code) == ("stopped", 143)
    assert all(c.popen.returncode is not None for c in sup.children)  # stop_all ended every child
