"""The trainer's inputs check (entrypoint/child/hooks/inputs_check.py): the rows ms-swift loaded are the ones
the run recorded, or the run ends before step 1 naming the file."""

from __future__ import annotations

import hashlib
import json
import types

import pytest

from entrypoint.child.hooks import inputs_check


def loaded(tmp_path, recorded_text: str, text_at_load: str):
    """A stand-in for ms-swift's SwiftSft whose _get_dataset 'loads' a file that holds `text_at_load` while
    the run recorded `recorded_text`; returns the patched class."""
    data = tmp_path / "train.jsonl"
    record = tmp_path / "inputs.json"
    digest = hashlib.sha256(recorded_text.encode()).hexdigest()
    record.write_text(json.dumps({"files": [{"path": str(data), "sha256": digest}]}))

    class SwiftSft:
        def _get_dataset(self):
            data.write_text(text_at_load)  # what the file holds when ms-swift reads it
            return ["rows"], None

    sft = types.SimpleNamespace(SwiftSft=SwiftSft)
    inputs_check._check_after_load(sft, str(record))
    return SwiftSft


def test_unchanged_rows_load_as_ever(tmp_path):
    assert loaded(tmp_path, '{"a": 1}\n', '{"a": 1}\n')()._get_dataset() == (["rows"], None)


def test_a_dataset_changed_after_it_was_recorded_ends_the_run_naming_it(tmp_path):
    cls = loaded(tmp_path, '{"a": 1}\n', '{"a": 1}\n{"a": 2}\n')
    with pytest.raises(
        inputs_check.InputsChangedError, match=r"grpo-rig inputs check: .*train\.jsonl has sha256"
    ):
        cls()._get_dataset()
