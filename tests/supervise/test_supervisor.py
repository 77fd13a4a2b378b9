"""Supervision of the rollout server and the trainer, with a fake `swift` (tests/fakes/swift).

Case C10 (tests/cases.md): the rollout server is slow to start, or dies; the entrypoint waits on its health
endpoint with its own budget, starts the trainer only once it is healthy, and stops at once with the
rollout's last lines if it dies. No process is left holding a GPU or a port.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from entrypoint.world import ports
from tests.conftest import FAKE_SWIFT, FAKES, ROOT, clean_env

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

RECIPE = FAKES / "server.env"
CORPUS_MODELS = ROOT / "tests" / "corpus" / "models"


def env_for(tmp_path: Path, **fake: str) -> dict[str, str]:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir(exist_ok=True)
    return clean_env(GRPO_RIG_SWIFT=str(FAKE_SWIFT), FAKE_PID_DIR=str(pid_dir), **fake)


def free_port(base: int) -> int:
    """A free port from `base`, in a range of this xdist worker's own: two workers' tests looked up the same
    free port at once and the second run was refused before it started ("ROLLOUT_PORT ... is in use")."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return ports.first_free(base + 1000 * int(worker.removeprefix("gw") or 0))


def train_argv(tmp_path: Path, port: int, *pairs: str) -> list[str]:
    """`train` of the fake-server recipe into tmp_path/out, rollout on `port`."""
    return [
        sys.executable,
        "-m",
        "entrypoint",
        "train",
        f"recipe={RECIPE}",
        f"OUTPUT_DIR={tmp_path}/out",
        "RUN_NAME=r",
        f"ROLLOUT_PORT={port}",
        *pairs,
    ]


def train(tmp_path: Path, *pairs: str, timeout: float = 120, **fake: str) -> subprocess.CompletedProcess:
    argv = train_argv(tmp_path, free_port(18000), *pairs)
    return subprocess.run(
        argv, cwd=ROOT, env=env_for(tmp_path, **fake), capture_output=True, text=True, timeout=timeout
    )  # noqa: S603


def start(tmp_path: Path, port: int, **fake: str) -> subprocess.Popen:
    """`train` in the background with the fake swift; its output on a pipe."""
    env = env_for(tmp_path, **fake)
    return subprocess.Popen(
        train_argv(tmp_path, port),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # noqa: S603


def wait_for(path: Path, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.2)


def pids(tmp_path: Path) -> list[int]:
    return [int(line) for f in (tmp_path / "pids").glob("*.pids") for line in f.read_text().split()]


def assert_nothing_left(tmp_path: Path) -> None:
    alive = [
        p
        for p in pids(tmp_path)
        if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]
    assert alive == [], f"processes left behind: {alive}"


def manifest(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "r" / "manifest.json").read_text())


def test_trainer_starts_only_after_the_rollout_is_healthy(tmp_path):
    proc = train(tmp_path, FAKE_ROLLOUT="slow:3", FAKE_TRAINER="ok", CONSOLE="all")  # every child line
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.index("rollout server healthy") < out.index("fake trainer starting")
    assert "rollout server reachable" in out  # the trainer's own check of the server
    assert manifest(tmp_path)["status"] == "completed"
    assert (tmp_path / "out" / "r" / "adapter" / "adapter_model.safetensors").read_bytes() == b"fake weights"
    assert_nothing_left(tmp_path)


def test_rollout_that_dies_stops_the_run_with_its_last_lines(tmp_path):
    start = time.monotonic()
    proc = train(tmp_path, FAKE_ROLLOUT="die", FAKE_TRAINER="ok")
    assert proc.returncode == 1
    assert time.monotonic() - start < 30
    assert "rollout exited with status 3 before it was healthy" in proc.stdout
    assert "CUDA out of memory" in proc.stdout.split("Its last lines:")[1]
    assert not (tmp_path / "pids" / "trainer.pids").exists()  # the trainer never started
    assert "adapter:" not in proc.stdout  # nothing was exported, so no path is printed
    data = manifest(tmp_path)
    assert data["status"] == "failed" and data["failure"]["role"] == "rollout"
    assert any("CUDA out of memory" in line for line in data["failure"]["log_tail"])
    assert_nothing_left(tmp_path)


