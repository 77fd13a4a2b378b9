"""Stand-in for the plugin file of ms-swift's GRPO examples (examples/train/grpo/plugin/plugin.py), which a
user migrating copies next to their data: the reward names the corpus recipes use, registered the same
way (swift.plugin.orms), with small implementations of our own."""

import re

from swift.plugin import ORM, orms

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _answer(text):
    found = ANSWER.search(text or "")
    return (found.group(1) if found else text or "").strip()


class Accuracy(ORM):
    """1.0 when the completion's answer equals the row's solution (after stripping), else 0.0."""

    def __call__(self, completions, solution, **kwargs):
        return [float(_answer(c) == _answer(str(s))) for c, s in zip(completions, solution, strict=True)]


class Format(ORM):
    """1.0 when the completion has <think>...</think> then <answer>...</answer>."""

    def __call__(self, completions, **kwargs):
        pattern = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>$", re.DOTALL)
        return [1.0 if pattern.match((c or "").strip()) else 0.0 for c in completions]


orms["external_math_acc"] = Accuracy
orms["external_r1v_acc"] = Accuracy
orms["external_math_format"] = Format
orms["external_countdown"] = Accuracy
orms["external_code_reward"] = Accuracy
orms["external_code_format"] = Format
