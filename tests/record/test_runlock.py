"""runlock.py: one holder per run directory, refused starts that touch nothing, holders that are gone taken
over, and nothing left behind by a start that was refused before it wrote anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from entrypoint.errors import BadInput
from entrypoint.record import runlock
from tests.conftest import ROOT

HOLD = (
    "import sys; from pathlib import Path; from entrypoint.record.runlock import RunLock; "
    "lock = RunLock(); lock.take(Path(sys.argv[1])); print('held', flush=True); sys.stdin.read()"
)


def holder(directory: Path) -> subprocess.Popen:
    """Another process holding `directory`'s lock until its standard input closes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_directory_is_refused_naming_the_holder_and_its_file_is_not_touched(tmp_path):
    other = holder(tmp_path / "r")
    try:
        written = (tmp_path / "r" / runlock.LOCK_FILE).read_bytes()
        assert json.loads(written)["pid"] == other.pid
        with runlock.RunLock() as lock, pytest.raises(BadInput) as exc:
            lock.take(tmp_path / "r")
        (problem,) = exc.value.problems
        assert problem.message.startswith(f"is in use by another run: PID {other.pid} since ")
        assert (
            f"{sys.executable} -c 'import sys; from pathlib import Path; from entrypoint.record.runlock"
            in problem.message
        )
        assert f"kill -TERM {other.pid}" in problem.fix and "another RUN_NAME" in problem.fix
        assert (tmp_path / "r" / runlock.LOCK_FILE).read_bytes() == written  # never truncated by the refused
    finally:
        other.communicate("", timeout=30)


def test_a_holder_that_is_gone_is_taken_over(tmp_path):
    other = holder(tmp_path / "r")
    other.kill()  # SIGKILL: no cleanup; the kernel drops its flock
    other.wait(timeout=30)
    with runlock.RunLock() as lock:
        assert lock.take(tmp_path / "r")
        assert lock.previous["pid"] == other.pid  # what the file said: the holder that is gone
        assert json.loads((tmp_path / "r" / runlock.LOCK_FILE).read_text())["pid"] == os.getpid()
    assert (tmp_path / "r" / runlock.LOCK_FILE).exists()  # left in place: the directory holds a run


def test_taking_the_same_directory_twice_holds_it_once_and_a_refused_start_removes_what_it_made(tmp_path):
    target = tmp_path / "out" / "r"
    with runlock.RunLock() as lock:
        assert lock.take(target, required=False) and lock.take(target)
        assert target.is_dir()
    assert not (tmp_path / "out").exists()  # made by the lock, nothing else put there: removed again
    target.mkdir(parents=True)
    (target / "manifest.json").write_text("{}")
    with runlock.RunLock() as lock:
        lock.take(target)
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json", runlock.LOCK_FILE]


def test_a_directory_that_cannot_be_made_is_said_only_when_the_lock_is_required(tmp_path):
    (tmp_path / "afile").write_text("")
    with runlock.RunLock() as lock:
        assert lock.take(tmp_path / "afile" / "r", required=False) is False
        with pytest.raises(BadInput, match="cannot hold .*run.lock"):
            lock.take(tmp_path / "afile" / "r")


def test_secrets_on_the_holder_s_command_line_never_reach_the_lock_file(tmp_path):
    code = HOLD.replace("sys.argv[1]", "sys.argv[-1]")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "WANDB_API_KEY=plantedSECRET123",
            "--hub_token",
            "hf_plantedTOKEN456",
            "RUN_NAME=r",
            str(tmp_path / "r"),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        text = (tmp_path / "r" / runlock.LOCK_FILE).read_text()
        assert "planted" not in text
        assert (
            "WANDB_API_KEY=<redacted>" in text and "--hub_token '<redacted>'" in text and "RUN_NAME=r" in text
        )
    finally:
        proc.communicate("", timeout=30)


def test_a_directory_held_by_an_evaluation_is_refused_in_evaluate_s_terms(tmp_path):
    """Users' trial: a second evaluate, refused on the lock, was told to stop a training run ("it exports its
    newest checkpoint") and to give another RUN_NAME."""
    problem = runlock._busy(
        tmp_path,
        {"pid": 4321, "host": "h", "started_at": "t", "command": "python -m entrypoint evaluate run=r"},
    )
    assert problem.message.startswith("is being evaluated: PID 4321")
    assert (
        "it writes only eval.*" in problem.fix
        and "RUN_NAME" not in problem.fix
        and "checkpoint" not in problem.fix
    )
    train = runlock._busy(tmp_path, {"pid": 1, "command": "python -m entrypoint train recipe=smoke"})
    assert train.message.startswith("is in use by another run") and "another RUN_NAME" in train.fix
