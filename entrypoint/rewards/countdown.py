"""Countdown: the task generator and its reward, side by side.

Reward. Countdown reward: does the model's equation use each given number once and hit the target?

The model's text is parsed with `ast.parse(mode="eval")` and evaluated by walking the tree with exact
rational arithmetic (`fractions.Fraction`). Only integer literals and the binary operators + - * / are
accepted; anything else (names, calls, attributes, powers, unary minus, subscripts, ...) scores 0.
Model output is never passed to `eval`/`exec`: an `__import__('os')` in a completion is just a
`Call` node that the walker refuses.

Scoring follows ms-swift's countdown example (v3.6.4:examples/train/grpo/plugin/plugin.py:89-138):
binary 1.0/0.0, the last `<answer>...</answer>` span, the left side of a trailing `= ...`.

Tasks. Countdown task generator: numbers and a reachable target, as GRPO dataset rows.

Each row is `{"messages": [...], "nums": [int, ...], "target": int}`: the columns ms-swift's countdown
dataset keeps (v3.6.4:swift/llm/dataset/dataset/llm.py:491-509) and the `countdown` reward reads. The
target is built from a random expression over the numbers, so every task has a solution; the
generator checks it with the reward's own evaluator. Same seed, same rows.

The prompt carries one worked example (a user turn and an assistant turn) before the question: a
135M-parameter instruct model rarely writes `<think>`/`<answer>` tags from an instruction alone, but
copies them from one example, which gives GRPO reward variance from the first step.
"""

from __future__ import annotations

import ast
import random
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from fractions import Fraction

ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

# Bounds that keep a hostile completion cheap to refuse: countdown expressions are a handful of
# numbers and operators, so anything longer is not an answer.
MAX_EXPRESSION_CHARS = 200
MAX_AST_NODES = 64

_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


class NotAnEquation(ValueError):
    """The text is not a plain arithmetic expression over integer literals."""


def extract_answer(completion: str) -> str | None:
    """Return the text of the last `<answer>...</answer>` span, stripped, or None if there is none."""
    spans = ANSWER_RE.findall(completion)
    return spans[-1].strip() if spans else None


def parse_expression(text: str) -> ast.Expression:
    """Parse `text` (optionally `expr = value`) into a checked AST.

    Raises:
        NotAnEquation: empty, too long, not Python-expression syntax, or containing any node other than
            integer constants and + - * / binary operations.
    """
    left = text.split("=", 1)[0].strip()
    if not left or len(left) > MAX_EXPRESSION_CHARS:
        raise NotAnEquation("empty or too long")
    try:
        tree = ast.parse(left, mode="eval")
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes
        raise NotAnEquation(str(exc)) from exc
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_AST_NODES:
        raise NotAnEquation("expression too large")
    for node in nodes:
        if isinstance(node, ast.Expression | ast.BinOp) or type(node) in _OPS:
            continue
        if isinstance(node, ast.Constant) and type(node.value) is int:
            continue
        raise NotAnEquation(f"{type(node).__name__} is not allowed")
    return tree


def numbers_used(tree: ast.Expression) -> list[int]:
    """Integer literals of a checked expression, in source order."""
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]


def evaluate(tree: ast.Expression) -> Fraction:
    """Exact value of a checked expression. Raises ZeroDivisionError on division by zero."""

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant):
            return Fraction(node.value)
        assert isinstance(node, ast.BinOp)
        return _OPS[type(node.op)](value(node.left), value(node.right))

    return value(tree)


def score(completion: str, nums: Sequence[int], target: int | float) -> float:
    """1.0 if the completion's answer uses exactly `nums` (each once) and equals `target`, else 0.0."""
    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    try:
        tree = parse_expression(answer)
        if Counter(numbers_used(tree)) != Counter(int(n) for n in nums):
            return 0.0
        return 1.0 if evaluate(tree) == Fraction(target) else 0.0
    except (NotAnEquation, ZeroDivisionError, TypeError, ValueError):
        return 0.0


def countdown_rewards(
    completions: Sequence[str], nums: Sequence[Sequence[int]], target: Sequence[float]
) -> list[float]:
    """Batch form: one score per completion; `nums` and `target` are the dataset columns, row-aligned."""
    return [score(c, n, t) for c, n, t in zip(completions, nums, target, strict=True)]


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
            value = evaluate(parse_expression(expression))
        except ZeroDivisionError:
            continue
        if value.denominator == 1 and 0 < value <= MAX_TARGET:
            target = int(value)
            assert score(f"<answer>{expression}</answer>", nums, target) == 1.0
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
