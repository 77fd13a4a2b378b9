"""plan/schedule.py against transformers' own schedules: the learning rate each optimizer step trains with."""

from __future__ import annotations

import pytest

from entrypoint.plan import schedule


@pytest.mark.torch
@pytest.mark.parametrize("kind", schedule.KNOWN)
@pytest.mark.parametrize(("total", "warmup"), [(6, 0), (20, 3), (7, 1)])
def test_each_step_s_rate_is_transformers(kind, total, warmup):
    import torch
    from transformers import get_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    lr = get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=total)
    for step in range(1, total + 1):
        used = optimizer.param_groups[0]["lr"]  # what this optimizer step trains with
        assert schedule.step_rate(kind, step, total, warmup) == pytest.approx(used, abs=1e-12), (kind, step)
        optimizer.step()
        lr.step()


def test_warmup_steps_win_over_the_ratio_and_the_ratio_rounds_up():
    assert schedule.warmup_steps(100, 0.05, 0) == 5 and schedule.warmup_steps(7, 0.05, 0) == 1
    assert schedule.warmup_steps(100, 0.05, 2) == 2


def test_an_unknown_schedule_has_no_formula():
    with pytest.raises(ValueError, match="polynomial"):
        schedule.factor("polynomial", 1, 10, 0)
