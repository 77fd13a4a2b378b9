"""The task generators DATASET_GENERATOR names, in one registry: what each writes, how two of its rows are
the same task (held-out prompts leave out the training tasks), and the reward that scores it.

    countdown   numbers and a reachable target; reward `countdown` (rewards/countdown.py)
    arithmetic  one- and two-digit + - *; reward `arithmetic` (rewards/arithmetic.py)

Adding one: a module beside these with `generate(rows, seed)` and `task_key(row)`, a line in TASKS, and
its reward registered in grpo_rig_rewards.py.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path

from entrypoint.rewards import arithmetic, countdown


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    generate: Callable[[int, int], Iterator[dict]]  # (rows, seed) -> rows, the same for the same seed
    key: Callable[[dict], Hashable]  # two rows with the same key are the same task
    columns: frozenset[str]  # every row's keys
    reward: str  # the ORM (REWARD_FUNCS name) that scores its answers


def _countdown_key(row: dict) -> Hashable:
    return (tuple(row["nums"]), row["target"])


TASKS: dict[str, Task] = {
    "countdown": Task(
        "countdown",
        countdown.generate,
        _countdown_key,
        frozenset({"messages", "nums", "target"}),
        "countdown",
    ),
    "arithmetic": Task(
        "arithmetic",
        arithmetic.generate,
        arithmetic.task_key,
        frozenset({"messages", "solution"}),
        "arithmetic",
    ),
}


def write_jsonl(task: Task, path: Path, rows: int, seed: int) -> Path:
    """Write `rows` of `task` to `path` (JSONL, UTF-8) atomically; returns `path`. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for row in task.generate(rows, seed):
                f.write(json.dumps(row) + "\n")
        tmp.replace(path)
    except BaseException:  # a full disk or a signal: no half-written file stays behind
        tmp.unlink(missing_ok=True)
        raise
    return path


def held_out(task: Task, rows: int, seed: int, seen_rows: int, seen_seed: int) -> list[dict]:
    """`rows` fresh tasks from `seed` that are none of the `seen_rows` training tasks drawn from
    `seen_seed`."""
    seen = {task.key(r) for r in task.generate(seen_rows, seen_seed)}
    fresh: list[dict] = []
    for row in task.generate(rows * 20, seed):
        if task.key(row) not in seen and len(fresh) < rows:
            seen.add(task.key(row))
            fresh.append(row)
    return fresh
