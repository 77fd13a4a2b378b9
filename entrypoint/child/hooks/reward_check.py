"""GRPO_RIG_REWARD_CHECK=1: every reward function's answer is checked as ms-swift receives it (ms-swift 3.6.4
GRPOTrainer._score_completions).

A function that raises, returns a list of the wrong length, or a value that is not a number (a string, a
list) or is infinite ends the run with a line naming the function, the row (its completion and columns) and
the value (`grpo-rig reward check: ...`, which the entrypoint shows as the run's failure), instead of an
unrelated traceback from torch.tensor later. None and NaN follow ms-swift's rules (recorded as NaN, left out
of the row's sum) except on a row where every reward function gave one: there ms-swift's own warning fails
with "TypeError: 'TrainerState' object is not subscriptable" (it indexes the trainer state as a column), so
the run ends naming the row instead. A reward model (an nn.Module) is not checked.
"""

from __future__ import annotations

import sys

from entrypoint.child import runtime
from entrypoint.child.hooks.base import After, Hook, Target
from entrypoint.child.wire import REWARD_MARK

GRPO_TRAINER = "swift.trainers.rlhf_trainer.grpo_trainer"


class RewardCheckFailed(RuntimeError):
    """A reward function's answer that ms-swift cannot score: the run ends here, naming it."""


def _short(value, limit=80):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _row(i, completions, kwargs):
    """'row 3 of the batch (completion '...'; nums=[1, 2], target=3)'."""
    columns = [
        f"{k}={_short(v[i], 40)}"
        for k, v in kwargs.items()
        if k not in ("messages", "trainer_state") and isinstance(v, list) and len(v) == len(completions)
    ]
    return (
        f"row {i} of the batch (completion "
        f"{_short(completions[i])}{'; ' if columns else ''}{', '.join(columns)})"
    )


def _fail(message):
    print(f"{REWARD_MARK} {message}", file=sys.stderr, flush=True)
    raise RewardCheckFailed(message)


def _missing(value):
    return value is None or (isinstance(value, float) and value != value)  # None or NaN


def _bad_value(value):
    """Why ms-swift cannot score `value` ('' when it can: a number, None or NaN)."""
    if value is None or isinstance(value, bool):
        return ""
    if isinstance(value, str | bytes):
        return "is not a number"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "is not a number"
    return (
        "is infinite: GRPO's advantages would become NaN" if number in (float("inf"), float("-inf")) else ""
    )


def _culprit(func, completions, kwargs):
    """The first row on which `func` raises when called alone ('' when none does)."""
    for i in range(min(len(completions), 64)):
        one = {
            k: v[i : i + 1] if isinstance(v, list) and len(v) == len(completions) else v
            for k, v in kwargs.items()
        }
        try:
            func(completions[i : i + 1], **one)
        except Exception:
            return _row(i, completions, kwargs)
    return ""


def _guarded(func, name, index, answers):
    """`func` checked (module docstring). ms-swift calls the reward functions once each, in order,
    per scoring round: function `index` 0 starts `answers` afresh, the last one (`answers.count`) looks for a
    row none of them scored. index None: not compared (a reward model is among the functions)."""

    def reward(completions, **kwargs):
        try:
            values = func(completions, **kwargs)
        except Exception as exc:
            where = _culprit(func, completions, kwargs) or f"a batch of {len(completions)} completions"
            _fail(f"reward function {name} raised {type(exc).__name__}: {exc} on {where}")
        try:
            values = list(values)
        except TypeError:
            values = None
        if values is None or len(values) != len(completions):
            _fail(
                f"reward function {name} returned {_short(values)} for {len(completions)} completions: "
                "it must return one number (or None) per completion"
            )
        for i, value in enumerate(values):
            why = _bad_value(value)
            if why:
                _fail(
                    f"reward function {name} returned {_short(value)} for {_row(i, completions, kwargs)}: it "
                    f"{why}"
                )
        if index is not None:
            answers[:] = [*(answers if index else []), (name, values)]
            if index == answers.count - 1:
                _all_missing(answers, completions, kwargs)
        return values

    return reward


class _Answers(list):
    """One scoring round's answers: (function name, values) in call order; `count` functions in all."""

    count = 0


def _all_missing(answers, completions, kwargs):
    """End the run at a row every reward function left without a value (None or NaN)."""
    for i in range(len(completions)):
        if all(_missing(values[i]) for _, values in answers):
            given = "; ".join(f"{name}: {_short(values[i])}" for name, values in answers)
            _fail(
                f"every reward function returned None or NaN for {_row(i, completions, kwargs)} ({given}): "
                "ms-swift 3.6.4 cannot score such a row (its warning about it fails with \"'TrainerState' "
                'object is not subscriptable"); return 0.0 where a reward does not apply'
            )


def _reward_names(funcs, names):
    """'countdown (CountdownEquation)': the REWARD_FUNCS name beside ms-swift's class name."""
    orms = getattr(sys.modules.get("swift.plugin"), "orms", {})  # imported by the trainer by now
    keys = {cls: key for key, cls in orms.items()}
    return [f"{keys[type(f)]} ({n})" if type(f) in keys else n for f, n in zip(funcs, names, strict=True)]


def _guard_rewards(trainer):
    module = getattr(getattr(sys.modules.get("torch"), "nn", None), "Module", ())  # a reward model
    funcs = trainer.reward_funcs
    plain = [not isinstance(f, module) for f in funcs]
    names = _reward_names(funcs, trainer.reward_func_names)
    answers = _Answers()
    answers.count = len(funcs)
    for i, func in enumerate(funcs):
        if plain[i]:
            funcs[i] = _guarded(func, names[i], i if all(plain) else None, answers)


def _check_rewards(grpo) -> None:
    runtime.once_built(grpo.GRPOTrainer, _guard_rewards, "reward_check")


def install(value: str, after: After) -> None:
    """On with "1" (the plan sets it for every trainer)."""
    if value == "1":
        after.patch(GRPO_TRAINER, _check_rewards)


HOOK = Hook(
    name="reward_check",
    variable="GRPO_RIG_REWARD_CHECK",
    targets=(
        # how each reward function is called and its answers read; the all-None warning that fails
        Target(GRPO_TRAINER, "GRPOTrainer._score_completions", "43542c2db792d8da"),
        # where reward_funcs and reward_func_names are set
        Target(GRPO_TRAINER, "GRPOTrainer.__init__", "3e6bb12909c57536"),
    ),
    upstream=("ms-swift==3.6.4",),
    why="A reward function's answer ms-swift cannot score (an exception, a list of the wrong length, a "
    "string, an infinity, None or NaN on every function of a row) ends the run with one line naming the "
    "function, the row and the value, where ms-swift fails later with an unrelated traceback (torch.tensor, "
    "or \"'TrainerState' object is not subscriptable\" from its own all-None warning).",
    saves="no time: a user's broken reward is named in the run's failure line instead of a torch traceback "
    "(ms-swift's own failure reproduced on its real _score_completions in tests/child/test_hook_patches.py)",
    delete_when="when ms-swift's _score_completions checks each reward function's answer itself, naming the "
    "function and row, and its all-None warning no longer indexes trainer_state as a column (reported as "
    "modelscope/ms-swift#6702; TRL fixed its copy in huggingface/trl#3936)",
    install=install,
)
