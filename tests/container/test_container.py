"""The image and `docker compose run train recipe=...`, built and run by a real Docker engine.

One module-scoped build (`docker compose build`) on a local stand-in base image (Debian + Python 3.10,
scripts/make-test-base-image.sh: CI cannot pull nvidia/cuda), then:
- the smoke GRPO run through `docker compose run --rm train`, as a non-root host UID, leaves the adapter
  and a completed manifest in the host output directory, owned by that UID;
- `plan` prints a GPU plan from an inventory file, and refuses a GPU recipe without GPUs, naming the
  compose setting that gives the container its GPUs;
- editing entrypoint/ rebuilds only the project layers (the Python stack's layer stays cached);
- the build's CA bundle is nowhere in the image.
The build time and image size are printed (pytest -s not needed).

Engine: skipped when no Docker engine with Compose v2 answers, unless GRPO_RIG_REQUIRE_DOCKER=1 (CI,
.ci/run), which turns that into a failure. Other environment variables:
  GRPO_RIG_TEST_BASE_IMAGE  base image to build on (default grpo-rig-test-base:bookworm-py310)
  GRPO_RIG_TEST_IMAGE       tag of the image under test (default grpo-rig:test)
  GRPO_RIG_TEST_CA_BUNDLE   CA bundle for the build secret (default /etc/ssl/certs/ca-certificates.crt
                            when it exists; empty: no secret)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = os.environ.get("GRPO_RIG_TEST_BASE_IMAGE", "grpo-rig-test-base:bookworm-py310")
IMAGE = os.environ.get("GRPO_RIG_TEST_IMAGE", "grpo-rig:test")
PROJECT = "grpo-rig-test"  # compose project: its own cache volume, removed at the end
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")
CA_BUNDLE = os.environ.get("GRPO_RIG_TEST_CA_BUNDLE", str(SYSTEM_CA) if SYSTEM_CA.is_file() else "")
LOCK = ROOT / "requirements" / "runtime.lock"
LOCK_SHA256 = hashlib.sha256(LOCK.read_bytes()).hexdigest()
# Compose inputs a developer's shell may hold; the test sets its own.
INHERITED_INPUTS = ("HOST_UID", "HOST_GID", "CA_BUNDLE", "TORCH_CUDA_ARCH_LIST", "VERSION", "SOURCE")
# What the build context needs (.dockerignore keeps the rest out anyway).
CONTEXT = (
    "Dockerfile",
    ".dockerignore",
    "compose.yaml",
    "compose.cpu.yaml",
    "pyproject.toml",
    "requirements",
    "entrypoint",
    "recipes",
    "examples",
)


def _say(request: pytest.FixtureRequest, text: str) -> None:
    """Print past pytest's capture, so the numbers show in a plain `pytest -q` run."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print(f"\n[container] {text}", flush=True)


def _engine_problem() -> str | None:
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode != 0:
        return "no Docker engine answers `docker info` (scripts/docker-engine.sh starts one)"
    if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=60).returncode != 0:
        return "Docker Compose v2 (`docker compose`) is not installed (scripts/docker-engine.sh installs it)"
    base = subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True, timeout=60)
    if base.returncode != 0:
        return f"the test base image {BASE_IMAGE} does not exist (scripts/make-test-base-image.sh builds it)"
    return None


