"""The learning rate transformers' Trainer gives each optimizer step, as a fraction of LEARNING_RATE: what a
resumed run with a larger MAX_STEPS trains at (build._resume_changes).

transformers 4.51.3 builds the schedule from the run's total steps each time training starts
(Trainer.create_scheduler -> optimization.get_scheduler) and a resume loads only the scheduler's step count
(scheduler.pt): the schedule is laid over the new total, and the steps after the checkpoint take its values
from there. Optimizer step s (1-based) uses lambda(s - 1) (LambdaLR steps after each optimizer step).
"""

from __future__ import annotations

import math

# transformers 4.51.3 optimization.py: _get_linear_schedule_with_warmup_lr_lambda,
# _get_cosine_schedule_with_warmup_lr_lambda (num_cycles 0.5), _get_constant_schedule_with_warmup_lr_lambda
KNOWN = ("linear", "cosine", "constant", "constant_with_warmup")


def warmup_steps(total: int, ratio: float, steps: int) -> int:
    """Warm-up steps of a `total`-step run: `steps` where > 0, else ceil(total x ratio)
    (transformers TrainingArguments.get_warmup_steps)."""
    return steps if steps > 0 else math.ceil(total * ratio)


def factor(kind: str, step: int, total: int, warmup: int) -> float:
    """lambda(step) of the schedule `kind` (one of KNOWN) over `total` steps with `warmup` warm-up steps: the
    fraction of the peak learning rate after `step` scheduler steps. ValueError for another kind."""
    if kind not in KNOWN:
        raise ValueError(f"no formula here for the {kind!r} schedule")
    if kind != "constant" and step < warmup:
        return step / max(1, warmup)
    if kind in ("constant", "constant_with_warmup"):
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if kind == "linear":
        return max(0.0, 1.0 - progress)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def step_rate(kind: str, step: int, total: int, warmup: int) -> float:
    """The fraction of the peak learning rate optimizer step `step` (1-based) trains with."""
    return factor(kind, step - 1, total, warmup)
