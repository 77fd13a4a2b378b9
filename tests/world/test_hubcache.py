"""Offline runs and the hub caches (entrypoint/world/hubcache.py): an offline run plans the model's
snapshot where ModelScope or the Hugging Face hub keeps it, is refused naming that place when it is not
there, and the ModelScope directory named is the one modelscope itself uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import INVENTORIES, QWEN_CONFIG, build_plan, flag, refused

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

COUNTDOWN = ("recipe=countdown-1x4090", f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}")


def place(directory: Path) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(QWEN_CONFIG))
    return directory


def test_offline_run_uses_the_modelscope_snapshot_where_modelscope_keeps_it(tmp_path):
    """ModelScope keeps Qwen/Qwen2.5-0.5B-Instruct as models/Qwen/Qwen2___5-0___5B-Instruct; an offline run
    passes that directory as --model (ModelScope has no offline switch), and HF's switches are set."""
    snapshot = place(tmp_path / "ms" / "models" / "Qwen" / "Qwen2___5-0___5B-Instruct")
    plan = build_plan(
        *COUNTDOWN,
        "OFFLINE=true",
        inventory="1x4090-driver535",
        environ={"MODELSCOPE_CACHE": str(tmp_path / "ms")},
    )
    assert not [p for p in plan.problems if p.fatal], plan.problems
    trainer = plan.processes[-1]
    assert flag(trainer.argv, "model") == [str(snapshot)]
    assert trainer.env["HF_HUB_OFFLINE"] == "1" and trainer.env["TRANSFORMERS_OFFLINE"] == "1"


def test_hf_offline_in_the_environment_counts_as_offline(tmp_path):
    """HF_HUB_OFFLINE=1 in the environment: the model must be local too; the refusal names where."""
    err = refused(
        tmp_path, *COUNTDOWN, extra_env={"HF_HUB_OFFLINE": "1", "MODELSCOPE_CACHE": str(tmp_path / "ms")}
    )
    assert "this run is offline (HF_HUB_OFFLINE=1 in the environment)" in err
    assert str(tmp_path / "ms" / "models" / "Qwen" / "Qwen2___5-0___5B-Instruct") in err
    assert "download it there once with network access" in err


def test_offline_run_uses_the_hugging_face_snapshot(tmp_path):
    """USE_HF=true: huggingface_hub's own cache lookup finds refs/main -> snapshots/<sha>."""
    repo = tmp_path / "hf" / "models--Qwen--Qwen2.5-0.5B-Instruct"
    snapshot = place(repo / "snapshots" / "7ae557604adf67be50417f59c2c2f167def9a775")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snapshot.name)
    plan = build_plan(
        *COUNTDOWN,
        "OFFLINE=true",
        "USE_HF=true",
        inventory="1x4090-driver535",
        environ={"HF_HUB_CACHE": str(tmp_path / "hf")},
    )
    assert not [p for p in plan.problems if p.fatal], plan.problems
    assert flag(plan.processes[-1].argv, "model") == [str(snapshot)]
    assert plan.facts.model_config.source == str(snapshot / "config.json")  # the planner read the real config


@pytest.mark.slow  # imports modelscope (~6 s)
def test_modelscope_itself_looks_where_the_entrypoint_says(tmp_path):
    """The directory naming is modelscope's: ask modelscope 1.28 (create_temporary_directory_and_cache)."""
    import os
    import subprocess
    import sys

    from entrypoint.world import hubcache

    code = (
        "from modelscope.hub.file_download import create_temporary_directory_and_cache as c;"
        "print(c('Qwen/Qwen2.5-0.5B-Instruct')[1].get_root_location())"
    )
    env = {**os.environ, "MODELSCOPE_CACHE": str(tmp_path / "ms")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ours = hubcache.expected(
        "Qwen/Qwen2.5-0.5B-Instruct", "models", False, {"MODELSCOPE_CACHE": str(tmp_path / "ms")}
    )
    assert Path(out.stdout.strip().splitlines()[-1]) == ours
