"""Run lifecycle: stop, resume, complete, refuse, redact (issue: nothing lost). Real smoke-recipe runs,
shortened (3 steps, a checkpoint every step) so that a stop lands after the first checkpoint."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, clean_env, read_jsonl, run_cli

pytestmark = pytest.mark.slow

SHORT = [
    "recipe=smoke",
    "MAX_STEPS=3",
    "SAVE_STEPS=1",
    "SAVE_TOTAL_LIMIT=1",
    "PER_DEVICE_TRAIN_BATCH_SIZE=4",
    "MAX_COMPLETION_LENGTH=24",
    "STOP_GRACE_SECONDS=10",
]
# Planted in the environment. (Not MODELSCOPE_API_TOKEN: ms-swift logs in to ModelScope with it while
# parsing its arguments, which needs the network.)
SECRETS = {
    "HF_TOKEN": "hf_plantedSECRETvalue123",
    "MY_SERVICE_API_KEY": "svcPLANTEDkey456789",
    "MY_DB_PASSWORD": "pw-PLANTED-789xyz",
}
CLI_SECRET = "cliPLANTEDsecret000"  # also given as a recipe key on the command line (REPORT_TO=none: unused)


def snapshot(root: Path) -> dict[str, tuple[str, float]]:
    """Every file's sha256 and mtime, but run.lock's: it names the last command that held the directory
    (runlock.py), which a rerun is."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "run.lock"
    }


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory):
    """Start a run, SIGTERM it after its first complete checkpoint, then start it again."""
    out = tmp_path_factory.mktemp("lifecycle")
    env = clean_env(**SECRETS)
    argv = [
        sys.executable,
        "-m",
        "entrypoint",
        "train",
        *SHORT,
        f"OUTPUT_DIR={out}",
        "RUN_NAME=life",
        "WANDB_PROJECT=grpo-rig-test",
        f"WANDB_API_KEY={CLI_SECRET}",
    ]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )  # noqa: S603
    run_dir = out / "life"
    deadline = time.monotonic() + 600
    while not (run_dir / "train" / "checkpoint-1" / "trainer_state.json").exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.5)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    first_output, _ = proc.communicate(timeout=120)
    stopped = json.loads((run_dir / "manifest.json").read_text())
    orphans = [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    second = run_cli(
        "train", *SHORT, f"OUTPUT_DIR={out}", "RUN_NAME=life", "EXPORT_MERGED=true", env=env, timeout=900
    )
    return {
        "out": out,
        "run_dir": run_dir,
        "first_rc": proc.returncode,
        "first_output": first_output,
        "stopped": stopped,
        "orphans": orphans,
        "second": second,
    }


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
    assert data["status"] == "completed" and data["steps"] == {"completed": 3, "planned": 3}
    resumed_from = data["attempts"][-1]["resume_from"]
    assert resumed_from and "checkpoint-" in resumed_from
    checkpoint_step = int(resumed_from.rsplit("-", 1)[1])
    steps = [
        int(r["global_step/max_steps"].split("/")[0])
        for r in read_jsonl(lifecycle["run_dir"] / "logging.jsonl")
        if "loss" in r
    ]
    assert sorted(set(steps)) == [1, 2, 3]
    for step in range(1, checkpoint_step + 1):
        assert steps.count(step) == 1, f"step {step} (before the checkpoint resumed from) ran twice: {steps}"
    assert [a.get("status") for a in data["attempts"]] == ["stopped", "completed"]


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
    proc = run_cli("train", *SHORT, f"OUTPUT_DIR={lifecycle['out']}", "RUN_NAME=life", env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "already complete (3 steps)" in proc.stdout and "raise MAX_STEPS" in proc.stdout
    assert snapshot(lifecycle["out"]) == before


def test_recipe_change_on_resume_is_refused_naming_the_keys(lifecycle):
    before = snapshot(lifecycle["out"])
    proc = run_cli(
        "train",
        *SHORT,
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
