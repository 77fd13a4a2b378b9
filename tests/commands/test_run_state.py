"""Run state you can trust, with the fake `swift` (tests/fakes/swift) and faults injected: one run
per run directory, deaths explained, a full disk that fails cleanly and resumes, SIGTERM at any moment, a
dying log pump, an exception in export. Each asserts what a user sees: the exit status, the console, the
manifest."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from entrypoint.commands import train as train_command
from entrypoint.errors import BadInput
from entrypoint.plan.build import Process
from entrypoint.record import export
from entrypoint.supervise import printer, signals, supervisor
from tests.conftest import FAKE_SWIFT, FAKES, ROOT, clean_env, tmpfs

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

RECIPE = FAKES / "colocate.env"


def env_for(tmp_path: Path, **fake: str) -> dict[str, str]:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir(exist_ok=True)
    return clean_env(GRPO_RIG_SWIFT=str(FAKE_SWIFT), FAKE_PID_DIR=str(pid_dir), **fake)


def argv(out: Path, *pairs: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "entrypoint",
        "train",
        f"recipe={RECIPE}",
        f"OUTPUT_DIR={out}",
        "RUN_NAME=r",
        *pairs,
    ]


def train(tmp_path: Path, out: Path, *pairs: str, **fake: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv(out, *pairs),
        cwd=ROOT,
        env=env_for(tmp_path, **fake),
        capture_output=True,
        text=True,
        timeout=180,
    )


def train_here(tmp_path: Path, console: io.StringIO | None = None, **fake: str) -> int:
    """`train` of the fake recipe into tmp_path/out/r in this process (for tests that patch a stage)."""
    argv = [f"recipe={RECIPE}", f"OUTPUT_DIR={tmp_path / 'out'}", "RUN_NAME=r"]
    return train_command.train(argv, env_for(tmp_path, **fake), console=console or io.StringIO())


def start(tmp_path: Path, out: Path, *pairs: str, **fake: str) -> subprocess.Popen:
    return subprocess.Popen(
        argv(out, *pairs),
        cwd=ROOT,
        env=env_for(tmp_path, **fake),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, proc: subprocess.Popen, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.1)


def pids(tmp_path: Path, role: str) -> list[int]:
    path = tmp_path / "pids" / f"{role}.pids"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def alive(pid: int) -> bool:
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


# One run per run directory --------------------------------------------------------------------------------


def test_a_second_start_is_refused_at_once_naming_the_holder_and_touches_nothing(tmp_path):
    out = tmp_path / "out"
    first = start(tmp_path, out, "MAX_STEPS=200", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0.3")
    try:
        wait_for(out / "r" / "train" / "checkpoint-1" / "trainer_state.json", first)
        before = {name: (out / "r" / name).read_bytes() for name in ("manifest.json", "run.lock")}
        began = time.monotonic()
        second = train(tmp_path, out, "MAX_STEPS=200", FAKE_TRAINER="steps")
        assert second.returncode == 2, second.stdout + second.stderr
        assert time.monotonic() - began < 20  # before the plugin probe and the other slow checks
        assert f"is in use by another run: PID {first.pid} " in second.stderr
        assert "-m entrypoint train recipe=" in second.stderr and f"kill -TERM {first.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        assert {
            name: (out / "r" / name).read_bytes() for name in before
        } == before  # the first run's, untouched
        assert len(pids(tmp_path, "trainer")) == 1  # no second trainer
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
        assert first.returncode == 143 and manifest(out / "r")["status"] == "stopped"
    finally:
        with contextlib.suppress(ProcessLookupError):
            first.kill()
    # the holder is gone: the next start takes the lock over and resumes
    third = train(tmp_path, out, "MAX_STEPS=200", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0")
    assert third.returncode == 0, third.stdout + third.stderr
    assert json.loads((out / "r" / "run.lock").read_text())["pid"] != first.pid


def test_a_launcher_killed_with_sigkill_leaves_a_lock_the_next_start_takes_over(tmp_path):
    out = tmp_path / "out"
    first = start(tmp_path, out, "MAX_STEPS=200", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0.3")
    wait_for(out / "r" / "train" / "checkpoint-1" / "trainer_state.json", first)
    first.kill()  # no cleanup at all: the manifest says `running`, the lock file names a dead PID
    first.communicate(timeout=30)
    for pid in pids(tmp_path, "trainer") + pids(tmp_path, "worker"):  # what a stopped machine loses too
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert manifest(out / "r")["status"] == "running"
    again = train(tmp_path, out, "MAX_STEPS=3", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "its previous attempt ended without recording how" in again.stdout
    data = manifest(out / "r")
    assert data["status"] == "completed"
    assert [a["status"] for a in data["attempts"]] == ["unrecorded", "completed"]


def test_a_launcher_killed_with_sigkill_takes_its_trainer_with_it(tmp_path):
    """kill -9 of `python -m entrypoint train`: its trainer and the trainer's worker (their own session) are
    ended within the grace period, so no orphan writes into the next attempt's files."""
    out = tmp_path / "out"
    first = start(
        tmp_path,
        out,
        "MAX_STEPS=200",
        "STOP_GRACE_SECONDS=2",
        FAKE_TRAINER="steps",
        FAKE_WRAP="1",
        FAKE_STEP_SECONDS="0.3",
        FAKE_OUTPUT_LIKE_LOGGING="1",
    )
    wait_for(out / "r" / "train" / "checkpoint-1" / "trainer_state.json", first)
    children = pids(tmp_path, "trainer") + pids(tmp_path, "worker")
    assert children and all(alive(p) for p in children)
    first.kill()
    first.communicate(timeout=30)
    deadline = time.monotonic() + 20
    while any(alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    orphans = [p for p in children if alive(p)]
    for pid in orphans:  # a failing run of this test leaves nothing behind either
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not orphans


def test_evaluate_is_refused_while_a_training_holds_the_run(tmp_path):
    from entrypoint.commands import evaluate
    from entrypoint.record import runlock

    run_dir = tmp_path / "out" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"status": "running"}))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from entrypoint.record.runlock import RunLock; "
            "l = RunLock(); l.take(Path(sys.argv[1])); print('held', flush=True); sys.stdin.read()",
            str(run_dir),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(BadInput) as exc:
            evaluate.evaluate(["run=r", f"OUTPUT_DIR={tmp_path / 'out'}"], {})
        assert f"is in use by another run: PID {holder.pid} " in str(exc.value)
    finally:
        holder.communicate("", timeout=30)
    with runlock.RunLock() as lock:  # the holder is gone: free again
        assert lock.take(run_dir)


