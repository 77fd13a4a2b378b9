"""scripts/docker-check.sh (the Makefile's Docker targets) names what is missing: docker, its daemon,
Compose v2, the NVIDIA runtime (with the CPU override named). Fake `docker` commands on PATH play each
machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "docker-check.sh"
FAKE = """#!/bin/sh
case "$1 $2" in
  "info ") [ "{daemon}" = up ] || \
{{ echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1; }};;
  "info --format") [ "$3" = "{{{{json .Runtimes}}}}" ] && echo '{runtimes}' || echo null;;
  "compose version") [ "{compose}" = yes ] || exit 1;;
esac
exit 0
"""


def check(
    tmp_path: Path, *args: str, docker: dict | None, env: dict | None = None
) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("ls", "sh"):
        target = bin_dir / tool
        if not target.exists():
            target.symlink_to(shutil.which(tool))
    if docker is not None:
        (bin_dir / "docker").write_text(FAKE.format(**docker))
        (bin_dir / "docker").chmod(0o755)
    environ = {"PATH": str(bin_dir), "HOME": str(tmp_path), **(env or {})}
    return subprocess.run(
        ["/bin/bash", str(SCRIPT), *args], env=environ, capture_output=True, text=True, timeout=30
    )


UP = {"daemon": "up", "compose": "yes", "runtimes": '{"nvidia":{},"runc":{}}'}


@pytest.mark.parametrize(
    ("docker", "args", "says"),
    [
        (None, (), "docker is not installed"),
        ({**UP, "daemon": "down"}, (), "its daemon is not running"),
        ({**UP, "compose": "no"}, (), "Docker Compose v2 (`docker compose`) is missing"),
        ({**UP, "runtimes": '{"runc":{}}'}, ("gpu",), "COMPOSE_FILE=compose.yaml:compose.cpu.yaml"),
    ],
)
def test_each_missing_piece_is_named(tmp_path, docker, args, says):
    proc = check(tmp_path, *args, docker=docker)
    assert proc.returncode == 1 and says in proc.stderr, proc.stderr


def test_a_ready_machine_passes_and_the_cpu_override_skips_the_gpu_check(tmp_path):
    assert check(tmp_path, "gpu", docker=UP).returncode == 0
    no_gpu = {**UP, "runtimes": '{"runc":{}}'}
    assert check(tmp_path, docker=no_gpu).returncode == 0  # build and plan need no GPU
    assert (
        check(
            tmp_path, "gpu", docker=no_gpu, env={"COMPOSE_FILE": "compose.yaml:compose.cpu.yaml"}
        ).returncode
        == 0
    )
    assert os.access(SCRIPT, os.X_OK)


LOGGING = """#!/bin/sh
echo "$*" >> "{log}"
case "$1 $2" in
  "compose config") echo "grpo-rig:test";;
  "image inspect") [ "{built}" = yes ] || exit 1;;
  "compose build") [ "{built}" = unbuildable ] && exit 17;;
esac
exit 0
"""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.parametrize("built", ["no", "yes", "unbuildable"])
def test_a_container_target_builds_the_missing_image_through_make_build_first(tmp_path, built):
    """`make container-plan` without an image runs `make build` (whose failure names the fix) before
    `compose run`, which would otherwise build it itself; with the image there it only runs; a failed
    build stops there, naming the base-image mirror and the CA bundle, and to run the command again."""
    log = tmp_path / "docker.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(LOGGING.format(log=log, built=built))
    (bin_dir / "docker").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        ["make", "-s", "container-plan", "RECIPE=smoke", f"COMPOSE={bin_dir / 'docker'} compose"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    checks = ("info", "compose version")  # scripts/docker-check.sh's, tested above
    calls = [line for line in log.read_text().splitlines() if not line.startswith(checks)]
    run = "compose run --rm train plan recipe=smoke"
    if built == "unbuildable":
        assert proc.returncode != 0 and run not in calls
        assert "BASE_IMAGE=<your mirror" in proc.stdout and "CA_BUNDLE=" in proc.stdout
        assert "Then run your make command again" in proc.stdout
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if built == "no":
        assert "the image grpo-rig:test is not built yet" in proc.stdout
        assert calls == [
            "compose config --images train",
            "image inspect grpo-rig:test",
            "compose build train",
            run,
        ]
    else:
        assert calls == ["compose config --images train", "image inspect grpo-rig:test", run]
