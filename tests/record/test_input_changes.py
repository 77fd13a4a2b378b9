"""Input files between a run's attempts, one comparison (record/manifest.input_changes) for the resume's
warning and for rerun's drift: a file added or dropped between attempts counts, not only one edited."""

from __future__ import annotations

from entrypoint.commands.train import changed_inputs
from entrypoint.record import rerun
from tests.record.test_rerun import DATA, SAME

VAL = {"spec": "/data/val.jsonl", "sha256": "a" * 64}


def _attempts(first: dict, second: dict) -> list[dict]:
    return [
        {"values": {}, "resume_from": None, "inputs": first},
        {"values": {}, "resume_from": "/o/r/train/checkpoint-2", "inputs": second},
    ]


def test_a_val_dataset_added_at_the_resume_is_said_and_is_drift():
    attempts = _attempts({"val_dataset": []}, {"val_dataset": [VAL]})
    assert changed_inputs(attempts) == [
        "val_dataset /data/val.jsonl is read since the previous attempt: the steps from "
        "/o/r/train/checkpoint-2 on read what this attempt reads"
    ]
    (found,) = rerun.drift({**DATA, "attempts": attempts}, SAME)
    assert found.where == "attempt 2" and "VAL_DATASET changed" in found.message


def test_the_same_files_in_both_attempts_are_no_change():
    attempts = _attempts({"val_dataset": [VAL]}, {"val_dataset": [dict(VAL)]})
    assert changed_inputs(attempts) == [] and rerun.drift({**DATA, "attempts": attempts}, SAME) == []