def compose_env(output: Path | None = None, data: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment for `docker compose`: CPU override, test project, test image, build inputs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    for key in INHERITED_INPUTS:
        env.pop(key, None)
    env.update(
        COMPOSE_FILE=os.pathsep.join(["compose.yaml", "compose.cpu.yaml"]),
        COMPOSE_PROJECT_NAME=PROJECT,
        GRPO_RIG_IMAGE=IMAGE,
        BASE_IMAGE=BASE_IMAGE,
        LOCK_SHA256=LOCK_SHA256,
        REVISION="container-test",
    )
    if CA_BUNDLE:
        env["CA_BUNDLE"] = CA_BUNDLE
    if output is not None:
        env["GRPO_RIG_OUTPUT"] = str(output)
    if data is not None:
        env["GRPO_RIG_DATA"] = str(data)
    env.update(extra)
    return env


def compose(
    *args: str, env: dict[str, str], cwd: Path = ROOT, timeout: float = 600
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "compose", "-p", PROJECT, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def docker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def build(env: dict[str, str], cwd: Path = ROOT) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = compose("build", "--progress", "plain", "train", env=env, cwd=cwd, timeout=3600)
    return proc, time.monotonic() - start


def mount_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """Fresh ./output and ./data stand-ins, readable by the container's user (tmp_path itself is 0700)."""
    output, data = tmp_path / "output", tmp_path / "data"
    for d in (output, data):
        d.mkdir()
        d.chmod(0o755)
    return output, data


@pytest.fixture(scope="module")
def image(request, tmp_path_factory) -> str:
    """The image built by `docker compose build` on the test base; its tag."""
    problem = _engine_problem()
    if problem:
        if os.environ.get("GRPO_RIG_REQUIRE_DOCKER") == "1":
            pytest.fail(f"GRPO_RIG_REQUIRE_DOCKER=1 but {problem}")
        pytest.skip(f"the container test cannot run: {problem}")
    dirs = tmp_path_factory.mktemp("compose")
    env = compose_env(dirs, dirs)
    proc, seconds = build(env)
    (dirs / "build.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (
        f"docker compose build failed (log: {dirs / 'build.log'}):\n{proc.stderr[-6000:]}"
    )
    size = int(docker("image", "inspect", "-f", "{{.Size}}", IMAGE).stdout.strip())
    cached = len(re.findall(r"^#\d+ CACHED$", proc.stderr + proc.stdout, re.M))
    _say(
        request,
        f"build: {seconds:.0f} s ({cached} steps cached) on {BASE_IMAGE}; image {IMAGE}: "
        f"{size} bytes ({size / 1e9:.2f} GB); log {dirs / 'build.log'}",
    )
    yield IMAGE
    compose("down", "--volumes", "--remove-orphans", env=env)
    # each build takes the tag from the last one, which stays behind untagged (a few GB a test run): remove
    # this image's untagged builds, nothing else
    docker("image", "prune", "--force", "--filter", "label=org.opencontainers.image.title=grpo-rig")


def test_smoke_run_through_compose_leaves_adapter_owned_by_host_user(image, request, tmp_path):
    # Run as the invoking user; as root (CI) as an unrelated UID, which is what proves the `user:` mapping.
    uid, gid = (os.getuid(), os.getgid()) if os.getuid() != 0 else (4321, 4321)
    output, data = mount_dirs(tmp_path)
    if os.getuid() == 0:
        os.chown(output, uid, gid)  # a host user's own ./output
    run_name = f"smoke-container-{uuid.uuid4().hex[:8]}"
    env = compose_env(output, data, HOST_UID=str(uid), HOST_GID=str(gid))
    start = time.monotonic()
    proc = compose(
        # one short step: this proves the image trains and exports; the host's smoke test runs all four
        "run",
        "--rm",
        "-T",
        "train",
        "recipe=smoke",
        f"RUN_NAME={run_name}",
        "MAX_STEPS=1",
        "SAVE_STEPS=1",
        "MAX_COMPLETION_LENGTH=16",
        env=env,
        timeout=2400,
    )
    seconds = time.monotonic() - start
    (tmp_path / "console.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    _say(request, f"smoke run in the container: {seconds:.0f} s as uid {uid}")

    run_dir = output / run_name
    adapter = run_dir / "adapter" / "adapter_model.safetensors"
    assert adapter.is_file() and adapter.stat().st_size > 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["image"]["lock_sha256"] == LOCK_SHA256
    assert manifest["image"]["revision"] == "container-test"
    assert manifest["model"]["source"] == "embedded"
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in [run_dir, *run_dir.rglob("*")]}
    assert owners == {(uid, gid)}, f"files in {run_dir} owned by {owners}, expected only {(uid, gid)}"


def test_plan_from_inventory_prints_rollout_and_nccl_decisions(image, tmp_path):
    env = compose_env(*mount_dirs(tmp_path))
    proc = compose(
        "run",
        "--rm",
        "-T",
        "train",
        "plan",
        "recipe=tcm-4x4090",
        "INVENTORY=/opt/grpo-rig/examples/inventories/5x4090-driver535.json",
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "swift rollout" in proc.stdout
    assert "NCCL_P2P_DISABLE=1" in proc.stdout


def test_gpu_recipe_without_gpus_is_refused_naming_the_compose_setting(image, tmp_path):
    env = compose_env(*mount_dirs(tmp_path))
    proc = compose("run", "--rm", "-T", "train", "plan", "recipe=tcm-4x4090", env=env)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "deploy.resources.reservations.devices" in proc.stderr


def test_editing_entrypoint_keeps_the_python_stack_layer_cached(image, request, tmp_path):
    # A copy of the build context with one more file under entrypoint/; built under another tag.
    context = tmp_path / "context"
    for name in CONTEXT:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            context.mkdir(exist_ok=True)
            shutil.copy2(src, context / name)
    probe = f"# cache probe {uuid.uuid4().hex}\n"
    (context / "entrypoint" / "_cache_probe.py").write_text(probe)
    tag = f"{IMAGE}-cache-probe"
    env = compose_env(tmp_path, tmp_path, GRPO_RIG_IMAGE=tag)
    try:
        proc, seconds = build(env, cwd=context)
        log = proc.stdout + proc.stderr
        (tmp_path / "build.log").write_text(log)
        assert proc.returncode == 0, log[-6000:]
        steps = _steps(log)
        sync = [s for s in steps.values() if "uv pip sync" in s["title"]]
        model = [s for s in steps.values() if "models.prepare" in s["title"]]
        project = [s for s in steps.values() if "COPY entrypoint/ entrypoint/" in s["title"]]
        assert len(sync) == 1 and sync[0]["cached"], f"the uv sync step was not cached:\n{log[-4000:]}"
        assert len(model) == 1 and model[0]["cached"], (
            f"the model conversion step was not cached:\n{log[-4000:]}"
        )
        assert len(project) == 1 and not project[0]["cached"], "the edited entrypoint/ was not copied again"
        shown = docker("run", "--rm", "--entrypoint", "cat", tag, "/opt/grpo-rig/entrypoint/_cache_probe.py")
        assert shown.stdout == probe
        _say(request, f"rebuild after editing entrypoint/: {seconds:.0f} s (stack and model layers cached)")
    finally:
        docker("image", "rm", "-f", tag)


def _steps(log: str) -> dict[str, dict]:
    """BuildKit plain-progress steps: id -> {title, cached}."""
    steps: dict[str, dict] = {}
    for line in log.splitlines():
        if m := re.match(r"^#(\d+) \[[^\]]*\] (.*)$", line):
            steps.setdefault(m[1], {"title": m[2], "cached": False})
        elif (m := re.match(r"^#(\d+) CACHED$", line)) and m[1] in steps:
            steps[m[1]]["cached"] = True
    return steps


def test_build_ca_bundle_is_not_in_the_image(image):
    config = json.loads(docker("image", "inspect", "-f", "{{json .Config}}", image).stdout)
    env = dict(item.split("=", 1) for item in config["Env"])
    for key in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "UV_NATIVE_TLS"):
        assert key not in env, f"{key} is baked into the image's environment"
    assert (
        docker(
            "run", "--rm", "--entrypoint", "sh", image, "-c", "test ! -e /run/secrets/ca_bundle"
        ).returncode
        == 0
    )
    if not CA_BUNDLE:
        return
    # Certificates in the build's bundle that the image's own trust store lacks (a TLS proxy's CA): none
    # of their lines may appear anywhere a CA bundle could have been baked, nor in the build history.
    image_store = docker(
        "run", "--rm", "--entrypoint", "cat", image, "/etc/ssl/certs/ca-certificates.crt"
    ).stdout
    foreign = [c for c in _pem_blocks(Path(CA_BUNDLE).read_text()) if c not in _pem_blocks(image_store)]
    history = docker("history", "--no-trunc", image).stdout
    places = (
        "/etc /usr/local/share /usr/share/ca-certificates /opt/venv/lib/python3.10/site-packages/certifi "
        "/root /cache /tmp"
    )
    for cert in foreign:
        marker = cert.splitlines()[3]  # a base64 line from inside the certificate
        found = docker(
            "run",
            "--rm",
            "--entrypoint",
            "sh",
            image,
            "-c",
            f"grep -rlF '{marker}' {places} 2>/dev/null || true",
        )
        assert found.stdout.strip() == "", f"a certificate from {CA_BUNDLE} is in the image: {found.stdout}"
        assert marker not in history


def _pem_blocks(text: str) -> set[str]:
    return {
        m.strip() for m in re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", text, re.S)
    }


def test_image_identity_labels_and_user(image):
    config = json.loads(docker("image", "inspect", "-f", "{{json .Config}}", image).stdout)
    labels, env = config["Labels"], dict(item.split("=", 1) for item in config["Env"])
    assert labels["org.opencontainers.image.revision"] == env["GRPO_RIG_REVISION"] == "container-test"
    assert labels["io.grpo-rig.lock.sha256"] == env["GRPO_RIG_LOCK_SHA256"] == LOCK_SHA256
    assert {"org.opencontainers.image.version", "org.opencontainers.image.source"} <= set(labels)
    assert config["User"] == "1000:1000"
    assert config["Entrypoint"] == ["/opt/venv/bin/python", "-m", "entrypoint"]
    assert env["OUTPUT_DIR"] == "/output" and env["EMBEDDED_MODEL_DIR"] == "/opt/grpo-rig/models"