def test_rollout_never_healthy_hits_the_startup_budget(tmp_path):
    proc = train(tmp_path, "ROLLOUT_STARTUP_TIMEOUT=3", FAKE_ROLLOUT="never", FAKE_TRAINER="ok")
    assert proc.returncode == 1
    assert "was not healthy after 3 s (ROLLOUT_STARTUP_TIMEOUT)" in proc.stdout
    assert_nothing_left(tmp_path)


def test_trainer_failure_ends_the_rollout_too(tmp_path):
    proc = train(tmp_path, FAKE_ROLLOUT="healthy", FAKE_TRAINER="fail")
    assert proc.returncode == 1
    assert "trainer exited with status 7" in proc.stdout
    data = manifest(tmp_path)
    assert data["status"] == "failed" and data["failure"]["role"] == "trainer"
    assert "RuntimeError: fake trainer failure" in data["failure"]["log_tail"]
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize(
    ("mode", "signame"), [("crash-at-exit", "SIGABRT"), ("torchrun-crash-at-exit", "SIGABRT")]
)
def test_a_crash_after_training_finished_is_a_completed_run(tmp_path, mode, signame):
    """vLLM's sleep-mode teardown can kill the trainer at exit (vllm-project/vllm#16993): once ms-swift
    logged its end and the final checkpoint is there, nothing is lost, so the run completes, exit 0."""
    proc = train(tmp_path, FAKE_ROLLOUT="healthy", FAKE_TRAINER=mode)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"({signame}) after training had finished" in proc.stdout
    data = manifest(tmp_path)
    assert data["status"] == "completed" and data["failure"] is None
    assert data["trainer_exit"]["signal"] == signame and data["trainer_exit"]["accepted"] is True
    assert (
        "End time of running main" in data["trainer_exit"]["reason"]
        and "step 1 of 1" in data["trainer_exit"]["reason"]
    )
    assert (tmp_path / "out" / "r" / "adapter" / "adapter_model.safetensors").read_bytes() == b"fake weights"
    assert_nothing_left(tmp_path)


def test_a_crash_before_the_last_step_stays_failed(tmp_path):
    proc = train(tmp_path, FAKE_ROLLOUT="healthy", FAKE_TRAINER="crash-mid-run")
    assert proc.returncode == 1
    data = manifest(tmp_path)
    assert data["status"] == "failed" and data["failure"]["role"] == "trainer" and "trainer_exit" not in data
    assert "Segmentation fault" in "\n".join(data["failure"]["log_tail"])
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_stops_every_process_tree(tmp_path, sig, code):
    port = free_port(18200)
    proc = start(tmp_path, port, FAKE_ROLLOUT="healthy", FAKE_TRAINER="spawn")
    wait_for(tmp_path / "pids" / "grandchild.pids", proc)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == code, out
    assert manifest(tmp_path)["status"] == "stopped"
    assert_nothing_left(tmp_path)
    assert ports.is_free(port)


def test_child_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    port = free_port(18300)
    proc = start(tmp_path, port, FAKE_ROLLOUT="healthy", FAKE_TRAINER="hang")
    wait_for(tmp_path / "pids" / "trainer.pids", proc)
    time.sleep(1)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    assert "did not stop within 2 s: killing it" in out
    assert time.monotonic() - signalled < 20
    assert_nothing_left(tmp_path)


def test_rollout_port_already_taken_by_another_server_is_detected(tmp_path):
    """ms-swift's find_free_port would move to the next port; here a foreign server holds ours."""
    import http.server
    import threading

    port = free_port(18400)

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    foreign = http.server.HTTPServer(("127.0.0.1", port), Ok)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:
        env = env_for(tmp_path, FAKE_ROLLOUT="healthy", FAKE_TRAINER="ok")
        proc = subprocess.run(
            train_argv(tmp_path, port), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )  # noqa: S603
    finally:
        foreign.shutdown()
    assert proc.returncode == 2  # refused before anything started
    assert f"ROLLOUT_PORT {port}: is in use" in proc.stderr
    assert pids(tmp_path) == []


