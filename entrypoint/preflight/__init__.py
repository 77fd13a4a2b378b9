"""Preflight: everything that can be checked before heavy work is checked before heavy work.

"Heavy work" is any model or dataset download, model load, or process on a GPU. These checks are pure
functions of the plan and the host's facts (host.gather read the files, imported the reward plugins in a
throwaway process with a stub ms-swift, looked at ports and disks), and report every problem at once,
each naming its fix. `train` and `validate` refuse on any fatal problem; `plan` shows problems of kind
LOCAL (a dataset file not there yet, an unconverted embedded model, the output volume) as warnings, so a
plan can be previewed before the data is in place.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from entrypoint.errors import LOCAL, Problem
from entrypoint.preflight import environment, memory_check, model_check, packages, rewards_and_data, values

if TYPE_CHECKING:
    from entrypoint.facts.facts import Facts
    from entrypoint.plan.build import Plan


def check(plan: Plan, facts: Facts, for_train: bool) -> list[Problem]:
    """Every problem found in the plan's inputs; fatal ones stop `train`, `plan` and `validate`. The
    problems of kind LOCAL come last, and `plan` (for_train False) only warns about them. A plan without a
    layout (no GPU for a GPU recipe) still gets the checks of its values, model, rewards and data."""
    workers = plan.recipe.trainer_args.dataloader_num_workers
    found = values.check(plan, facts) + packages.check(plan, facts) + model_check.check(plan, facts)
    found += rewards_and_data.check(plan, facts)
    if plan.placed:  # without a layout (its problem says why) the checks of the machine would only echo it
        found += memory_check.check(plan) + environment.check(plan, facts, workers)
    local = [p for p in found if p.kind == LOCAL]
    if not for_train:
        local = [dataclasses.replace(p, fatal=False) for p in local]
    return [p for p in found if p.kind != LOCAL] + local
