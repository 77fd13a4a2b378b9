"""Arithmetic: one- and two-digit sums, differences and products, and their exact-answer reward.

Why this task: countdown asks a 135M model for a search it does not manage (0 of 192 held-out tasks
solved before or after training: docs/benchmarks/learning-embedded/), so its task reward cannot show
that a run improved the model. These questions sit where SmolLM2-135M-Instruct answers some but not
most (docs/benchmarks/learning-gpu/ states the measured rate per operation), so GRPO has groups with
reward variance from the first step and a task reward with room to rise.

Tasks. Each row is `{"messages": [...], "solution": "<integer>"}`: `solution` is the column ms-swift's
GRPO examples use for references (v3.6.4:docs/source_en/Instruction/GRPO/DeveloperGuide/reward_function.md),
reaching the reward as a row-aligned keyword argument. The prompt carries one worked example (a user and
an assistant turn) before the question, as the countdown tasks do. Same seed, same rows.

Reward `arithmetic`: 1.0 when the completion's answer equals `solution`, else 0.0. The answer is the
last integer inside the last `<answer>...</answer>` span, or, when there is no such span, the last
integer in the completion: the reward scores the arithmetic, and `format_partial` scores the tags.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence

ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
INTEGER_RE = re.compile(r"-?\d+")
MAX_ANSWER_CHARS = 2000  # a longer answer span is not a number; keeps a hostile completion cheap

SYSTEM_PROMPT = (
    "Compute the result. Think briefly in <think> </think> tags, then write only the number in "
    "<answer> </answer> tags."
)
EXAMPLE_QUESTION = "What is 17 + 25?"
EXAMPLE_ANSWER = "<think> 17 + 25 = 42 </think>\n<answer> 42 </answer>"

# (operator, range of the left operand, range of the right operand): sums and differences of two-digit
# numbers, products of a one-digit and a two-digit number.
OPERATIONS = (("+", (10, 99), (10, 99)), ("-", (10, 99), (1, 99)), ("*", (2, 9), (10, 30)))


def answer_of(completion: str) -> int | None:
    """The completion's answer (module docstring says which integer), or None when it has none."""
    spans = ANSWER_RE.findall(completion)
    text = spans[-1] if spans else completion
    numbers = INTEGER_RE.findall(text[-MAX_ANSWER_CHARS:])
    return int(numbers[-1]) if numbers else None


def score(completion: str, solution: str | int) -> float:
    """1.0 when the completion's answer equals `solution` (an integer or its text), else 0.0."""
    try:
        expected = int(str(solution).strip())
    except ValueError:
        return 0.0
    return 1.0 if answer_of(completion) == expected else 0.0


def arithmetic_rewards(completions: Sequence[str], solution: Sequence[str | int]) -> list[float]:
    """Batch form: one score per completion; `solution` is the dataset column, row-aligned."""
    return [score(c, s) for c, s in zip(completions, solution, strict=True)]


def question(a: int, op: str, b: int) -> str:
    """The user turn for one task."""
    return f"What is {a} {op} {b}?"


def make_task(rng: random.Random) -> dict:
    """One row: a random operation from OPERATIONS, its operands, and the exact integer result."""
    op, (lo_a, hi_a), (lo_b, hi_b) = rng.choice(OPERATIONS)
    a, b = rng.randint(lo_a, hi_a), rng.randint(lo_b, hi_b)
    result = {"+": a + b, "-": a - b, "*": a * b}[op]
    return {
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": EXAMPLE_QUESTION},
            {"role": "assistant", "content": EXAMPLE_ANSWER},
            {"role": "user", "content": question(a, op, b)},
        ],
        "solution": str(result),
    }


def task_key(row: dict) -> str:
    """What makes two rows the same task (for held-out prompts): the question."""
    return row["messages"][-1]["content"]


def generate(rows: int, seed: int) -> Iterator[dict]:
    """`rows` tasks from a private RNG seeded with `seed` (global random state is untouched)."""
    rng = random.Random(seed)
    for _ in range(rows):
        yield make_task(rng)
