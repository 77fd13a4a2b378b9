"""No GPU where the recipe needs one (case C03 of tests/cases.md), and rollout-server keys without a
rollout server: the layout's refusals (entrypoint/plan/layout.py) as `train`, `validate` and `doctor` print
them, with the fix named. A refused `train` exits 2 and starts nothing (the fake `swift`, tests/fakes/swift,
records every start)."""

from __future__ import annotations

import pytest

from tests.conftest import INVENTORIES, clean_env, inventory_file, refused, run_cli

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

# C03: no GPU in the container ------------------------------------------------------------------------


def test_c03_no_gpu_names_the_compose_block_and_the_toolkit(tmp_path):
    inv = inventory_file(
        tmp_path,
        "1x4090-driver535",
        gpus=[],
        p2p=[],
        driver_version=None,
        nvml_error="NVML Shared Library Not Found",
    )
    err = refused(
        tmp_path, "recipe=countdown-1x4090", f"INVENTORY={inv}", extra_env={"GRPO_RIG_VERSION": "test"}
    )
    assert "No GPU is visible inside the container (NVML Shared Library Not Found)" in err
    assert "deploy.resources.reservations.devices" in err and "NVIDIA Container Toolkit" in err
    assert "Traceback" not in err


def test_no_gpu_on_a_host_suggests_an_example_inventory(tmp_path):
    """Outside the image (no GRPO_RIG_VERSION), `plan`/`validate` on a laptop: no talk of the container."""
    inv = inventory_file(
        tmp_path,
        "1x4090-driver535",
        gpus=[],
        p2p=[],
        driver_version=None,
        nvml_error="NVML Shared Library Not Found",
    )
    proc = run_cli("validate", "recipe=countdown-1x4090", f"INVENTORY={inv}", env=clean_env())
    assert proc.returncode == 2
    assert "No GPU is visible on this machine" in proc.stderr and "inside the container" not in proc.stderr
    assert "INVENTORY=examples/inventories/1x4090-driver535.json" in proc.stderr


def test_c03_doctor_without_a_gpu_gives_the_same_help():
    inside = run_cli("doctor", env=clean_env(GRPO_RIG_VERSION="test"))
    assert inside.returncode == 0 and "deploy.resources.reservations.devices" in inside.stdout
    assert "NVIDIA Container Toolkit" in inside.stdout
    here = run_cli("doctor", env=clean_env())
    assert "INVENTORY=examples/inventories/1x4090-driver535.json" in here.stdout


def test_c03_no_gpu_from_real_nvml_on_this_machine(tmp_path):
    """This machine has no GPU: the real NVML probe must give the same one-paragraph answer."""
    err = refused(tmp_path, "recipe=countdown-1x4090")  # on the host: no GRPO_RIG_VERSION
    assert "No GPU is visible on this machine" in err and "Traceback" not in err
    err = refused(tmp_path, "recipe=countdown-1x4090", extra_env={"GRPO_RIG_VERSION": "test"})  # the image
    assert "deploy.resources.reservations.devices" in err and "Traceback" not in err


def test_rollout_server_keys_without_a_rollout_server_are_refused(tmp_path):
    err = refused(
        tmp_path,
        "recipe=countdown-1x4090",
        f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}",
        "ROLLOUT_GPU_MEMORY_UTILIZATION=0.5",
    )
    assert (
        "rollout-server settings, but this run has no rollout server" in err
        and "VLLM_GPU_MEMORY_UTILIZATION" in err
    )


def test_no_gpu_with_the_default_train_gpus_is_the_missing_gpu_fault(tmp_path):
    inv = inventory_file(
        tmp_path,
        "1x4090-driver535",
        gpus=[],
        p2p=[],
        driver_version=None,
        nvml_error="NVML Shared Library Not Found",
    )
    err = refused(
        tmp_path,
        "recipe=countdown-1x4090",
        f"INVENTORY={inv}",
        "USE_VLLM=false",
        "VLLM_GPU_MEMORY_UTILIZATION=",
        "VLLM_MAX_MODEL_LEN=",
        "SLEEP_LEVEL=",
        "TRAIN_GPUS=all",
    )
    assert "No GPU is visible on this machine" in err and "TRAIN_GPUS=none" in err
    assert err.count("error:") == 1  # one clear message, no consequences of it
