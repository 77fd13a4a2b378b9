"""The main job: a real GRPO run through ms-swift on the embedded model (issue: GRPO end to end), on the
suite's one shared CPU training (tests/conftest.py `lifecycle`)."""

from __future__ import annotations

import json
import math

import pytest

from entrypoint.record import manifest
from tests.conftest import ROOT, SMOKE_STEPS, clean_env, read_jsonl, run_cli

pytestmark = pytest.mark.slow


def test_rewards_are_finite_and_vary(smoke_run):
    steps = [row for row in read_jsonl(smoke_run / "logging.jsonl") if "reward" in row]
    # LOGGING_STEPS=1; the shared run was stopped and resumed, so a step after its checkpoint may appear twice
    assert sorted({int(r["global_step/max_steps"].split("/")[0]) for r in steps}) == list(
        range(1, SMOKE_STEPS + 1)
    )
    for row in steps:
        assert math.isfinite(row["reward"]) and math.isfinite(row["reward_std"])
        assert math.isfinite(row["rewards/CountdownEquation/mean"])
        assert math.isfinite(row["rewards/ThinkAnswerFormat/mean"])
    assert any(row["reward_std"] > 0 for row in steps), "no reward variance: GRPO learned nothing"
    assert any(row["grad_norm"] > 0 for row in steps)


def test_completions_are_not_empty(smoke_run):
    tables = read_jsonl(smoke_run / "train" / "completions.jsonl")
    completions = [c for table in tables for c in table["completion"]]
    assert completions and all(c.strip() for c in completions)


def test_lora_b_weights_moved_from_zero(smoke_run):
    from safetensors.torch import load_file

    weights = load_file(smoke_run / "adapter" / "adapter_model.safetensors")
    lora_b = [t for name, t in weights.items() if "lora_B" in name]
    assert lora_b, "no LoRA B matrices in the adapter"
    assert any(t.abs().max().item() > 0 for t in lora_b), "LoRA B is still all zero (it starts at zero)"


def test_adapter_names_the_recipe_model_and_loads_with_peft(smoke_run):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((smoke_run / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    base_path = manifest.read(smoke_run)["model"]["path"]
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    base = AutoModelForCausalLM.from_pretrained(base_path, torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(smoke_run / "adapter"))
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say hello."}], add_generation_prompt=True, return_tensors="pt"
    )
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert text.strip()


def test_manifest_hashes_match_files(smoke_run):
    data = manifest.read(smoke_run)
    assert data["status"] == "completed"
    assert data["steps"] == {"completed": SMOKE_STEPS, "planned": SMOKE_STEPS}
    assert "adapter/adapter_model.safetensors" in data["exported"]
    assert "logging.jsonl" in data["exported"]
    assert manifest.verify(smoke_run) == []
    # what ran is recorded exactly
    trainer = next(p for p in data["processes"] if p["role"] == "trainer")
    # one process: ms-swift's worker file itself, as its CLI would run it (plan._worker_directly)
    assert trainer["argv"][1].endswith("swift/cli/rlhf.py") and trainer["argv"][2:4] == [
        "--rlhf_type",
        "grpo",
    ]
    line = next(
        i
        for i, text in enumerate((ROOT / "recipes" / "smoke.env").read_text().splitlines(), 1)
        if text.startswith("NUM_GENERATIONS=")
    )
    assert data["resolved_recipe"]["NUM_GENERATIONS"] == {"value": "4", "source": f"recipes/smoke.env:{line}"}
    assert data["versions"]["ms-swift"] == "3.6.4"


def test_manifest_detects_a_changed_file(smoke_run, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    (copy / "adapter" / "adapter_config.json").write_text("{}")
    assert manifest.verify(copy) == ["adapter/adapter_config.json"]


def test_a_real_evaluation_of_the_smoke_runs_adapter(smoke_run):
    """`evaluate` on the smoke run (here, beside the other users of the smoke_run fixture, so a parallel
    test run trains it once)."""
    proc = run_cli(
        "evaluate", f"run={smoke_run}", "EVAL_PROMPTS=3", "EVAL_GENERATIONS=2", env=clean_env(), timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "before/after: countdown" in proc.stdout and "format_partial" in proc.stdout
    result = json.loads((smoke_run / "eval.json").read_text())
    assert result["prompts"]["count"] == 3 and "training tasks removed" in result["prompts"]["how"]
    for name in ("countdown", "format_partial"):
        s = result["summary"][name]
        assert 0.0 <= s["base"]["mean"] <= 1.0 and s["base"]["low"] <= s["base"]["mean"] <= s["base"]["high"]
    assert (smoke_run / "eval.png").stat().st_size > 1000 and "| format_partial |" in (
        smoke_run / "eval.md"
    ).read_text()
    manifest = json.loads((smoke_run / "manifest.json").read_text())
    assert manifest["evaluation"]["verdict"] == result["verdict"]
    assert manifest["evaluation"]["checkpoint"] == result["checkpoint"]  # the adapter it judged
    # the engine EVAL_ENGINE=auto resolved to on the CPU, and the base as the trainer loaded it (bf16)
    assert manifest["evaluation"]["engine"] == "hf" and manifest["evaluation"]["quantized"] is None


def test_a_rerun_of_the_smoke_run_repeats_its_first_step(smoke_run):
    """`rerun` of the real smoke run on the CPU (same seed, dataset and model, one step): the first step's
    prompts, completions and rewards are the run's own. This is what the README promises of a rerun on the
    CPU; on a GPU, vLLM's sampling and CUDA kernels are not bitwise deterministic and only the values, the
    inputs and the argv are repeated."""
    proc = run_cli(
        "rerun",
        f"run={smoke_run}",
        "RUN_NAME=life-rerun",
        "MAX_STEPS=1",
        "EXPORT_MERGED=false",
        env=clean_env(),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    again = smoke_run.parent / "life-rerun"
    record = manifest.read(again)["rerun_of"]
    assert record["drift"] == [] and record["argv_changes"] == ["--max_steps 3 -> --max_steps 1"], record
    first, repeated = (read_jsonl(run / "train" / "completions.jsonl")[0] for run in (smoke_run, again))
    assert first["step"] == repeated["step"] and set(first["step"]) == {"1"}
    assert repeated["prompt"] == first["prompt"], "the dataset's order differs: not the same seed?"
    assert repeated["completion"] == first["completion"], "same seed and inputs, other completions"
    rewards = [k for k in first if k not in ("step", "prompt", "completion")]
    assert rewards and all(repeated[k] == first[k] for k in rewards)
    inputs, repeated_inputs = manifest.read(smoke_run)["inputs"], manifest.read(again)["inputs"]
    assert [d["sha256"] for d in repeated_inputs["dataset"]] == [d["sha256"] for d in inputs["dataset"]]
    assert repeated_inputs["model"]["files"] == inputs["model"]["files"] and inputs["model"]["files"]
