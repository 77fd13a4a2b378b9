"""The reward plugins, and the data they score: each reward's columns in the dataset (or in the generated
tasks), enough rows for one generation batch, and the validation rows through the same rewards."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from entrypoint.errors import Problem
from entrypoint.facts.datasets import user_columns
from entrypoint.plan import build as plan_mod
from entrypoint.preflight import dataset
from entrypoint.rewards import check as rewards_check
from entrypoint.rewards import tasks

if TYPE_CHECKING:
    from entrypoint.facts.facts import Facts
    from entrypoint.plan.build import Plan


def _plugin_files(plan: Plan) -> list[str]:
    """The --external_plugins every child gets (plan.plugin_files composes them, with or without a layout)."""
    return plan_mod.plugin_files(plan.recipe, plan.facts)


def batch_fix(plan: Plan) -> str:
    """The knobs that shrink one generation batch, as this recipe sets it: GENERATION_BATCH_SIZE or
    STEPS_PER_GENERATION when a layer sets them (then the micro-batch does not change it), else the
    micro-batch and accumulation (ms-swift: generation batch = per-device x processes x steps_per_generation,
    which defaults to gradient_accumulation_steps; v3.6.4:swift/trainers/rlhf_arguments.py)."""
    r, b = plan.recipe, plan.budget.batch if plan.budget else None
    g = (
        f" (now {b.generation_batch} = {b.prompts_per_generation} prompts x NUM_GENERATIONS "
        f"{b.num_generations})"
        if b
        else ""
    )
    if r.is_set("GENERATION_BATCH_SIZE"):
        return f"lower GENERATION_BATCH_SIZE{g}"
    if r.is_set("STEPS_PER_GENERATION"):
        return f"lower STEPS_PER_GENERATION or PER_DEVICE_TRAIN_BATCH_SIZE{g}"
    return f"lower PER_DEVICE_TRAIN_BATCH_SIZE / GRADIENT_ACCUMULATION_STEPS{g}"


def check(plan: Plan, facts: Facts) -> list[Problem]:
    """The reward plugins, and the dataset against the columns the rewards read."""
    r, s = plan.recipe, plan.recipe.settings
    infos, problems = rewards_check.check(
        _plugin_files(plan),
        list(r.trainer_args.reward_funcs),
        facts.plugins,
        facts.plugin_error,
        lambda f: facts.path(Path(f)).unusable_file(),
        facts.in_container,
    )
    needed: dict[str, list[str]] = {}
    for name, info in infos.items():
        for column in info.columns:
            needed.setdefault(column, []).append(name)
    b = plan.budget.batch if plan.budget else None
    prompts_needed = b.prompts_per_generation if b and b.num_generations >= 2 else 0
    if "DATASET_GENERATOR" in r.dropped:  # no data is known until the generator is: its refusal says why
        prompts_needed = 0
    a = r.trainer_args
    # held-out rows go through the same rewards: the same columns, no batch to fill
    mapping = user_columns((r.trainer.get("columns") or [None])[0])  # COLUMNS: ms-swift renames by it first
    problems += dataset.check(
        a.val_dataset, needed, 0, 0.0, plan.offline, a.use_hf, facts, "VAL_DATASET", mapping=mapping
    ).problems
    if not s.DATASET_GENERATOR:
        found = dataset.check(
            plan.dataset_paths,
            needed,
            prompts_needed,
            a.split_dataset_ratio,
            plan.offline,
            a.use_hf,
            facts,
            batch_fix=batch_fix(plan),
            max_length=a.max_length,
            mapping=mapping,
        )
        return problems + found.problems
    generated = set(tasks.TASKS[s.DATASET_GENERATOR].columns)
    for column, readers in needed.items():
        if column not in generated:
            problems.append(
                Problem(
                    f"REWARD_FUNCS {', '.join(readers)}",
                    f"reads `{column}`, which the {s.DATASET_GENERATOR} generator does not write (it writes "
                    f"{', '.join(sorted(generated))})",
                    "choose rewards that fit the generated tasks",
                )
            )
    if int(s.DATASET_ROWS * (1 - a.split_dataset_ratio)) < prompts_needed:
        problems.append(
            Problem(
                f"DATASET_ROWS ({r.source('DATASET_ROWS')})",
                f"{s.DATASET_ROWS} rows, fewer than one generation batch needs ({prompts_needed})",
                f"set DATASET_ROWS >= {prompts_needed}",
            )
        )
    return problems
