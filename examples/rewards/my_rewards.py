"""A reward plugin for grpo-rig (docs/rewards.md walks through it).

    python -m entrypoint validate recipe=smoke DATASET_GENERATOR= DATASET=examples/rewards/example.jsonl \\
        EXTERNAL_PLUGINS=examples/rewards/my_rewards.py REWARD_FUNCS="exact_answer format_partial"
"""

import re

from swift.plugin import ORM, orms

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _normal(text: str) -> str:
    return " ".join(str(text).lower().split())


class ExactAnswer(ORM):
    """1.0 when the text inside <answer>...</answer> equals the row's `solution` (case and spaces
    ignored); 0.5 when the solution appears somewhere else in the completion; else 0.0."""

    def __call__(self, completions, solution, **kwargs):
        # completions: list[str], one per completion; solution: the dataset column, one value per
        # completion (rows repeat NUM_GENERATIONS times). Return one float per completion, same order.
        rewards = []
        for completion, reference in zip(completions, solution, strict=True):
            found = ANSWER.search(completion)
            if found and _normal(found.group(1)) == _normal(reference):
                rewards.append(1.0)
            elif _normal(reference) in _normal(completion):
                rewards.append(0.5)
            else:
                rewards.append(0.0)
        return rewards


orms["exact_answer"] = ExactAnswer
