"""Countdown reward: exact arithmetic on the model's equation, never eval."""

from __future__ import annotations

from pathlib import Path

import pytest

from entrypoint.rewards import countdown as reward


@pytest.mark.parametrize(
    "completion",
    [
        "<think>x</think><answer>(3 + 4) * 2</answer>",
        "<answer> 2 * (4 + 3) = 14 </answer>",  # right-hand side ignored
        "<answer>1+1</answer> then <answer>(4 + 3) * 2</answer>",  # the last answer counts
        "<answer>3*4 + 2</answer>",
    ],
)
def test_right_equation_scores_one(completion):
    assert reward.score(completion, [3, 4, 2], 14) == 1.0


@pytest.mark.parametrize(
    "completion",
    [
        "no answer tag at all: 3 + 4 * 2",
        "<answer>(3 + 4) * 2 * 1</answer>",  # a number not given
        "<answer>(3 + 4) * 3</answer>",  # 2 unused, 3 used twice
        "<answer>3 + 4 + 2</answer>",  # uses each once, wrong value
        "<answer>4 / (2 - 2) + 3</answer>",  # division by zero
        "<answer>-3 + 4 * 2 + 9</answer>",  # unary minus is not an operator of the game
        "<answer>3 ** 4 / 2</answer>",
        "<answer></answer>",
        "<answer>(3 + 4) * 2",  # unclosed
    ],
)
def test_wrong_or_malformed_scores_zero(completion):
    assert reward.score(completion, [3, 4, 2], 14) == 0.0


def test_division_is_exact_not_floating_point():
    # 7 / 3 * 3 is 7.000000000000001 in floats; exact rational arithmetic says 7.
    assert reward.score("<answer>7 / 3 * 3</answer>", [7, 3, 3], 7) == 1.0


def test_hostile_text_scores_zero_and_has_no_side_effect(tmp_path: Path):
    marker = tmp_path / "pwned"
    hostile = [
        f"<answer>__import__('os').system('touch {marker}')</answer>",
        f"<answer>open('{marker}', 'w').write('x')</answer>",
        "<answer>(lambda: 1)()</answer>",
        "<answer>[x for x in ().__class__.__bases__[0].__subclasses__()]</answer>",
        "<answer>" + "(" * 5000 + "1" + ")" * 5000 + "</answer>",  # deep nesting
        "<answer>" + "+".join(["1"] * 10000) + "</answer>",  # huge expression
        "<answer>9" + "9" * 10000 + "</answer>",
    ]
    for text in hostile:
        assert reward.score(text, [1, 2, 3], 6) == 0.0
    assert not marker.exists()


def test_batch_form_is_row_aligned():
    completions = ["<answer>1 + 2</answer>", "<answer>2 * 5</answer>"]
    assert reward.countdown_rewards(completions, [[1, 2], [2, 5]], [3, 11]) == [1.0, 0.0]
    with pytest.raises(ValueError):
        reward.countdown_rewards(completions, [[1, 2]], [3])
