"""Think/answer format reward with partial credit.

ms-swift's built-in `format` ORM is all-or-nothing (`^<think>.*?</think>\\s*<answer>.*?</answer>$`,
v3.6.4:swift/plugin/orm.py:282-288). A small model rarely produces the whole pattern at first, so every
completion of a group scores 0, the group-relative advantage is 0 and GRPO learns nothing
(`loss`/`grad_norm` stay 0 while all rewards in a group are equal). This reward gives credit for each
step towards the pattern, so groups have reward variance from the first step:

    0.125 each for <think>, </think>, <answer>, </answer>      (up to 0.5)
    0.25 for a think block followed by a non-empty answer block
    0.25 for the full strict pattern, nothing before or after   (total 1.0)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
ORDERED_RE = re.compile(r"<think>.*?</think>\s*<answer>\s*\S.*?</answer>", re.DOTALL)
STRICT_RE = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)


def score(completion: str) -> float:
    """Partial-credit format score in [0, 1] (weights in the module docstring)."""
    total = sum(0.125 for tag in TAGS if tag in completion)
    if ORDERED_RE.search(completion):
        total += 0.25
        if STRICT_RE.match(completion):
            total += 0.25
    return total


def format_rewards(completions: Sequence[str]) -> list[float]:
    """Batch form: one score per completion."""
    return [score(c) for c in completions]
