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
import re
from pathlib import Path
from typing import TYPE_CHECKING

from entrypoint.errors import LOCAL, Problem
from entrypoint.facts import catalog
from entrypoint.facts.datasets import user_columns
from entrypoint.facts.facts import ENTRIES_LISTED
from entrypoint.plan import build as plan_mod
from entrypoint.preflight import dataset, environment, memory_check, packages, values
from entrypoint.rewards import check as rewards_check
from entrypoint.rewards import tasks

if TYPE_CHECKING:
    from entrypoint.facts.facts import Facts
    from entrypoint.plan.build import Plan

HUB_MODEL_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _plugin_files(plan: Plan) -> list[str]:
    """The --external_plugins every child gets (plan.plugin_files composes them, with or without a layout)."""
    return plan_mod.plugin_files(plan.recipe, plan.facts)


# What transformers loads a model's weights from (its *_NAME constants: model.safetensors and its index,
# pytorch_model.bin and shards; .pt/.pth for some trust_remote_code models); sharded checkpoints name their
# index *.index.json.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".index.json", ".pt", ".pth")


def check_model(plan: Plan, facts: Facts) -> list[Problem]:
    r = plan.recipe
    value = r.trainer_args.model or ""
    damaged = _damaged_config(plan, facts)
    if damaged:
        return damaged
    if not value or r.settings.MODEL_SOURCE == "embedded":
        if value in catalog.CATALOG and not facts.embedded_ready:
            return [
                Problem(
                    "MODEL",
                    f"embedded model {value} is not converted yet (or by an older version) at {plan.model_path}",
                    "run `python -m entrypoint prepare-model` (`make model`; the image does this at build time)",
                    kind=LOCAL,
                )
            ]
        return []
    where = f"MODEL ({r.source('MODEL')})"
    if value.startswith(("/", "./", "../", "~")) or facts.path(Path(value)).exists:
        path = Path(value).expanduser()
        if not facts.path(path).is_dir or not facts.path(path / "config.json").is_file:
            here = "inside the container" if facts.in_container else "on this machine"
            fix = (
                "mount the model directory and give its container path"
                if facts.in_container
                else "give the path of a model directory here (with its config.json), or a hub id"
            )
            return [Problem(where, f"{path} is not a model directory with a config.json {here}", fix)]
        listed = facts.path(path).entries
        if len(listed) < ENTRIES_LISTED and not any(n.endswith(WEIGHT_SUFFIXES) for n in listed):
            return [
                Problem(
                    where,
                    f"{path} has a config.json but no weights ({', '.join(WEIGHT_SUFFIXES)}): a download that "
                    "stopped early, or only the configuration copied; loading it would fail after the start-up",
                    "download the model again into that directory (e.g. `huggingface-cli download <id> --local-dir "
                    f"{path}`), or point MODEL at the directory that holds the weights",
                    kind=LOCAL,  # `plan` needs only the config
                )
            ]
        return []
    if not HUB_MODEL_RE.match(value):
        return [
            Problem(
                where,
                f"{value!r} is neither a local model directory nor a hub id (org/name)",
                "give a hub id like Qwen/Qwen2.5-0.5B-Instruct or a path",
            )  # fmt: skip
        ]
    return []  # offline without a local snapshot: plan._offline_model


def _damaged_config(plan: Plan, facts: Facts) -> list[Problem]:
    """A config.json on this machine that is not JSON, or holds a field of another type than transformers
    writes (host.gather: memory.config_problem): the model cannot load from it. A hub's answer of that kind
    only leaves the memory unestimated (budget.workload says so); ms-swift downloads the model's own."""
    source, why = facts.model_config.source, facts.model_config_error
    if not why or source.startswith(("http://", "https://")):
        return []
    r, folder = plan.recipe, Path(source).parent
    if r.settings.MODEL_SOURCE == "embedded":
        fix = "convert the embedded model again: `python -m entrypoint prepare-model` (`make model`)"
    elif str(folder) == str(Path(r.trainer_args.model or "").expanduser()):
        fix = "restore the model's config.json (download the model again into that folder), or point MODEL elsewhere"
    else:  # a hub cache's snapshot
        fix = f"remove the damaged snapshot {folder} from the hub cache: ms-swift then downloads the model again"
    return [
        Problem(f"MODEL ({r.source('MODEL')})", f"{source} {why}: the model cannot be loaded from it", fix)
    ]


