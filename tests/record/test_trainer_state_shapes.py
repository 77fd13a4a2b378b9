"""A checkpoint whose trainer_state.json is valid JSON of another shape (`[]`, `3`, a global_step that is
not a number) is as good as an unreadable one: never resumed from nor counted, set aside with a line that
says why (record/export.trainer_state). Case re-run: `[]` ended `train` in
"AttributeError: 'list' object has no attribute 'get'" where completed steps are read."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from entrypoint.commands import train
from entrypoint.record import export
from tests.conftest import ROOT, clean_env, run_cli

SHAPES = ["[]", "3", '"done"', "null", '{"global_step": "x"}', '{"global_step": 2, "max_steps": [2]}']
FAKE = {"GRPO_RIG_SWIFT": str(ROOT / "tests" / "fakes" / "swift"), "FAKE_TRAINER": "steps"}


def checkpoint(path: Path, state: str) -> None:
    path.mkdir(parents=True)
    (path / "adapter_model.safetensors").write_bytes(b"w")
    (path / "adapter_config.json").write_text("{}")
    (path / "trainer_state.json").write_text(state)


@pytest.mark.parametrize("state", SHAPES)
def test_a_state_of_another_shape_is_not_a_complete_checkpoint(tmp_path, state):
    checkpoint(tmp_path / "train" / "checkpoint-1", json.dumps({"global_step": 1, "max_steps": 2}))
    checkpoint(tmp_path / "train" / "checkpoint-2", state)
    plan = types.SimpleNamespace(train_dir=tmp_path / "train")
    assert export.newest_complete(plan.train_dir) == tmp_path / "train" / "checkpoint-1"
    assert train.completed_steps(plan) == train.Steps(1, 2)  # the newest readable one, no traceback
    assert train.quarantine_incomplete(plan.train_dir) == [
        (
            str(tmp_path / "train" / "incomplete-checkpoint-2"),
            "its trainer_state.json is not the trainer's state: a JSON object with a whole global_step",
        )
    ]


@pytest.mark.cli
@pytest.mark.parametrize("state", ["[]", "3"])
def test_train_sets_such_a_checkpoint_aside_in_one_line_and_resumes_from_the_one_before(tmp_path, state):
    pairs = ["recipe=smoke", f"OUTPUT_DIR={tmp_path}", "RUN_NAME=r", "MAX_STEPS=2", "SAVE_STEPS=1"]
    env = clean_env(**FAKE, FAKE_STEP_SECONDS="0.05")
    first = run_cli("train", *pairs, env=env, timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    train_dir = tmp_path / "r" / "train"
    (train_dir / "checkpoint-2" / "trainer_state.json").write_text(state)
    second = run_cli("train", *pairs, env=env, timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Traceback" not in second.stdout + second.stderr
    assert (
        f"warning: {train_dir / 'incomplete-checkpoint-2'} was an incomplete checkpoint (its "
        "trainer_state.json is not the trainer's state: a JSON object with a whole global_step); "
        "moved aside, not resumed from"
    ) in second.stdout
    assert f"--resume_from_checkpoint {train_dir / 'checkpoint-1'}" in second.stdout
