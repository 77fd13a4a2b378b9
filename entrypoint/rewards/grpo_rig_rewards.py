"""ms-swift reward plugin: registers this project's ORMs in `swift.plugin.orms`.

Loaded by `swift rlhf --external_plugins <this file>`: ms-swift puts this file's folder on sys.path and
imports it by file stem (v3.6.4:swift/utils/utils.py:318-323), so the stem is unique
(`grpo_rig_rewards`) to avoid shadowing an installed module. Registration is the import side effect.

ORM call convention (v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:927-929): `completions` is a
list of strings, and every dataset column arrives as a keyword argument holding a row-aligned list.
The logged metric name is the class name (`rewards/<ClassName>/mean`).
"""

from swift.plugin import ORM, orms

from entrypoint.rewards import arithmetic, countdown, format, tcm


class CountdownEquation(ORM):
    """1.0 when the `<answer>` equation uses each of `nums` once and equals `target` (columns)."""

    def __call__(self, completions, nums, target, **kwargs):
        return countdown.countdown_rewards(completions, nums, target)


class ArithmeticAnswer(ORM):
    """1.0 when the answer equals the `solution` column (an integer), else 0.0."""

    def __call__(self, completions, solution, **kwargs):
        return arithmetic.arithmetic_rewards(completions, solution)


class ThinkAnswerFormat(ORM):
    """Partial-credit `<think>...</think><answer>...</answer>` format score in [0, 1]."""

    def __call__(self, completions, **kwargs):
        return format.format_rewards(completions)


class TCMSDAccuracy(ORM):
    """TCM syndrome-differentiation accuracy against the `solution` column (F1 for several syndromes)."""

    def __call__(self, completions, solution, **kwargs):
        return tcm.tcm_rewards(completions, solution)


orms["countdown"] = CountdownEquation
orms["arithmetic"] = ArithmeticAnswer
orms["format_partial"] = ThinkAnswerFormat
orms["tcm_sd_accuracy"] = TCMSDAccuracy
