"""Countdown task generator: numbers and a reachable target, as GRPO dataset rows.

Each row is `{"messages": [...], "nums": [int, ...], "target": int}`: the columns ms-swift's countdown
dataset keeps (v3.6.4:swift/llm/dataset/dataset/llm.py:491-509) and the `countdown` reward reads. The
target is built from a random expression over the numbers, so every task has a solution; the
generator checks it with the reward's own evaluator. Same seed, same rows.

The prompt carries one worked example (a user turn and an assistant turn) before the question: a
135M-parameter instruct model rarely writes `<think>`/`<answer>` tags from an instruction alone, but
copies them from one example, which gives GRPO reward variance from the first step.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

from entrypoint.rewards import countdown as reward

SYSTEM_PROMPT = (
    "Solve the countdown puzzle. Think in <think> </think> tags, then write only the equation in "
    "<answer> </answer> tags."
)
EXAMPLE_NUMS, EXAMPLE_TARGET = [3, 4, 2], 14
EXAMPLE_ANSWER = "<think> 3 + 4 = 7, and 7 * 2 = 14. </think>\n<answer> (3 + 4) * 2 </answer>"

MAX_TARGET = 999
OPERATORS = "+-*/"


def question(nums: list[int], target: int) -> str:
    """The user turn for one task."""
    return f"Numbers: {nums}. Target: {target}. Use each number once with + - * /."


def _random_expression(rng: random.Random, nums: list[int]) -> str:
    """A fully parenthesised expression using every number once, in a random order and tree shape."""
    terms = [str(n) for n in rng.sample(nums, len(nums))]
    while len(terms) > 1:
        i = rng.randrange(len(terms) - 1)
        terms[i : i + 2] = [f"({terms[i]} {rng.choice(OPERATORS)} {terms[i + 1]})"]
    return terms[0]


def make_task(rng: random.Random, min_numbers: int = 3, max_numbers: int = 4, max_number: int = 25) -> dict:
    """One row with a positive integer target <= MAX_TARGET reachable from its numbers."""
    while True:
        nums = [rng.randint(1, max_number) for _ in range(rng.randint(min_numbers, max_numbers))]
        expression = _random_expression(rng, nums)
        try:
            value = reward.evaluate(reward.parse_expression(expression))
        except ZeroDivisionError:
            continue
        if value.denominator == 1 and 0 < value <= MAX_TARGET:
            target = int(value)
            assert reward.score(f"<answer>{expression}</answer>", nums, target) == 1.0
            return {
                "messages": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": question(EXAMPLE_NUMS, EXAMPLE_TARGET)},
                    {"role": "assistant", "content": EXAMPLE_ANSWER},
                    {"role": "user", "content": question(nums, target)},
                ],
                "nums": nums,
                "target": target,
            }


def generate(rows: int, seed: int) -> Iterator[dict]:
    """`rows` tasks from a private RNG seeded with `seed` (global random state is untouched)."""
    rng = random.Random(seed)
    for _ in range(rows):
        yield make_task(rng)


def write_jsonl(path: Path, rows: int, seed: int) -> Path:
    """Write `rows` tasks to `path` (JSONL, UTF-8) atomically; returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in generate(rows, seed):
            f.write(json.dumps(row) + "\n")
    tmp.replace(path)
    return path
