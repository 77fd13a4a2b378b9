"""Partial-credit format reward: every step towards <think>..</think><answer>..</answer> counts."""

from __future__ import annotations

import pytest

from entrypoint.rewards import format as fmt


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("plain text", 0.0),
        ("<think> only open", 0.125),
        ("<think> a </think>", 0.25),
        ("<think> a </think> <answer> 1 </answer> trailing words", 0.75),
        ("<answer> 1 </answer>", 0.25),
        ("<answer> 1 </answer> <think> a </think>", 0.5),  # tags present, wrong order
        ("<think> a </think>\n<answer>   </answer>", 0.5),  # empty answer block
        ("<think> a </think>\n<answer> (1 + 2) * 3 </answer>", 1.0),
    ],
)
def test_scores(completion, expected):
    assert fmt.score(completion) == pytest.approx(expected)


def test_gives_variance_where_the_strict_format_gives_none():
    group = [
        "no tags",
        "<think> t </think>",
        "<answer> x </answer>",
        "<think> a </think><answer> b </answer> extra",
    ]
    scores = fmt.format_rewards(group)
    assert len(set(scores)) > 1
