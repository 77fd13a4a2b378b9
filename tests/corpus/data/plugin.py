"""Stand-in for the plugin file of ms-swift's GRPO examples (examples/train/grpo/plugin/plugin.py), which a
user migrating copies next to their data: the reward names the corpus recipes use, registered the same
way (swift.plugin.orms, and the reward-model plugin in swift.plugin.rm_plugins), with small implementations
of our own."""

import re

from swift.plugin import ORM, orms, rm_plugins

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


class CustomizedRMPlugin:
    """A reward model's first logit as the reward, as ms-swift's example registers it (v3.6.4
    examples/train/grpo/plugin/plugin.py:731-749, `rm_plugins['my_rmplugin']`)."""

    def __init__(self, model, template):
        self.model, self.template = model, template

    def __call__(self, inputs):
        batch = self.template.data_collator([self.template.encode(dict(i)) for i in inputs])
        batch.pop("labels", None)
        return self.model(**{k: v.to(self.model.device) for k, v in batch.items()}).logits[:, 0]


rm_plugins["my_rmplugin"] = CustomizedRMPlugin
