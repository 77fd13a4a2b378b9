"""No child outlives the entrypoint (entrypoint/supervise/reaper.py), even one killed with SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from entrypoint.supervise import reaper


@pytest.mark.parametrize(
    ("stat", "session"),
    [
        ("4242 (python3) S 1 4242 4242 0 -1 4194560 ...", 4242),
        # a command name with spaces and a parenthesis (ms-swift's workers name themselves freely)
        ("77 (VLLM::Engine (core) x) R 76 70 70 34816 70 4194304", 70),
        ("garbage", None),
    ],
)
def test_the_session_is_read_after_the_command_name(stat, session):
    assert reaper.session_of(stat) == session


def _session_tree():
    """A process in a new session with a child of its own in the same session (as torchrun's workers are);
    returns (leader Popen, grandchild pid)."""
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        "print(p.pid, flush=True); time.sleep(600)"
    )
    leader = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    return leader, int(leader.stdout.readline())


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.cli
def test_when_the_entrypoint_dies_the_reaper_ends_every_process_of_its_children_s_sessions():
    """The entrypoint's end of the pipe closes as it dies (here: a stand-in entrypoint killed with SIGKILL
    after registering one child's session); the child and its grandchild are ended within the grace."""
    leader, grandchild = _session_tree()
    stand_in = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom entrypoint.supervise.reaper import Reaper\n"
            f"r = Reaper(2.0); r.watch({leader.pid}); print('watching', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert stand_in.stdout.readline().strip() == "watching"
        stand_in.send_signal(signal.SIGKILL)
        stand_in.wait(timeout=10)
        leader.wait(timeout=15)  # SIGTERM from the reaper
        deadline = time.monotonic() + 15
        while not _gone(grandchild) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(grandchild)
    finally:
        for pid in (leader.pid, grandchild):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_after_a_normal_stop_there_is_nothing_to_reap():
    assert reaper.reap({2**22 + 12345}, grace_seconds=0.1) == []


def test_a_zombie_is_not_a_process_to_stop_and_leftovers_after_a_normal_close_are_not_called_orphans(
    tmp_path, capsys
):
    """A new user saw "the entrypoint is gone; stopping the 1 process(es)" at the end of every completed CPU
    run: the trainer's exited child waited as a zombie for PID 1 to collect it, and the reaper counted it. A
    zombie is no process to stop; a live leftover after the entrypoint closed normally is named as such."""
    proc = tmp_path / "proc"
    for pid, state in ((101, "Z"), (102, "S")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} (python3) {state} 1 4242 4242 0 -1 4194560")
    assert reaper.members({4242}, proc=str(proc)) == [102]
    (proc / "102" / "stat").write_text("102 (python3) Z 1 4242 4242 0 -1 4194560")
    assert reaper.reap({4242}, grace_seconds=0.1, proc=str(proc)) == []
    assert capsys.readouterr().err == ""
