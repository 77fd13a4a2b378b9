"""Preflight as a whole (entrypoint/preflight/__init__.py): every problem of a run, from the recipe, the
plan and the host, comes in one refusal before any model load or GPU process, errors and warnings counted
apart; `validate` passes the shipped recipes and exits 2 on any error.

The checks themselves are tested beside their modules: the environment's, the dataset's, the values' and
the model's in tests/preflight/, the recipe's, the layout's, the rewards' and the plugin probe's in
tests/recipe/, tests/plan/, tests/rewards/ and tests/world/. Cases C02, C03, C07, C08 of tests/cases.md
(C09: tests/plan/test_memory.py).
"""

from __future__ import annotations

import pytest

from tests.conftest import INVENTORIES, ROOT, clean_env, refused, run_cli

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree


def test_all_problems_are_reported_together(tmp_path):
    err = refused(tmp_path, "recipe=smoke", "load_in_4bit=true", "vllm_device=auto", "NUM_GENERATIONS=x")
    assert err.count("error:") == 3


def test_validate_passes_on_the_shipped_recipes(tmp_path):
    cases = [
        ("recipe=smoke",),
        ("recipe=countdown-1x4090", f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}"),
        (
            "recipe=tcm-4x4090",
            f"INVENTORY={INVENTORIES / '5x4090-driver535.json'}",
            f"DATASET={ROOT / 'examples/tcm/sample.jsonl'}",
            "PER_DEVICE_TRAIN_BATCH_SIZE=1",
            "GRADIENT_ACCUMULATION_STEPS=3",
        ),
    ]
    for pairs in cases:
        proc = run_cli("validate", *pairs, f"OUTPUT_DIR={tmp_path}", env=clean_env())
        assert proc.returncode == 0, (pairs, proc.stdout, proc.stderr)
        assert "valid" in proc.stdout


def test_validate_reports_every_problem_and_exits_2(tmp_path):
    proc = run_cli(
        "validate",
        "recipe=smoke",
        "NUM_GENERATIONS=3",
        "REWARD_FUNCS=nope",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert proc.returncode == 2
    assert "NUM_GENERATIONS" in proc.stderr and "'nope'" in proc.stderr


def test_every_problem_is_printed_at_once(tmp_path):
    """The seed document's command, as a recipe: the recipe's own problems (a managed key, a removed one)
    and the plan's (missing files, memory) come in one refusal, not one batch after another."""
    recipe = tmp_path / "seed.env"
    recipe.write_text(
        "RLHF_TYPE=grpo\nMODEL=Qwen/Qwen2.5-1.5B-Instruct\nVLLM_DEVICE=auto\nDATASET=/path/to/data\n"
        "EXTERNAL_PLUGINS=examples/train/grpo/plugin/plugin.py\nREWARD_FUNCS=TCMSDAccuracy format\n"
        "SYSTEM=examples/train/grpo/prompt.txt\nPER_DEVICE_TRAIN_BATCH_SIZE=0\n"
    )
    err = refused(tmp_path, f"recipe={recipe}", f"INVENTORY={INVENTORIES / '5x4090-driver535.json'}")
    for where in (
        "RLHF_TYPE",
        "VLLM_DEVICE",
        "PER_DEVICE_TRAIN_BATCH_SIZE",
        "SYSTEM",
        "EXTERNAL_PLUGINS",
        "REWARD_FUNCS TCMSDAccuracy",
        "DATASET /path/to/data",
    ):
        assert f"error: {where}" in err, where


def test_the_refusal_counts_errors_and_warnings_apart(tmp_path):
    """ "(1 problem(s))" stood over a warning and an error."""
    from entrypoint.errors import Problem, tally

    error, warning = Problem("A", "a"), Problem("B", "b", fatal=False)
    assert tally([error, warning]) == "1 error and 1 warning"
    assert (
        tally([error, error]) == "2 errors" and tally([warning]) == "1 warning" and tally([]) == "no problems"
    )
    proc = run_cli("validate", "recipe=smoke", f"DATASET={tmp_path / 'missing.jsonl'}", env=clean_env())
    assert proc.returncode == 2
    assert "refused before any heavy work (1 error and 1 warning):" in proc.stderr, proc.stderr
