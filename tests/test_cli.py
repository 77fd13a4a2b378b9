"""The command line's first words (issue 27): a mistyped command gets the command it is closest to, a
recipe's bare name after a command is `recipe=NAME`, and `keys` lists every owned key in one column."""

from __future__ import annotations

import pytest

from entrypoint.cli import bare_words
from entrypoint.errors import BadInput
from entrypoint.settings import Settings
from tests.conftest import clean_env, run_cli


def refused(*argv: str) -> str:
    with pytest.raises(BadInput) as caught:
        bare_words(list(argv), {})
    (problem,) = caught.value.problems
    return problem.render()


def test_a_mistyped_command_gets_a_did_you_mean():
    # "'trian': is not a KEY=VALUE word" sent a user to the recipe syntax
    assert refused("trian", "recipe=smoke").endswith("fix: did you mean train?")
    assert "did you mean validate?" in refused("valdate", "recipe=smoke")
    assert "the commands: train, rollout, plan, validate" in refused("frobnicate")
    assert "write train recipe=smoke" in refused("smoke")  # a recipe where the command goes


def test_a_bare_recipe_name_after_a_command_is_the_recipe():
    assert bare_words(["validate", "smoke"], {}) == ["validate", "recipe=smoke"]
    assert bare_words(["plan", "smoke-gpu", "MAX_STEPS=2"], {}) == ["plan", "recipe=smoke-gpu", "MAX_STEPS=2"]
    assert bare_words(["validate", "recipe=smoke", "smoke"], {}) == ["validate", "recipe=smoke", "smoke"]
    assert "did you mean recipe=smoke?" in refused("validate", "smok")
    assert bare_words(["recipe=smoke"], {}) == ["train", "recipe=smoke"]  # train stays the default
    assert bare_words([], {}) == ["train"]


def test_validate_with_a_bare_recipe_name_validates_it():
    proc = run_cli("validate", "smoke", env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "recipe smoke: valid" in proc.stdout


def test_keys_lists_every_owned_key_in_one_column():
    out = run_cli("keys", env=clean_env()).stdout.splitlines()
    assert [line.split("=", 1)[0] for line in out] == list(Settings.model_fields)
    assert {line.index("  # ") for line in out} == {out[0].index("  # ")}
    assert any(line.startswith("EVAL_PROMPTS=32 ") for line in out)
