"""docs/rewards.md's worked example stays valid: `validate` accepts it, and the reward scores as
documented."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from tests.conftest import ROOT, clean_env, run_cli

EXAMPLE = ROOT / "examples" / "rewards"


@pytest.mark.cli
def test_the_documented_command_validates():
    proc = run_cli(
        "validate",
        "recipe=smoke",
        "DATASET_GENERATOR=",
        f"DATASET={EXAMPLE / 'example.jsonl'}",
        f"EXTERNAL_PLUGINS={EXAMPLE / 'my_rewards.py'}",
        "REWARD_FUNCS=exact_answer format_partial",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout


def test_the_example_reward_gives_full_and_partial_credit(monkeypatch):
    plugin = types.ModuleType("swift.plugin")
    plugin.ORM, plugin.orms = object, {}
    monkeypatch.setitem(sys.modules, "swift", types.ModuleType("swift"))
    monkeypatch.setitem(sys.modules, "swift.plugin", plugin)
    spec = importlib.util.spec_from_file_location("my_rewards", EXAMPLE / "my_rewards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reward = plugin.orms["exact_answer"]()
    completions = [
        "<think>easy</think><answer> paris </answer>",
        "It is Paris, I think.",
        "<answer>Lyon</answer>",
    ]
    assert reward(completions, solution=["Paris"] * 3) == [1.0, 0.5, 0.0]
    assert "exact_answer" in (ROOT / "docs" / "rewards.md").read_text()