def test_listening_ports_are_read_from_the_child_process_tree(tmp_path):
    """After /health/ answers, train checks the rollout itself listens there (ms-swift's find_free_port
    silently moves to the next port when the one asked for is taken)."""
    from entrypoint.plan.build import Process
    from entrypoint.supervise import printer, probes, supervisor

    port = free_port(18500)
    sup = supervisor.Supervisor(
        tmp_path / "logs", 1, printer.Printer(io.StringIO()), base_env=env_for(tmp_path)
    )
    child = sup.start(
        Process("rollout", {}, [str(FAKE_SWIFT), "rollout", "--host", "127.0.0.1", "--port", str(port)])
    )
    try:
        sup.wait_healthy(child, f"http://127.0.0.1:{port}/health/", timeout=20)
        assert port in probes.listening_ports(child.pid)
    finally:
        sup.stop_all()


def test_a_failed_merged_export_is_not_completed_and_a_rerun_exports_only(tmp_path):
    """EXPORT_MERGED=true: the export fails -> exit 1, manifest `export_failed` naming the retry; the same
    command again runs the export alone (no trainer, no rollout) and completes the run."""
    proc = train(tmp_path, "EXPORT_MERGED=true", FAKE_EXPORT="fail")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = manifest(tmp_path)
    assert data["status"] == "export_failed" and "run the same command again" in data["failure"]
    assert (tmp_path / "out" / "r" / "adapter").is_dir() and not (tmp_path / "out" / "r" / "merged").exists()
    trainers = (tmp_path / "pids" / "trainer.pids").read_text().split()
    proc = train(tmp_path, "EXPORT_MERGED=true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "exporting the merged model only" in proc.stdout + proc.stderr
    assert (tmp_path / "pids" / "trainer.pids").read_text().split() == trainers  # no training again
    data = manifest(tmp_path)
    assert data["status"] == "completed" and data["merged"]["status"] == "completed"
    assert (tmp_path / "out" / "r" / "merged" / "model.safetensors").is_file()
    assert any(k.startswith("merged/") for k in data["exported"])
    assert_nothing_left(tmp_path)


def test_rollout_command_serves_until_stopped(tmp_path):
    """`rollout` (a node that only serves, for trainers elsewhere): health-gated, says how to reach it,
    sized by the planner, and SIGTERM stops the server's tree."""
    port = free_port(18400)
    # a model whose size the planner knows, and no batch values: the trainers' shape is not this node's
    model = tmp_path / "Qwen2.5-3B-Instruct"
    model.mkdir()
    (model / "config.json").write_bytes(
        (CORPUS_MODELS / "Qwen--Qwen2.5-3B-Instruct" / "config.json").read_bytes()
    )
    (model / "model.safetensors").write_bytes(b"")  # the fake server loads nothing; preflight wants weights
    recipe = tmp_path / "serve.env"
    recipe.write_text(
        "".join(
            line
            for line in RECIPE.read_text().splitlines(keepends=True)
            if not line.startswith(("PER_DEVICE", "GRADIENT_ACC", "MODEL="))
        )
        + f"MODEL={model}\n"
    )
    argv = [
        sys.executable,
        "-m",
        "entrypoint",
        "rollout",
        f"recipe={recipe}",
        "TRAIN_GPUS=",
        f"ROLLOUT_PORT={port}",
        f"OUTPUT_DIR={tmp_path}/out",
        "RUN_NAME=r",
    ]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env_for(tmp_path, FAKE_ROLLOUT="slow:1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    deadline = time.monotonic() + 60
    while not any("rollout server healthy" in line for line in lines):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines) + proc.stdout.read()
        lines.append(proc.stdout.readline())
    out = "".join(lines)
    assert f"ROLLOUT_PORT={port}" in out and "Traceback" not in out
    assert "no training on this node" in out
    assert "--max_num_seqs" in out  # the planner sized the server for the generation round
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out + rest
    assert_nothing_left(tmp_path)
    assert ports.is_free(port)
