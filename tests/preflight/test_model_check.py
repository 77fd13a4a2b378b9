"""A local model directory checked before the start-up (entrypoint/preflight/model_check.py): a download
that stopped after config.json is refused, naming the download."""

from __future__ import annotations

import json

import pytest

from tests.conftest import QWEN_CONFIG, clean_env, refused, run_cli

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree


def test_a_model_directory_with_a_config_but_no_weights_is_refused_naming_the_download(tmp_path):
    """A download that stopped after config.json: refused before the start-up, where loading it would fail;
    the same directory with weights (a single file or a sharded index) is valid."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN_CONFIG))
    (model / "tokenizer.json").write_text("{}")
    err = refused(tmp_path, "recipe=smoke", f"MODEL={model}", "MODEL_SOURCE=hub")
    assert f"{model} has a config.json but no weights" in err and "--local-dir" in err
    for weights in ("model.safetensors.index.json", "pytorch_model.bin"):
        (model / weights).write_text("{}")
        proc = run_cli("validate", "recipe=smoke", f"MODEL={model}", "MODEL_SOURCE=hub", env=clean_env())
        assert "no weights" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        (model / weights).unlink()
