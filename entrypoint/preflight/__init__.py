"""Preflight: everything that can be checked before heavy work is checked before heavy work.

"Heavy work" is any model or dataset download, model load, or process on a GPU. These checks read the
plan, the recipe's files and the machine, import reward plugins in a throwaway process (with a stub
ms-swift, so it takes well under a second), and report every problem at once, each naming its fix.
`train` and `validate` refuse on any fatal problem; `plan` shows problems about local inputs (a dataset
file not there yet, an unconverted embedded model, the output volume) as warnings, so a plan can be
previewed before the data is in place.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

from entrypoint import hubcache, models
from entrypoint.errors import Problem
from entrypoint.plan import Plan
from entrypoint.preflight import dataset, environment, memory_check, plugins, values

HUB_MODEL_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _plugin_files(plan: Plan) -> list[str]:
    argv = (plan.process("trainer") or plan.process("rollout")).argv
    i = argv.index("--external_plugins") + 1
    files = []
    while i < len(argv) and not argv[i].startswith("--"):
        files.append(argv[i])
        i += 1
    return files


def check_model(plan: Plan, environ: Mapping[str, str]) -> list[Problem]:
    r = plan.recipe
    value = r.raw("MODEL") or ""
    if not value or r.settings.MODEL_SOURCE == "embedded":
        return []
    where = f"MODEL ({r.source('MODEL')})"
    if value.startswith(("/", "./", "../", "~")) or Path(value).exists():
        path = Path(value).expanduser()
        if not path.is_dir() or not (path / "config.json").is_file():
            return [
                Problem(
                    where,
                    f"{path} is not a model directory with a config.json inside the container",
                    "mount the model directory and give its container path",
                )
            ]
        return []
    if not HUB_MODEL_RE.match(value):
        return [
            Problem(
                where,
                f"{value!r} is neither a local model directory nor a hub id (org/name)",
                "give a hub id like Qwen/Qwen2.5-0.5B-Instruct or a path",
            )
        ]
    if r.settings.OFFLINE:
        use_hf = (r.trainer.get("use_hf") or ["false"])[0] == "true"
        if hubcache.cached(value, "models", use_hf, environ) is None:
            return [
                Problem(
                    where,
                    "OFFLINE is set and the model is not in the local hub cache",
                    "download it once with network access into the same cache volume, or give a local path",
                )
            ]
    return []


def check(plan: Plan, environ: Mapping[str, str], for_train: bool) -> list[Problem]:
    """Every problem found in the plan's inputs; fatal ones stop `train`, `plan` and `validate`."""
    r = plan.recipe
    local: list[Problem] = []  # about inputs on this machine: warnings for `plan`
    problems: list[Problem] = []

    s = r.settings
    if (
        s.MODEL_SOURCE == "embedded"
        and r.raw("MODEL") in models.CATALOG
        and not Path(plan.model_path, models.PROVENANCE_FILE).is_file()
    ):
        local.append(
            Problem(
                "MODEL",
                f"embedded model {r.raw('MODEL')} is not converted yet at {plan.model_path}",
                "run `python -m entrypoint prepare-model` (`make model`; the image does this at build time)",
            )
        )
    problems += values.check(plan)
    problems += check_model(plan, environ)

    infos, found = plugins.check(_plugin_files(plan), r.trainer.get("reward_funcs", []))
    problems += found
    needed: dict[str, list[str]] = {}
    for name, info in infos.items():
        for column in info.columns:
            needed.setdefault(column, []).append(name)

    b = values.batch(plan)
    prompts_needed = b.prompts_per_generation if b.num_generations >= 2 else 0
    holdout = float((r.trainer.get("split_dataset_ratio") or ["0"])[0])
    if s.DATASET_GENERATOR:
        generated_columns = {"messages", "nums", "target"}
        for column, readers in needed.items():
            if column not in generated_columns:
                problems.append(
                    Problem(
                        f"REWARD_FUNCS {', '.join(readers)}",
                        f"reads `{column}`, which the {s.DATASET_GENERATOR} generator does not write (it writes {', '.join(sorted(generated_columns))})",
                        "choose rewards that fit the generated tasks",
                    )
                )
        if int(s.DATASET_ROWS * (1 - holdout)) < prompts_needed:
            problems.append(
                Problem(
                    f"DATASET_ROWS ({r.source('DATASET_ROWS')})",
                    f"{s.DATASET_ROWS} rows, fewer than one generation batch needs ({prompts_needed})",
                    f"set DATASET_ROWS >= {prompts_needed}",
                )
            )
    else:
        use_hf = (r.trainer.get("use_hf") or ["false"])[0] == "true"
        found, _ = dataset.check(
            plan.dataset_paths, needed, prompts_needed, holdout, s.OFFLINE, use_hf, dict(environ)
        )
        for p in found:
            (local if "not found" in p.message or "not readable" in p.message else problems).append(p)

    estimates, found, note = memory_check.estimate(plan, environ)
    plan.memory[:] = estimates
    plan.memory_note[:] = [note] if note else []
    problems += found

    workers = int((r.trainer.get("dataloader_num_workers") or ["0"])[0])
    local += environment.check(plan, environ, workers, checkpoint_gib=None)

    if not for_train:
        local = [dataclasses.replace(p, fatal=False) for p in local]
    return problems + local
