"""Liger's fused GRPO loss, a lever the planner turns on by itself, on real weights whose completions vary in
length step to step (the embedded SmolLM2, vLLM colocated), long enough for torch to recompile a compiled loss
many times (hooks/liger_eager.py says why it runs eagerly)."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import read_jsonl, run_cli

pytestmark = pytest.mark.gpu
STEPS = int(os.environ.get("GRPO_RIG_LEVER_STEPS", "20"))


@pytest.fixture(scope="module")
def liger_run(gpu_env, tmp_path_factory):
    """arithmetic-gpu with liger's loss and gradient checkpointing, 48 completions of up to 512 tokens per
    step in micro-batches of 6 (eight loss calls a step, each on its own padded length): the shape where
    liger's compiled loss failed 3 of 3 runs before step 1 on the lent H200 (docs/gpu-evidence.md,
    2026-12-04)."""
    out = tmp_path_factory.mktemp("levers")
    proc = run_cli(
        "train",
        "recipe=arithmetic-gpu",
        "USE_LIGER_KERNEL=true",
        "GRADIENT_CHECKPOINTING=true",
        "PER_DEVICE_TRAIN_BATCH_SIZE=6",
        "GENERATION_BATCH_SIZE=48",
        "MAX_COMPLETION_LENGTH=512",
        "VLLM_MAX_MODEL_LEN=1024",
        f"MAX_STEPS={STEPS}",
        "SAVE_STEPS=1000",
        "EMULATE_VRAM_GB=24",
        "OFFLINE=true",
        f"OUTPUT_DIR={out}",
        "RUN_NAME=liger",
        *os.environ.get("GRPO_RIG_LEVER_EXTRA", "").split(),
        env=gpu_env,
        timeout=1500,
    )
    (out / "console.log").write_text(proc.stdout + proc.stderr)
    return proc, out / "liger"


def test_every_step_trains_with_liger_s_loss_eager(liger_run):
    proc, run = liger_run
    manifest = json.loads((run / "manifest.json").read_text())
    assert proc.returncode == 0 and manifest["status"] == "completed", (
        proc.stdout[-3000:] + proc.stderr[-3000:]
    )
    assert manifest["steps"]["completed"] == STEPS
    trainer = next(p for p in manifest["processes"] if p["role"] == "trainer")
    assert "--use_liger_kernel" in trainer["argv"] and trainer["env"].get("GRPO_RIG_LIGER_EAGER") == "1"
    assert "hook liger_eager not installed" not in (run / "logs" / "trainer.log").read_text()


def test_the_completions_varied_in_length_so_a_compiled_loss_would_have_recompiled(liger_run):
    _, run = liger_run
    rows = [r for r in read_jsonl(run / "logging.jsonl") if "completions/max_length" in r]
    assert len(rows) == STEPS
    assert len({r["completions/max_length"] for r in rows}) > 3, [r["completions/max_length"] for r in rows]
    assert all(r["completions/min_length"] < r["completions/max_length"] for r in rows)
