"""Memory planner (../shared/cases C09) and its calibration against real GRPO runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from entrypoint import memory
from tests.conftest import INVENTORIES, ROOT, clean_env, refused, run_cli

CALIBRATION = ROOT / "docs" / "benchmarks" / "memory-calibration.json"


@pytest.mark.parametrize(
    ("model", "billions"),
    # published parameter counts (model cards)
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", 0.49),
        ("Qwen/Qwen2.5-1.5B-Instruct", 1.54),
        ("Qwen/Qwen2.5-3B-Instruct", 3.09),
        ("Qwen/Qwen2.5-7B-Instruct", 7.62),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", 0.135),
    ],
)
def test_parameter_counts_from_config(model, billions):
    config = memory.shipped_config(model)
    assert memory.ModelDims.from_config(config).params / 1e9 == pytest.approx(billions, rel=0.01)


def test_c09_3b_colocated_with_default_vllm_share_is_refused_naming_the_knobs(tmp_path):
    err = refused(
        tmp_path,
        "recipe=countdown-1x4090",
        f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}",
        "MODEL=Qwen/Qwen2.5-3B-Instruct",
        "VLLM_GPU_MEMORY_UTILIZATION=",  # ms-swift's default 0.9
        "SLEEP_LEVEL=",
        "NUM_GENERATIONS=8",
        "MAX_COMPLETION_LENGTH=1024",
        "PER_DEVICE_TRAIN_BATCH_SIZE=8",
        "GRADIENT_ACCUMULATION_STEPS=1",
    )
    assert "memory: does not fit: predicted" in err and "GPU 0" in err and "vLLM 21.6" in err
    for knob in (
        "VLLM_GPU_MEMORY_UTILIZATION",
        "SLEEP_LEVEL=1",
        "OFFLOAD_MODEL",
        "MAX_COMPLETION_LENGTH",
        "PER_DEVICE_TRAIN_BATCH_SIZE",
    ):
        assert knob in err


def test_c09_memory_check_warn_lets_the_user_try(tmp_path):
    proc = run_cli(
        "validate", "recipe=countdown-1x4090", f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}", "MODEL=Qwen/Qwen2.5-3B-Instruct",
        "VLLM_GPU_MEMORY_UTILIZATION=0.9", "PER_DEVICE_TRAIN_BATCH_SIZE=8", "MAX_COMPLETION_LENGTH=1024",
        "GRADIENT_ACCUMULATION_STEPS=1", "GENERATION_BATCH_SIZE=", "MEMORY_CHECK=warn", f"OUTPUT_DIR={tmp_path}", env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "warning: memory: does not fit" in proc.stdout


@pytest.mark.parametrize(
    ("recipe", "inventory", "extra"),
    [
        ("countdown-1x4090", "1x4090-driver535", []),
        ("smoke-gpu", "1x4090-driver535", []),
        (
            "tcm-4x4090",
            "5x4090-driver535",
            [
                f"DATASET={ROOT / 'examples/tcm/sample.jsonl'}",
                "PER_DEVICE_TRAIN_BATCH_SIZE=1",
                "GRADIENT_ACCUMULATION_STEPS=3",
            ],
        ),
    ],
)
def test_c09_shipped_gpu_recipes_fit_24gb_with_headroom(recipe, inventory, extra):
    proc = run_cli(
        "plan",
        "--json",
        f"recipe={recipe}",
        f"INVENTORY={INVENTORIES / f'{inventory}.json'}",
        *extra,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    estimates = json.loads(proc.stdout)["memory"]
    assert estimates
    for e in estimates:
        if e["role"].startswith("rollout"):
            continue
        assert e["peak_gib"] <= 0.9 * e["card_gib"], e


def test_shipped_single_gpu_recipe_gets_an_explicit_fitting_vllm_share():
    """C09: never ms-swift's default 0.9 on a shared card; the planner sizes it when the recipe does not."""
    proc = run_cli(
        "plan",
        "--json",
        "recipe=countdown-1x4090",
        f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    argv = plan["processes"][0]["argv"]
    util = float(argv[argv.index("--vllm_gpu_memory_utilization") + 1])
    assert 0.1 <= util < 0.9
    assert {c["key"] for c in plan["shape"]} >= {"VLLM_GPU_MEMORY_UTILIZATION", "PER_DEVICE_TRAIN_BATCH_SIZE"}


def test_emulated_card_size_is_used():
    proc = run_cli(
        "plan",
        "--json",
        "recipe=countdown-1x4090",
        f"INVENTORY={INVENTORIES / '2xA100-nvlink-ib.json'}",
        "EMULATE_VRAM_GB=24",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    (gpu0,) = plan["memory"]
    util = float(next(c["value"] for c in plan["shape"] if c["key"] == "VLLM_GPU_MEMORY_UTILIZATION"))
    assert gpu0["card_gib"] == 24.0 and gpu0["parts"]["vLLM"] == pytest.approx(util * 24, abs=0.01)


def test_dedicated_rollout_gpu_too_small_for_one_sequence_is_refused(tmp_path):
    err = refused(
        tmp_path, "recipe=tcm-4x4090", f"INVENTORY={INVENTORIES / '5x4090-driver535.json'}", f"DATASET={ROOT / 'examples/tcm/sample.jsonl'}",
        "PER_DEVICE_TRAIN_BATCH_SIZE=1", "GRADIENT_ACCUMULATION_STEPS=3", "ROLLOUT_GPU_MEMORY_UTILIZATION=0.15", "ROLLOUT_MAX_MODEL_LEN=32768",
    )  # fmt: skip
    assert "ROLLOUT_GPU_MEMORY_UTILIZATION" in err and "vLLM would refuse to start" in err


def test_more_memory_for_more_tokens_and_full_fine_tuning():
    config = memory.shipped_config("Qwen/Qwen2.5-1.5B-Instruct")
    base = memory.Workload(memory.ModelDims.from_config(config), 2, False, 8, 4, 4, 200, 256)
    longer = memory.Workload(memory.ModelDims.from_config(config), 2, False, 8, 4, 4, 200, 1024)
    full = memory.Workload(
        memory.ModelDims.from_config(config), 2, True, 8, 4, 4, 200, 256, reference_copy=True
    )
    zero2 = memory.Workload(
        memory.ModelDims.from_config(config),
        2,
        True,
        8,
        4,
        4,
        200,
        256,
        reference_copy=True,
        zero_stage=2,
        world=4,
    )
    peak = lambda w: memory.estimate_training(w).peak  # noqa: E731
    assert peak(base) < peak(longer) and peak(base) < peak(full)
    assert peak(zero2) < peak(full) * 1.1  # fp32 states, but a quarter of them


def test_calibration_measurements_are_committed_and_the_planner_is_within_15_percent():
    sys.path.insert(0, str(ROOT))
    from bench.fit_memory import workload

    data = json.loads(CALIBRATION.read_text())
    measured = [m for m in data["measurements"] if m.get("measured_reserved_gib")]
    assert len(measured) >= 6
    assert {m["model"] for m in measured} == {"Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"}
    assert {m["train_type"] for m in measured} == {"lora", "full"}
    assert {m["num_generations"] for m in measured} >= {2, 8}
    assert {m["gradient_checkpointing"] for m in measured} == {True, False}
    for m in measured:
        predicted = memory.estimate_training(workload(m)).peak
        assert predicted == pytest.approx(m["measured_reserved_gib"], rel=0.15), m["name"]


def test_vllm_colocate_calibration_card_peaks_within_15_percent():
    """Real vLLM 0.8.5.post1 colocate runs on a 24 GiB-capped H200 (NVML, the run's own processes)."""
    sys.path.insert(0, str(ROOT))
    from bench.fit_memory import colocate_prediction

    data = json.loads(CALIBRATION.read_text())
    measured = [m for m in data["colocate_measurements"] if m.get("measured_nvml_gib")]
    assert len(measured) >= 4
    assert {m["sleep_level"] for m in measured} == {0, 1}
    assert len({m["per_device_train_batch_size"] for m in measured}) >= 2
    assert len({m["vllm_gpu_memory_utilization"] for m in measured}) >= 2
    for m in measured:
        assert colocate_prediction(m) == pytest.approx(m["measured_nvml_gib"], rel=0.15), m["name"]


def test_emulate_vram_hook_caps_torch_when_cuda_initialises():
    code = "import torch; print(len(torch.cuda._queued_calls))"
    site = str(ROOT / "entrypoint" / "site")
    base = clean_env(PYTHONPATH=site)
    with_cap = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, "GRPO_RIG_EMULATE_VRAM_GB": "24"},
        capture_output=True,
        text=True,
    )
    without = subprocess.run([sys.executable, "-c", code], env=base, capture_output=True, text=True)
    assert int(with_cap.stdout.split()[-1]) == int(without.stdout.split()[-1]) + 1, with_cap.stderr
