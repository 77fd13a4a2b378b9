"""GRPO_RIG_SYNC_PROBE=PATH: after the first optimizer step, rank 0 checks that vLLM generates from the
weights the trainer trained (entrypoint/child/sync_probe.py says how; tests/gpu/test_weight_sync.py sets it in
the entrypoint's own environment, the plan never does). With GRPO_RIG_SYNC_PROBE_BREAK=1 the weight push is
skipped, the fault the check exists to see.
"""

from __future__ import annotations

import os

from entrypoint.child import runtime
from entrypoint.child.hooks.base import After, Hook, Target

GRPO_TRAINER = "swift.trainers.rlhf_trainer.grpo_trainer"
BREAK = "GRPO_RIG_SYNC_PROBE_BREAK"


def _install_sync_probe(grpo, path: str, break_sync: bool) -> None:
    if not runtime.rank0():
        return
    from entrypoint.child import sync_probe

    sync_probe.install(grpo.GRPOTrainer, path, break_sync)


def install(value: str, after: After) -> None:
    """On with a path (the JSON lines file the probe appends its record to)."""
    if value:
        break_sync = os.environ.get(BREAK) == "1"
        after.patch(GRPO_TRAINER, lambda grpo: _install_sync_probe(grpo, value, break_sync))


HOOK = Hook(
    name="sync_probe",
    variable="GRPO_RIG_SYNC_PROBE",
    targets=(
        Target(GRPO_TRAINER, "GRPOTrainer._move_model_to_vllm", "dce3819a920054cb"),
        # with sleep mode the probe runs at the next generation, where vLLM is awake
        Target(GRPO_TRAINER, "GRPOTrainer._engine_infer", "d60da8d8272500c1"),
        # an offloaded 4-bit model scores vLLM's answers at the step's next loss, back on the GPU
        Target(GRPO_TRAINER, "GRPOTrainer.compute_loss", "eddd820e349cd5f8"),
        # what the probe reads of the trainer and its engine
        Target(GRPO_TRAINER, "GRPOTrainer.prepare_vllm", "62ee11a2af9769af"),
    ),
    upstream=("ms-swift==3.6.4",),
    why="A sync that never reaches vLLM leaves every rollout on the base model while training goes on and "
    "nothing fails; the probe compares vLLM's greedy answers with the trainer's model, adapter on and off, "
    "after the first optimizer step.",
    saves="no time: it is the evidence that colocated training learns from its own samples (the synced run "
    "against the run with GRPO_RIG_SYNC_PROBE_BREAK=1 in tests/gpu/test_weight_sync.py; "
    "docs/gpu-evidence.md)",
    delete_when="when tests/gpu/test_weight_sync.py no longer needs it: it is a test instrument, to keep "
    "while ms-swift's GRPOTrainer._move_model_to_vllm copies the merged weights into a colocated engine",
    install=install,
)
