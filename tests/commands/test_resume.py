"""Resume decisions with a fake `swift` (fast): incomplete checkpoints, identity checks, exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from entrypoint.record import export
from tests.conftest import ROOT, clean_env, run_cli

FAKE = {"GRPO_RIG_SWIFT": str(ROOT / "tests" / "fakes" / "swift"), "FAKE_TRAINER": "ok"}
RECIPE = f"recipe={ROOT / 'tests' / 'fakes' / 'colocate.env'}"


def checkpoint(path: Path, step: int, complete: bool) -> None:
    path.mkdir(parents=True)
    (path / "adapter_model.safetensors").write_bytes(b"w%d" % step)
    (path / "adapter_config.json").write_text("{}")
    if complete:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": 10}))


@pytest.mark.cli
def test_incomplete_checkpoint_is_set_aside_and_the_newest_complete_one_resumed(tmp_path):
    first = run_cli("train", RECIPE, f"OUTPUT_DIR={tmp_path}", "RUN_NAME=r", env=clean_env(**FAKE))
    assert first.returncode == 0, first.stdout + first.stderr
    train = tmp_path / "r" / "train"
    checkpoint(train / "checkpoint-5", 5, complete=True)
    checkpoint(train / "checkpoint-7", 7, complete=False)  # a save cut short
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    manifest["status"] = "stopped"
    (tmp_path / "r" / "manifest.json").write_text(json.dumps(manifest))

    second = run_cli("train", RECIPE, f"OUTPUT_DIR={tmp_path}", "RUN_NAME=r", env=clean_env(**FAKE))
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"--resume_from_checkpoint {train / 'checkpoint-5'}" in second.stdout
    assert "incomplete-checkpoint-7 was an incomplete checkpoint" in second.stdout
    assert (train / "incomplete-checkpoint-7" / "adapter_model.safetensors").exists()  # kept, not deleted
    assert not (train / "checkpoint-7").exists()
    assert [c.name for c in export.checkpoints(train)] == ["checkpoint-1", "checkpoint-5"]


def test_export_replaces_an_existing_adapter_whole(tmp_path):
    run_dir = tmp_path / "run"
    for step in (1, 2):
        ckpt = run_dir / "train" / f"checkpoint-{step}"
        checkpoint(ckpt, step, complete=True)
        files = export.export_checkpoint(ckpt, run_dir, "org/model")
        assert (run_dir / "adapter" / "adapter_model.safetensors").read_bytes() == b"w%d" % step
        assert (
            json.loads((run_dir / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
            == "org/model"
        )
        assert set(files) == {"adapter/adapter_model.safetensors", "adapter/adapter_config.json"}
    leftovers = [p.name for p in run_dir.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_completeness_needs_weights_and_trainer_state(tmp_path):
    checkpoint(tmp_path / "checkpoint-1", 1, complete=True)
    checkpoint(tmp_path / "checkpoint-2", 2, complete=False)
    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text("{not json")
    assert export.newest_complete(tmp_path).name == "checkpoint-1"


@pytest.mark.cli
def test_a_new_attempt_sets_the_earlier_evaluation_aside_and_keeps_its_summary(tmp_path):
    """Train longer after `evaluate`: eval.md judged the adapter before this attempt; beside the new adapter
    it would read as its verdict. It moves under logs/, whole, and the manifest keeps its summary with the
    attempt it judged."""
    first = run_cli("train", RECIPE, f"OUTPUT_DIR={tmp_path}", "RUN_NAME=r", env=clean_env(**FAKE))
    assert first.returncode == 0, first.stdout + first.stderr
    run = tmp_path / "r"
    (run / "eval.json").write_text('{"verdict": "better"}\n')
    (run / "eval.md").write_text("Verdict: better\n")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(status="stopped", evaluation={"verdict": "better"})
    (run / "manifest.json").write_text(json.dumps(manifest))

    second = run_cli("train", RECIPE, f"OUTPUT_DIR={tmp_path}", "RUN_NAME=r", env=clean_env(**FAKE))
    assert second.returncode == 0, second.stdout + second.stderr
    kept = run / "logs" / "evaluation-before-attempt-2"
    said = "the evaluation of the adapter before this attempt (eval.json, eval.md) is kept in"
    assert said in second.stdout
    assert not (run / "eval.md").exists() and not (run / "eval.json").exists()
    assert (kept / "eval.md").read_text() == "Verdict: better\n"
    attempts = json.loads((run / "manifest.json").read_text())["attempts"]
    assert attempts[0]["evaluation"] == {"verdict": "better"} and "evaluation" not in attempts[1]


@pytest.mark.cli
def test_training_longer_by_a_little_warns_that_the_new_steps_get_the_schedule_s_tail(tmp_path):
    """New-user trial: 4 smoke steps, then MAX_STEPS=6 trained steps 5-6 at the cosine tail (the learning
    rate logged 6.7e-06 then 0 of 1e-4): transformers lays the schedule over the new total. The plan says
    so, with the MAX_STEPS from which the first new step trains at half the rate; a long extension is
    quiet."""
    first = run_cli(
        "train", RECIPE, f"OUTPUT_DIR={tmp_path}", "RUN_NAME=r", "MAX_STEPS=4", env=clean_env(**FAKE)
    )
    assert first.returncode == 0, first.stdout + first.stderr
    checkpoint(tmp_path / "r" / "train" / "checkpoint-4", 4, complete=True)
    args = (RECIPE, f"OUTPUT_DIR={tmp_path}", "RUN_NAME=r")
    short = run_cli("plan", *args, "MAX_STEPS=6", env=clean_env(**FAKE))
    assert short.returncode == 0, short.stdout + short.stderr
    said = short.stdout + short.stderr
    assert "MAX_STEPS: 4 -> 6: the cosine learning-rate schedule is laid over the new 6 steps" in said, said
    assert "steps 5-6 train at 25% to 7% of LEARNING_RATE" in said and "from MAX_STEPS=8 step 5" in said, said
    long = run_cli("plan", *args, "MAX_STEPS=40", env=clean_env(**FAKE))
    assert long.returncode == 0 and "learning-rate schedule is laid over" not in long.stdout + long.stderr
