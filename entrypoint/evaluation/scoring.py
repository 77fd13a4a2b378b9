"""The run's own reward functions on `evaluate`'s completions: imported as ms-swift builds them, probed on
the held-out rows before any model loads, then scoring each completion."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from entrypoint.errors import BadInput, Problem
from entrypoint.recipe import load as recipe_mod


def load_rewards(names: Sequence[str], plugins: Sequence[str]) -> dict[str, Any]:
    """The run's reward functions as ms-swift would build them: its plugins imported, then orms[name]()."""
    import importlib
    import sys

    for file in plugins:
        path = Path(file)
        if recipe_mod.is_file(path):
            sys.path.insert(0, str(path.parent))
            importlib.import_module(path.stem)
    from swift.plugin import orms

    missing = [n for n in names if n not in orms]
    if missing:
        raise BadInput(
            [
                Problem(
                    "REWARD_FUNCS",
                    f"{', '.join(missing)} not registered by the run's plugins {list(plugins)}",
                    "evaluate where the run's EXTERNAL_PLUGINS files are (inside the container)",
                )
            ]
        )
    return {n: orms[n]() for n in names}


def probe_rewards(rewards: Mapping[str, Any], rows: list[dict], prompts: list[list[dict]], how: str) -> None:
    """Each reward function on the held-out rows with an empty completion, before any model loads:
    rows without the columns a reward needs (a countdown reward's nums and target) fail here in seconds,
    not after the generation (8 min 44 s in a users' trial, then a raw TypeError). Raises BadInput naming
    the reward, its error and the rows' columns."""
    columns = {k for r in rows for k in r}
    short = [(i, sorted(columns - set(r))) for i, r in enumerate(rows) if columns - set(r)]
    if short and rewards:
        shown = "; ".join(f"row {i + 1} lacks {', '.join(m)}" for i, m in short[:3])
        raise BadInput(
            [
                Problem(
                    "EVAL_DATASET" if how.startswith("EVAL_DATASET") else "held-out rows",
                    f"{len(short)} of the {len(rows)} rows of {how} lack columns the others have ({shown}): "
                    "a reward would get None there and may score it 0 without a word",
                    "give every row the same columns (the training dataset's)",
                )
            ]
        )
    sample_rows, sample_prompts = rows, prompts
    for name, func in rewards.items():
        try:
            score({name: func}, sample_rows, sample_prompts, [[""] for _ in sample_rows])
        except Exception as exc:  # a user's reward may raise anything on rows it cannot read
            columns = sorted({k for r in sample_rows for k in r})
            raise BadInput(
                [
                    Problem(
                        "EVAL_DATASET" if how.startswith("EVAL_DATASET") else "held-out rows",
                        f"the run's reward {name} cannot score the rows of {how} ({type(exc).__name__}: "
                        f"{exc}); their columns: {', '.join(columns)}",
                        "give rows in the training dataset's format, with the columns the run's rewards "
                        "read (docs/rewards.md)",
                    )
                ]
            ) from None


def score(
    rewards: Mapping[str, Any], rows: list[dict], prompts: list[list[dict]], completions: list[list[str]]
) -> dict[str, list[list[float]]]:
    """{reward: per prompt, the reward of each completion} (None scores as 0, as ms-swift's nansum does)."""
    from types import SimpleNamespace

    flat = [c for group in completions for c in group]
    owners = [i for i, group in enumerate(completions) for _ in group]
    columns: dict[str, list] = {}
    for key in {k for r in rows for k in r if k != "messages"}:
        columns[key] = [rows[i].get(key) for i in owners]
    messages = [[*prompts[i], {"role": "assistant", "content": c}] for i, c in zip(owners, flat, strict=True)]
    state = SimpleNamespace(global_step=0, max_steps=1, epoch=0.0)
    out: dict[str, list[list[float]]] = {}
    for name, func in rewards.items():
        values = [
            0.0 if v is None else float(v)
            for v in func(flat, messages=messages, trainer_state=state, **columns)
        ]
        per_prompt: list[list[float]] = [[] for _ in completions]
        for i, v in zip(owners, values, strict=True):
            per_prompt[i].append(v)
        out[name] = per_prompt
    return out
