"""The held-out prompts `evaluate` asks, read from a run's manifest: the trainer's arguments as the run
planned them, the rows the trainer never saw (fresh tasks from the run's generator with another seed,
EVAL_DATASET, or the run's VAL_DATASET), each row's prompt as the trainer prompted it, and the run's sampling
settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from entrypoint.errors import BadInput, Problem
from entrypoint.facts import datasets
from entrypoint.recipe import load as recipe_mod
from entrypoint.recipe.args import TrainerArgs
from entrypoint.recipe.settings import Settings
from entrypoint.record import manifest as manifest_mod
from entrypoint.rewards import tasks
from entrypoint.world import dataset_files


def trainer_args(data: Mapping[str, Any]) -> dict[str, list[str]]:
    """The trainer's `swift rlhf` arguments as the run planned them (manifest processes)."""
    trainer = next((p for p in data.get("processes", []) if p.get("role") == "trainer"), None)
    out: dict[str, list[str]] = {}
    name = None
    for token in (trainer or {}).get("argv", [])[2:]:
        if token.startswith("--"):
            name = token[2:]
            out[name] = []
        elif name is not None:
            out[name].append(token)
    return out


class HeldOut(NamedTuple):
    """The prompts `evaluate` asks, and how they were chosen (eval.md says it)."""

    rows: list[dict]  # rows the trainer never saw
    how: str


def held_out(data: Mapping[str, Any], args: Mapping[str, list[str]], settings: Settings) -> HeldOut:
    """The rows the trainer never saw, and how they were chosen. Raises BadInput when there are none."""
    recipe = {k: v["value"] for k, v in manifest_mod.resolved_values(data).items()}
    if settings.EVAL_DATASET:
        rows = _read_rows(Path(settings.EVAL_DATASET), settings.EVAL_PROMPTS, "EVAL_DATASET")
        return HeldOut(rows, f"EVAL_DATASET {settings.EVAL_DATASET}")
    if recipe.get("DATASET_GENERATOR") in tasks.TASKS:
        name = recipe["DATASET_GENERATOR"]
        seen_rows = int(recipe.get("DATASET_ROWS", 256))
        fresh = tasks.held_out(
            tasks.TASKS[name], settings.EVAL_PROMPTS, settings.EVAL_SEED, seen_rows, int(data.get("seed", 42))
        )
        return HeldOut(
            fresh, f"{len(fresh)} fresh {name} tasks (seed {settings.EVAL_SEED}; training tasks removed)"
        )
    if recipe.get("VAL_DATASET"):
        rows = _read_rows(Path(recipe["VAL_DATASET"]), settings.EVAL_PROMPTS, "VAL_DATASET")
        return HeldOut(rows, f"the run's VAL_DATASET {recipe['VAL_DATASET']}")
    raise BadInput(
        [
            Problem(
                "EVAL_DATASET",
                f"the run trained on {', '.join(data.get('dataset', [])) or 'its dataset'} with no held-out "
                "split, so every row was seen in training",
                "give EVAL_DATASET=<a JSONL of held-out rows in the same format>",
            )
        ]
    )


def _read_rows(path: Path, limit: int, key: str) -> list[dict]:
    """The first `limit` rows of a held-out JSONL (or JSON list, CSV) file, read as training data is
    (dataset_files.read_rows: a byte-order mark, a JSON array; the line of a row that is not JSON). Raises
    BadInput naming `key` for a file that is missing, a directory, binary, or holds a broken line."""
    text, why = recipe_mod.read_user_file(path)
    fix = "give a JSONL file (one JSON object per line, as the training data)"
    if text is None:
        raise BadInput([Problem(f"{key} {path}", why, fix)])
    numbered, _, problems = dataset_files.read_rows(path)
    if any(p.fatal for p in problems):
        raise BadInput(
            [dataclasses.replace(p, where=p.where.replace("dataset ", f"{key} ", 1)) for p in problems]
        )
    # conversations as ms-swift reads them (text, `from`/`value`, human/gpt: datasets.standard_messages)
    rows = [
        {**row, "messages": datasets.standard_messages(row.get(datasets.message_column(row)))}
        for _, row in numbered
    ][:limit]
    if not rows or not all(_prompt_ready(r["messages"]) for r in rows):
        raise BadInput(
            [
                Problem(
                    f"{key} {path}",
                    "needs rows with `messages` (and the columns the rewards read)",
                    "use the training data's format",
                )
            ]
        )
    return rows


def _prompt_ready(messages: Any) -> bool:
    return (
        isinstance(messages, list)
        and bool(messages)
        and all(isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages)
    )


def prompt_messages(row: Mapping[str, Any], system: str | None) -> list[dict]:
    """The row's messages as the trainer prompted: SYSTEM first when the row has none."""
    messages = [m for m in row["messages"] if not (m["role"] == "assistant" and m is row["messages"][-1])]
    if system and messages[0]["role"] != "system":
        text, why = recipe_mod.read_user_file(Path(system)) if system.endswith(".txt") else (system, "")
        if text is None:
            raise BadInput(
                [
                    Problem(
                        f"SYSTEM {system}",
                        f"the run's system prompt file {why}",
                        "evaluate where the run's SYSTEM file is (inside the container)",
                    )
                ]
            )
        messages = [{"role": "system", "content": text}, *messages]
    return messages


def sampling(args: Mapping[str, list[str]]) -> dict[str, Any]:
    """The run's sampling settings (its argv, typed with ms-swift's defaults: args.TrainerArgs), the same
    for both models."""
    a = TrainerArgs.of(args)
    return {
        "temperature": a.temperature,
        "top_p": a.top_p,
        "top_k": a.top_k,
        "max_new_tokens": a.max_completion_length,
    }