def batch_fix(plan: Plan) -> str:
    """The knobs that shrink one generation batch, as this recipe sets it: GENERATION_BATCH_SIZE or
    STEPS_PER_GENERATION when a layer sets them (then the micro-batch does not change it), else the micro-batch
    and accumulation (ms-swift: generation batch = per-device x processes x steps_per_generation, which
    defaults to gradient_accumulation_steps; v3.6.4:swift/trainers/rlhf_arguments.py)."""
    r, b = plan.recipe, plan.budget.batch if plan.budget else None
    g = (
        f" (now {b.generation_batch} = {b.prompts_per_generation} prompts x NUM_GENERATIONS {b.num_generations})"
        if b
        else ""
    )
    if r.is_set("GENERATION_BATCH_SIZE"):
        return f"lower GENERATION_BATCH_SIZE{g}"
    if r.is_set("STEPS_PER_GENERATION"):
        return f"lower STEPS_PER_GENERATION or PER_DEVICE_TRAIN_BATCH_SIZE{g}"
    return f"lower PER_DEVICE_TRAIN_BATCH_SIZE / GRADIENT_ACCUMULATION_STEPS{g}"


def check_rewards_and_data(plan: Plan, facts: Facts) -> list[Problem]:
    """The reward plugins, and the dataset against the columns the rewards read."""
    r, s = plan.recipe, plan.recipe.settings
    infos, problems = rewards_check.check(
        _plugin_files(plan), list(r.trainer_args.reward_funcs), facts.plugins, facts.plugin_error,
        lambda f: facts.path(Path(f)).unusable_file(), facts.in_container,
    )  # fmt: skip
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
            plan.dataset_paths, needed, prompts_needed, a.split_dataset_ratio, plan.offline, a.use_hf, facts,
            batch_fix=batch_fix(plan), max_length=a.max_length, mapping=mapping,
        )  # fmt: skip
        return problems + found.problems
    generated = set(tasks.TASKS[s.DATASET_GENERATOR].columns)
    for column, readers in needed.items():
        if column not in generated:
            problems.append(
                Problem(
                    f"REWARD_FUNCS {', '.join(readers)}",
                    f"reads `{column}`, which the {s.DATASET_GENERATOR} generator does not write (it writes {', '.join(sorted(generated))})",
                    "choose rewards that fit the generated tasks",
                )
            )
    if int(s.DATASET_ROWS * (1 - a.split_dataset_ratio)) < prompts_needed:
        problems.append(
            Problem(
                f"DATASET_ROWS ({r.source('DATASET_ROWS')})",
                f"{s.DATASET_ROWS} rows, fewer than one generation batch needs ({prompts_needed})",
                f"set DATASET_ROWS >= {prompts_needed}",
            )  # fmt: skip
        )
    return problems


def check(plan: Plan, facts: Facts, for_train: bool) -> list[Problem]:
    """Every problem found in the plan's inputs; fatal ones stop `train`, `plan` and `validate`. The
    problems of kind LOCAL come last, and `plan` (for_train False) only warns about them. A plan without a
    layout (no GPU for a GPU recipe) still gets the checks of its values, model, rewards and data."""
    workers = plan.recipe.trainer_args.dataloader_num_workers
    found = values.check(plan, facts) + packages.check(plan, facts) + check_model(plan, facts)
    found += check_rewards_and_data(plan, facts)
    if plan.placed:  # without a layout (its problem says why) the checks of the machine would only echo it
        found += memory_check.check(plan) + environment.check(plan, facts, workers)
    local = [p for p in found if p.kind == LOCAL]
    if not for_train:
        local = [dataclasses.replace(p, fatal=False) for p in local]
    return [p for p in found if p.kind != LOCAL] + local
