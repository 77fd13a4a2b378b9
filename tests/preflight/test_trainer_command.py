"""A Python that cannot start the trainer (torch but no ms-swift: a user's default `python`) is refused before
anything is written, naming the interpreter to use; before, `train` wrote the run directory and then died at
the trainer's start-up (`swift: No such file or directory`)."""

from __future__ import annotations

import pytest

from tests.conftest import clean_env, facts_for, load_recipe, run_cli


@pytest.mark.cli
@pytest.mark.parametrize("command", ["validate", "train"])
def test_no_ms_swift_here_is_refused_before_a_run_directory_is_written(tmp_path, command):
    env = clean_env(GRPO_RIG_SWIFT=str(tmp_path / "no-swift"))
    proc = run_cli(command, "recipe=smoke", f"OUTPUT_DIR={tmp_path / 'out'}", env=env, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"error: ms-swift: GRPO_RIG_SWIFT={tmp_path / 'no-swift'} is not an executable file" in proc.stderr
    assert ".venv/bin/python -m entrypoint" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_this_venv_can_start_the_trainer():
    assert facts_for(load_recipe("recipe=smoke")).swift_missing == ""
