"""vLLM colocated on one GPU, the path `make train-single` takes (issue: the locked stack on a real GPU)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import read_jsonl, run_cli

pytestmark = pytest.mark.gpu
# random weights never earn the countdown reward: this one varies, so the adapter gets a real update
PLUGIN = Path(__file__).parent / "plugins" / "gpu_test_rewards.py"


@pytest.fixture(scope="module")
def colocate_run(gpu_model, gpu_env, tmp_path_factory):
    """countdown-1x4090 as shipped on an emulated 24 GiB card, sleeping vLLM between rollouts (the
    setting whose teardown crashed at exit), three steps, with a reward random text can earn."""
    out = tmp_path_factory.mktemp("colocate")
    proc = run_cli(
        "train",
        "recipe=countdown-1x4090",
        f"MODEL={gpu_model}",
        "DATASET_GENERATOR=countdown",
        "EMULATE_VRAM_GB=24",
        "SLEEP_LEVEL=1",
        "MAX_STEPS=3",
        "SAVE_STEPS=2",
        "OFFLINE=true",
        f"EXTERNAL_PLUGINS={PLUGIN}",
        "REWARD_FUNCS=countdown ascii_share",
        f"OUTPUT_DIR={out}",
        "RUN_NAME=colocate",
        env=gpu_env,
        timeout=1500,
    )
    (out / "console.log").write_text(proc.stdout + proc.stderr)
    return proc, out / "colocate"


def test_finishes_completed_with_exit_status_0(colocate_run):
    proc, run = colocate_run
    manifest = json.loads((run / "manifest.json").read_text())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert manifest["status"] == "completed"
    assert manifest["steps"] == {"completed": 3, "planned": 3}
    # a crash after training would be accepted, but say why (manifest["trainer_exit"])
    if "trainer_exit" in manifest:
        assert (
            manifest["trainer_exit"]["accepted"]
            and "End time of running main" in manifest["trainer_exit"]["reason"]
        )


def test_adapter_lora_b_is_not_all_zero(colocate_run):
    from safetensors.torch import load_file

    _, run = colocate_run
    lora_b = [
        t for name, t in load_file(run / "adapter" / "adapter_model.safetensors").items() if "lora_B" in name
    ]
    assert lora_b and any(t.abs().max().item() > 0 for t in lora_b)


def test_vllm_generated_and_the_gpu_was_monitored(colocate_run):
    _, run = colocate_run
    assert (
        "Initializing a V1 LLM engine" in (run / "logs" / "trainer.log").read_text()
        or "LLM engine" in (run / "logs" / "trainer.log").read_text()
    )
    phases = {e["phase"] for e in read_jsonl(run / "logs" / "events.jsonl")}
    assert {"generate", "sync", "train"} <= phases
    samples = read_jsonl(run / "gpu.jsonl")
    assert samples and any("run_gib" in s for s in samples)


def test_measured_peak_within_the_plans_headroom(colocate_run):
    _, run = colocate_run
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed"  # a run that died early measures nothing worth comparing
    (peak,) = manifest["gpu_memory_peak"].values()
    assert peak["measured_by"].startswith("run's processes"), peak
    assert peak["measured_gib"] <= 24.0, peak  # the emulated card
    assert peak["measured_gib"] <= 1.15 * peak["predicted_gib"], peak  # the planner's calibrated promise


def test_vllm_sized_its_kv_cache_for_the_emulated_card(colocate_run, gpu_model):
    """vLLM read the 24 GiB card: its KV cache fits inside the planner's share of 24 GiB, not of the real GPU.
    The V1 engine logs the cache in tokens, the V0 engine (the planner's multi-step choice) in GiB."""
    _, run = colocate_run
    manifest = json.loads((run / "manifest.json").read_text())
    util = float(manifest["resolved_recipe"]["VLLM_GPU_MEMORY_UTILIZATION"]["value"])
    kv_gib = kv_cache_gib((run / "logs" / "trainer.log").read_text(), gpu_model)
    assert 0 < kv_gib < util * 24.0, (kv_gib, util)


def kv_cache_gib(log: str, model_dir: Path) -> float:
    """The KV cache vLLM 0.8.5 allocated, from its log: V1's "GPU KV cache size: N tokens" (kv_cache_utils.py)
    or V0's "the rest of the memory reserved for KV Cache is X GiB" (worker/worker.py)."""
    import re

    from entrypoint.plan import memory

    v0 = re.findall(r"reserved for KV Cache is ([\d.]+) ?GiB", log)
    if v0:
        return float(v0[0])
    (tokens,) = re.findall(r"GPU KV cache size: ([\d,]+) tokens", log)[:1]
    dims = memory.ModelDims.from_config(json.loads((model_dir / "config.json").read_text()))
    return memory.kv_gib(dims, 2, int(tokens.replace(",", "")))


def test_evaluate_uses_vllm_on_the_gpu(colocate_run, gpu_env):
    """`evaluate` of the run on the GPU: vLLM generates for the base model and the adapter (as a LoRA
    request), on the same emulated 24 GiB card, and the run's own rewards score both."""
    _, run = colocate_run
    site = str(Path(__file__).resolve().parents[2] / "entrypoint" / "child" / "site")
    env = {
        **gpu_env,
        "GRPO_RIG_EMULATE_VRAM_GB": "24",
        "PYTHONPATH": os.pathsep.join(p for p in (site, gpu_env.get("PYTHONPATH", "")) if p),
    }
    proc = run_cli("evaluate", f"run={run}", "EVAL_PROMPTS=8", "EVAL_GENERATIONS=2", env=env, timeout=900)
    (run / "evaluate-console.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "(vLLM)" in proc.stdout and "before/after:" in proc.stdout
    result = json.loads((run / "eval.json").read_text())
    assert result["engine"] == "vllm" and result["prompts"]["count"] == 8
    assert set(result["summary"]) == {"countdown", "ascii_share"}
    assert json.loads((run / "manifest.json").read_text())["evaluation"]["verdict"] == result["verdict"]