def test_a_refused_start_leaves_no_directory_behind(tmp_path):
    out = tmp_path / "out"
    proc = train(tmp_path, out, "DATASET=/nonexistent/train.jsonl")
    assert proc.returncode == 2 and "file not found" in proc.stderr
    assert not out.exists()  # the lock made out/r/run.lock before the checks refused; both are gone


@pytest.mark.parametrize(
    ("name", "said"),
    [("../../x", "is a path, not a name"), ("/abs", "is a path, not a name"), ("..", "the parent")],
)
def test_run_name_outside_output_dir_is_refused_and_nothing_is_written(tmp_path, name, said):
    proc = train(tmp_path, tmp_path / "runs" / "out", f"RUN_NAME={name}")
    assert proc.returncode == 2 and f"error: RUN_NAME (command line): {name!r} " in proc.stderr, proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pids"] and not Path("/abs").exists()


# Deaths explained ---------------------------------------------------------------------------------------


def test_a_trainer_killed_with_sigkill_is_named_with_its_step_and_the_resume_hint(tmp_path):
    """ms-swift's `swift` CLI exits 247 when its worker is SIGKILLed (FAKE_WRAP plays it)."""
    out = tmp_path / "out"
    proc = start(tmp_path, out, "MAX_STEPS=200", FAKE_TRAINER="steps", FAKE_WRAP="1", FAKE_STEP_SECONDS="0.5")
    wait_for(out / "r" / "train" / "checkpoint-2" / "trainer_state.json", proc)
    os.kill(pids(tmp_path, "worker")[0], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stdout + stderr
    said = stdout.split("Its last lines:")[1]
    assert "trainer was killed by SIGKILL (exit status 247) (last step logged: 2 of 200)" in said
    assert "likely cause: " in said and ("someone or something" in said or "out-of-memory killer" in said)
    assert "it left train/checkpoint-2 (the newest complete checkpoint, exported to adapter/)" in said
    assert "run the same command again to resume from checkpoint-2" in said
    # its last lines are the lines before the death, the start-up dumps folded away
    assert "fake_argument_" not in said and "(layer_" not in said
    assert "[INFO:swift] model: PeftModelForCausalLM( ... (304 lines of start-up output" in said
    failure = manifest(out / "r")["failure"]
    assert failure["signal"] == "SIGKILL" and failure["returncode"] == 247
    assert failure["summary"].startswith("trainer was killed by SIGKILL")


def test_a_cuda_out_of_memory_death_is_one_line_with_the_predicted_peak_and_the_knob(tmp_path):
    proc = train(tmp_path, tmp_path / "out", FAKE_TRAINER="cuda-oom")
    assert proc.returncode == 1
    line = next(x for x in proc.stdout.splitlines() if "ran out of CUDA memory" in x)
    assert re.search(
        r"trainer ran out of CUDA memory on GPU 0 while allocating 2.00 GiB; the plan predicted a "
        r"peak of [\d.]+ of 24.0 GiB on GPU 0: lower PER_DEVICE_TRAIN_BATCH_SIZE \(now 2; "
        r"GRADIENT_ACCUMULATION_STEPS keeps the step the same\) or VLLM_GPU_MEMORY_UTILIZATION "
        r"\(now 0.4\) \(before its first step\)",
        line,
    ), line
    assert manifest(tmp_path / "out" / "r")["failure"]["summary"] == line.split("grpo-rig | ")[1]


# A full disk --------------------------------------------------------------------------------------------


SMALL = ("LORA_RANK=1", "SAVE_STEPS=1", "SAVE_TOTAL_LIMIT=1")  # a run whose plan fits the small volume


def test_a_full_disk_fails_cleanly_keeps_the_adapter_and_resumes_once_space_is_freed(tmp_path):
    with tmpfs(tmp_path / "vol", "80m") as out:
        run_dir = out / "r"
        done = train(tmp_path, out, *SMALL, "MAX_STEPS=1", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0")
        assert done.returncode == 0, done.stdout + done.stderr
        adapter = (run_dir / "adapter" / "adapter_model.safetensors").read_bytes()
        # the disk fills up during checkpoint-2's save
        full = train(tmp_path, out, *SMALL, "MAX_STEPS=3", FAKE_TRAINER="fill")
        assert full.returncode == 1, full.stdout + full.stderr
        assert "Traceback" not in full.stderr  # the entrypoint's own: none
        assert (
            "trainer exited with status 1: the disk is full (OSError: [Errno 28] No space left on device)"
            in full.stdout
        )
        assert "Its last lines:" not in full.stdout
        # the trainer's own traceback stays in its log: one line says where (cases re-run)
        assert "Traceback (most recent call last)" not in full.stdout
        assert "a traceback (its frames go to logs/trainer.log" in full.stdout
        assert "Traceback (most recent call last)" in (run_dir / "logs" / "trainer.log").read_text()
        data = manifest(run_dir)
        assert data["status"] == "failed"
        summary = data["failure"]["summary"]
        assert re.match(
            rf"disk full \(No space left on device\): {run_dir} has [\d.]+ MiB free of 80.0 MiB; "
            r"trainer exited with status 1 \(last step logged: 1 of 3\)$",
            summary,
        ), summary
        assert f"grpo-rig | {summary}" in full.stdout
        explanation = data["failure"]["explanation"]
        assert re.match(
            r"train/checkpoint-2 \([\d.]+ MiB\) was cut short by the full disk: delete it", explanation[1]
        )
        # how much to free: what validate asks of the run before it starts again (cases re-run)
        assert re.fullmatch(
            r"free space on that volume \(at least \d+ MiB free: one checkpoint, the export and "
            r"a margin\), then run the same command again to resume from checkpoint-1",
            explanation[-1],
        )
        assert [p.name for p in run_dir.rglob(".*")] == []  # no temporary file or reserve left behind
        assert (run_dir / "adapter" / "adapter_model.safetensors").read_bytes() == adapter  # still whole
        # free the space as told, then the same command resumes
        subprocess.run(["rm", "-rf", str(run_dir / "train" / "checkpoint-2")], check=True)
        again = train(tmp_path, out, *SMALL, "MAX_STEPS=3", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0")
        assert again.returncode == 0, again.stdout + again.stderr
        data = manifest(run_dir)
        assert data["status"] == "completed" and data["steps"]["completed"] == 3
        assert data["attempts"][-1]["resume_from"].endswith("train/checkpoint-1")


def test_an_os_error_in_export_ends_the_run_failed_not_running(tmp_path, monkeypatch):
    """In-process, with export's copy failing the way a full disk makes it fail."""

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(export, "copy_atomic", full)
    code = train_here(tmp_path, FAKE_TRAINER="ok")
    assert code == 1
    failure = manifest(tmp_path / "out" / "r")["failure"]
    assert manifest(tmp_path / "out" / "r")["status"] == "failed"
    assert (
        failure["summary"].startswith("disk full (No space left on device): ")
        and "MiB free" in failure["summary"]
    )
    assert failure["explanation"][-1].startswith("free space on that volume (at least ")
    assert failure["explanation"][-1].endswith(
        ", then run the same command again to resume from checkpoint-1"
    )


def test_a_volume_gone_read_only_while_preparing_ends_the_run_failed_saying_so(tmp_path, monkeypatch):
    def read_only(plan, printer):
        raise OSError(errno.EROFS, "Read-only file system", str(plan.run_dir / "data"))

    monkeypatch.setattr(train_command, "prepare", read_only)
    console = io.StringIO()
    code = train_here(tmp_path, console)
    assert code == 1 and pids(tmp_path, "trainer") == []
    data = manifest(tmp_path / "out" / "r")
    summary = (
        f"the entrypoint could not write {tmp_path / 'out' / 'r' / 'data'} while preparing the run: "
        "Read-only file system"
    )
    assert data["status"] == "failed" and data["failure"]["summary"].startswith(summary)
    assert summary in console.getvalue()


def test_a_bug_in_the_entrypoint_after_the_start_is_recorded_then_shown(tmp_path, monkeypatch):
    from entrypoint.supervise import startup

    def broken(events):
        raise RuntimeError("a bug")

    monkeypatch.setattr(startup, "read_events", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        train_here(tmp_path, FAKE_TRAINER="ok")
    data = manifest(tmp_path / "out" / "r")
    assert (
        data["status"] == "failed"
        and data["failure"]["reason"] == "the entrypoint failed: RuntimeError('a bug')"
    )


# SIGTERM at any moment ----------------------------------------------------------------------------------


def test_sigterm_during_the_merged_export_stops_the_run_and_its_export(tmp_path):
    out = tmp_path / "out"
    proc = start(tmp_path, out, "EXPORT_MERGED=true", FAKE_TRAINER="ok", FAKE_EXPORT="slow")
    wait_for(tmp_path / "pids" / "export.pids", proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stdout + stderr
    assert "Traceback" not in stderr
    data = manifest(out / "r")
    assert (
        data["status"] == "stopped"
        and data["failure"]["reason"] == "SIGTERM received during the merged export"
    )
    assert "adapter/adapter_model.safetensors" in data["exported"]  # what was exported stays recorded
    assert not any(alive(p) for p in pids(tmp_path, "export"))
    assert not (out / "r" / ".merged.tmp").exists()


def test_a_signal_while_preparing_is_recorded_as_stopped(tmp_path, monkeypatch):
    def interrupted(plan, printer):
        raise signals.Interrupted(signal.SIGTERM)  # what the handler raises when SIGTERM lands here

    monkeypatch.setattr(train_command, "prepare", interrupted)
    code = train_here(tmp_path, FAKE_TRAINER="ok")
    assert code == 143 and manifest(tmp_path / "out" / "r")["status"] == "stopped"
    assert pids(tmp_path, "trainer") == []


def test_a_signal_before_anything_is_written_exits_quietly(tmp_path, monkeypatch):
    from entrypoint import cli
    from entrypoint.world import host

    def interrupted(*args, **kwargs):
        raise signals.Interrupted(signal.SIGINT)

    monkeypatch.setattr(host, "gather", interrupted)
    assert cli.main(["train", f"recipe={RECIPE}", f"OUTPUT_DIR={tmp_path / 'out'}", "RUN_NAME=r"]) == 130
    assert not (tmp_path / "out").exists()


# The log pump -------------------------------------------------------------------------------------------


def test_a_log_that_cannot_be_written_never_stops_the_pump(tmp_path):
    """/dev/full answers every write with ENOSPC. A child writing far more than a pipe holds (64 KiB) must
    still run to its end: a dead pump would leave it blocked on its next write."""
    (tmp_path / "trainer.log").symlink_to("/dev/full")
    noisy = Process(
        "trainer", {}, [sys.executable, "-c", "for i in range(20000): print('line', i, 'x' * 40)"]
    )
    with supervisor.supervised(tmp_path, 2.0, printer.Printer(io.StringIO()), signals=False) as sup:
        child = sup.start(noisy)
        deadline = time.monotonic() + 60
        while child.popen.poll() is None:
            assert time.monotonic() < deadline, "the child blocked: nobody reads its output"
            time.sleep(0.1)
        assert sup.wait(child) == 0
    assert "No space left on device" in child.log_error
    assert list(child.tail)[-1] == "line 19999 " + "x" * 40


def test_a_rerun_with_another_learning_rate_is_refused_and_one_with_another_beta_says_so(tmp_path):
    """The checkpoint's optimizer and schedule would keep the old learning rate while the manifest said the
    new one: refused, naming RESUME_ONLY_MODEL. Another BETA resumes, saying which values changed, and the
    manifest records what each attempt trained with."""
    out = tmp_path / "out"
    done = train(
        tmp_path, out, "MAX_STEPS=2", "LEARNING_RATE=1e-4", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    again = train(
        tmp_path, out, "MAX_STEPS=3", "LEARNING_RATE=5e-4", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0"
    )
    assert again.returncode == 2 and "LEARNING_RATE: 1e-4 -> 5e-4" in again.stderr, (
        again.stdout + again.stderr
    )
    assert "RESUME_ONLY_MODEL=true" in again.stderr
    beta = train(
        tmp_path,
        out,
        "MAX_STEPS=3",
        "LEARNING_RATE=1e-4",
        "BETA=0.2",
        FAKE_TRAINER="steps",
        FAKE_STEP_SECONDS="0",
    )
    assert beta.returncode == 0, beta.stdout + beta.stderr
    assert "with changed values (BETA:" in beta.stdout + beta.stderr
    attempts = manifest(out / "r")["attempts"]
    assert attempts[-1]["values"]["BETA"] == "0.2" and attempts[0]["values"].get("BETA") != "0.2"


def test_a_trainer_that_stops_making_progress_is_ended_as_stalled_naming_what_it_was_doing(tmp_path):
    """After its second step the trainer goes silent for good (a reward that never returns): with
    STALL_TIMEOUT=3 the run ends `failed` within seconds, saying it stalled and where it waits (the training
    process's main thread, from the stacks each process writes into logs/stacks/); nothing is left running.
    The automatic bound: supervise/stall.py."""
    out = tmp_path / "out"
    started = time.monotonic()
    proc = train(
        tmp_path,
        out,
        "MAX_STEPS=5",
        "STALL_TIMEOUT=3",
        "STOP_GRACE_SECONDS=2",
        FAKE_TRAINER="steps",
        FAKE_STEP_SECONDS="0.2",
        FAKE_HANG_AFTER="2",
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said
    assert time.monotonic() - started < 60
    assert "trainer stalled: step 3/5" in said and "with no sign of progress for" in said, said
    assert "STALL_TIMEOUT=3" in said
    stacks = list((out / "r" / "logs" / "stacks").glob("*.txt"))
    assert any("in hung_reward" in f.read_text() for f in stacks), [f.name for f in stacks]
    assert "Where it waits:" in said and "in hung_reward" in said, said
    data = manifest(out / "r")
    assert data["status"] == "failed" and data["failure"]["reason"].startswith("stalled:")
    assert not any(alive(p) for p in pids(tmp_path, "trainer") + pids(tmp_path, "worker"))


def test_a_hang_after_the_last_step_ends_as_stalled_within_stall_timeout(tmp_path):
    """The final save or the exit hanging was never bounded (the heartbeat counted "step 4/3")."""
    out = tmp_path / "out"
    started = time.monotonic()
    proc = train(
        tmp_path,
        out,
        "MAX_STEPS=3",
        "STALL_TIMEOUT=3",
        "STOP_GRACE_SECONDS=2",
        FAKE_TRAINER="steps",
        FAKE_STEP_SECONDS="0.1",
        FAKE_HANG_AFTER="3",
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1 and time.monotonic() - started < 60, said
    assert "trainer stalled: step 3/3 done" in said and "4/3" not in said, said
    assert manifest(out / "r")["failure"]["reason"].startswith("stalled:")
    assert not any(alive(p) for p in pids(tmp_path, "trainer") + pids(tmp_path, "worker"))


def test_a_completed_run_resumed_an_hour_later_with_more_steps_trains_on(tmp_path):
    """The stall watch counted from the first attempt's "trainer ready" in the appended events file: a
    completed run started again with a larger MAX_STEPS was ended as stalled at once, its manifest turned
    `failed`, and running the same command again failed the same way forever."""
    out = tmp_path / "out"
    first = train(tmp_path, out, "MAX_STEPS=2", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0")
    assert first.returncode == 0, first.stdout + first.stderr
    events = out / "r" / "logs" / "events.jsonl"
    rows = [json.loads(line) for line in events.read_text().splitlines()]
    assert any(r.get("mark") == "trainer ready" for r in rows)
    events.write_text("".join(json.dumps({**r, "t": r["t"] - 3600}) + "\n" for r in rows))  # an hour ago
    again = train(tmp_path, out, "MAX_STEPS=3", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0.5")
    said = again.stdout + again.stderr
    assert again.returncode == 0 and "stalled" not in said, said
    data = manifest(out / "r")
    assert data["status"] == "completed" and data["steps"]["completed"] == 3


def test_a_resume_with_a_changed_dataset_says_so_and_keeps_each_attempts_inputs(tmp_path):
    """A dataset edited between two attempts trained the later steps on other rows, silently."""
    out = tmp_path / "out"
    data = tmp_path / "train.jsonl"
    data.write_text((ROOT / "examples" / "tcm" / "sample.jsonl").read_text())
    first = train(
        tmp_path, out, "MAX_STEPS=2", f"DATASET={data}", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0"
    )
    assert first.returncode == 0, first.stdout + first.stderr
    data.write_text("\n".join(data.read_text().splitlines()[:-1]) + "\n")
    again = train(
        tmp_path, out, "MAX_STEPS=3", f"DATASET={data}", FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0"
    )
    said = again.stdout + again.stderr
    assert again.returncode == 0 and f"warning: dataset {data} changed since the previous attempt" in said, (
        said
    )
    attempts = manifest(out / "r")["attempts"]
    assert attempts[0]["inputs"]["dataset"][0]["sha256"] != attempts[1]["inputs"]["dataset"][0]["sha256"]


def test_a_merged_export_that_hangs_ends_as_stalled_and_keeps_the_adapter(tmp_path):
    """The merged export was never bounded: a hung merge kept the run `running` forever."""
    out = tmp_path / "out"
    started = time.monotonic()
    proc = train(
        tmp_path, out, "EXPORT_MERGED=true", "STALL_TIMEOUT=3", FAKE_TRAINER="ok", FAKE_EXPORT="hang"
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1 and time.monotonic() - started < 90, said
    assert "export stalled: no output and no log line for" in said, said
    data = manifest(out / "r")
    assert data["status"] == "export_failed" and "stalled" in data["failure"], data["failure"]
    assert (out / "r" / "adapter").is_dir() and not (out / "r" / "merged").exists()
    assert not any(alive(p) for p in pids(tmp_path, "export"))
