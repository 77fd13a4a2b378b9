"""Run lifecycle: stop, resume, complete, refuse, redact (issue: nothing lost), on the suite's one real CPU
training (tests/conftest.py `lifecycle`: the smoke recipe stopped after its first checkpoint, then
resumed)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CLI_SECRET, SECRETS, SMOKE, SMOKE_STEPS, clean_env, read_jsonl, run_cli, snapshot

pytestmark = pytest.mark.slow


def test_sigterm_stops_every_child_and_marks_the_run_stopped(lifecycle):
    assert lifecycle["first_rc"] == 143, lifecycle["first_output"][-3000:]
    assert lifecycle["orphans"] == []
    stopped = lifecycle["stopped"]
    assert stopped["status"] == "stopped"
    assert stopped["steps"]["completed"] >= 1
    assert stopped["checkpoint"].startswith("train/checkpoint-")
    assert "adapter/adapter_model.safetensors" in stopped["exported"]  # the newest complete checkpoint


def test_restart_resumes_to_the_planned_steps_without_repeating_checkpointed_steps(lifecycle):
    second = lifecycle["second"]
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
    data = json.loads((lifecycle["run_dir"] / "manifest.json").read_text())
    assert data["status"] == "completed" and data["steps"] == {
        "completed": SMOKE_STEPS,
        "planned": SMOKE_STEPS,
    }
    resumed_from = data["attempts"][-1]["resume_from"]
    assert resumed_from and "checkpoint-" in resumed_from
    checkpoint_step = int(resumed_from.rsplit("-", 1)[1])
    steps = [
        int(r["global_step/max_steps"].split("/")[0])
        for r in read_jsonl(lifecycle["run_dir"] / "logging.jsonl")
        if "loss" in r
    ]
    assert sorted(set(steps)) == list(range(1, SMOKE_STEPS + 1))
    for step in range(1, checkpoint_step + 1):
        assert steps.count(step) == 1, f"step {step} (before the checkpoint resumed from) ran twice: {steps}"
    assert [a.get("status") for a in data["attempts"]] == ["stopped", "completed"]


@pytest.mark.torch
def test_merged_model_is_exported_and_loads(lifecycle):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    merged = lifecycle["run_dir"] / "merged"
    data = json.loads((lifecycle["run_dir"] / "manifest.json").read_text())
    assert data["merged"]["status"] == "completed"
    assert "--load_args" in data["merged"]["argv"] and "--external_plugins" in data["merged"]["argv"]
    assert any(k.startswith("merged/") and k.endswith(".safetensors") for k in data["exported"])
    model = AutoModelForCausalLM.from_pretrained(merged, torch_dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(merged)
    ids = tokenizer("Hello", return_tensors="pt").input_ids
    assert model.generate(ids, max_new_tokens=3, do_sample=False).shape[1] > ids.shape[1]


def test_rerun_of_a_completed_run_changes_nothing(lifecycle):
    before = snapshot(lifecycle["out"])
    proc = run_cli("train", *SMOKE, f"OUTPUT_DIR={lifecycle['out']}", "RUN_NAME=life", env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert f"already complete ({SMOKE_STEPS} steps)" in proc.stdout and "raise MAX_STEPS" in proc.stdout
    assert snapshot(lifecycle["out"]) == before


def test_recipe_change_on_resume_is_refused_naming_the_keys(lifecycle):
    before = snapshot(lifecycle["out"])
    proc = run_cli(
        "train",
        *SMOKE,
        f"OUTPUT_DIR={lifecycle['out']}",
        "RUN_NAME=life",
        "LORA_RANK=16",
        "REWARD_FUNCS=format_partial",
        env=clean_env(),
    )
    assert proc.returncode == 2
    assert (
        "LORA_RANK: '8' -> '16'" in proc.stderr
        and "REWARD_FUNCS" in proc.stderr
        and "new RUN_NAME" in proc.stderr
    )
    assert snapshot(lifecycle["out"]) == before


def test_planted_secrets_appear_in_no_file(lifecycle):
    for path in lifecycle["run_dir"].rglob("*"):
        if path.is_file():
            blob = path.read_bytes()
            for name, value in {**SECRETS, "WANDB_API_KEY": CLI_SECRET}.items():
                assert value.encode() not in blob, f"{name} leaked into {path}"
    recorded = lifecycle["stopped"]["resolved_recipe"]
    assert recorded["WANDB_API_KEY"] == "<redacted>"  # set, and shown as set
    assert recorded["WANDB_PROJECT"]["value"] == "grpo-rig-test"  # non-secrets stay readable
