"""The model a run trains: an embedded model converted already, a local directory that holds a config.json
and weights, or something shaped like a hub id (a hub model not cached offline is the plan's own problem)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from entrypoint.errors import LOCAL, Problem
from entrypoint.facts import catalog
from entrypoint.facts.facts import ENTRIES_LISTED

if TYPE_CHECKING:
    from entrypoint.facts.facts import Facts
    from entrypoint.plan.build import Plan

HUB_MODEL_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# What transformers loads a model's weights from (its *_NAME constants: model.safetensors and its index,
# pytorch_model.bin and shards; .pt/.pth for some trust_remote_code models); sharded checkpoints name their
# index *.index.json.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".index.json", ".pt", ".pth")


def check(plan: Plan, facts: Facts) -> list[Problem]:
    """MODEL: an embedded model converted, a local directory with its config and weights, or a hub id."""
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
                    f"embedded model {value} is not converted yet (or by an older version) at "
                    f"{plan.model_path}",
                    "run `python -m entrypoint prepare-model` (`make model`; the image does this at build "
                    "time)",
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
                    f"{path} has a config.json but no weights ({', '.join(WEIGHT_SUFFIXES)}): a download "
                    "that stopped early, or only the configuration copied; loading it would fail after the "
                    "start-up",
                    "download the model again into that directory (e.g. "
                    f"`huggingface-cli download <id> --local-dir {path}`), or point MODEL at the directory "
                    "that holds the weights",
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
            )
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
        fix = (
            "restore the model's config.json (download the model again into that folder), or point MODEL "
            "elsewhere"
        )
    else:  # a hub cache's snapshot
        fix = (
            f"remove the damaged snapshot {folder} from the hub cache: ms-swift then downloads the model "
            "again"
        )
    return [
        Problem(f"MODEL ({r.source('MODEL')})", f"{source} {why}: the model cannot be loaded from it", fix)
    ]
