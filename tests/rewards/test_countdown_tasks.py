"""Countdown task generator: deterministic, reachable, in the GRPO dataset shape."""

from __future__ import annotations

import json

from entrypoint.rewards import countdown, tasks
from entrypoint.rewards import countdown as reward


def test_same_seed_same_rows_other_seed_other_rows():
    assert list(countdown.generate(20, seed=1)) == list(countdown.generate(20, seed=1))
    assert list(countdown.generate(20, seed=1)) != list(countdown.generate(20, seed=2))


def test_every_task_is_reachable_and_well_formed():
    for row in countdown.generate(200, seed=3):
        assert set(row) == {"messages", "nums", "target"}
        assert row["messages"][-1]["role"] == "user"
        assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "user"]
        assert 3 <= len(row["nums"]) <= 4 and all(isinstance(n, int) for n in row["nums"])
        assert isinstance(row["target"], int) and 0 < row["target"] <= countdown.MAX_TARGET
        assert str(row["target"]) in row["messages"][-1]["content"]
    # the worked example in the prompt is itself a correct answer
    assert reward.score(countdown.EXAMPLE_ANSWER, countdown.EXAMPLE_NUMS, countdown.EXAMPLE_TARGET) == 1.0


def test_write_jsonl(tmp_path):
    path = tasks.write_jsonl(tasks.TASKS["countdown"], tmp_path / "d" / "c.jsonl", rows=5, seed=0)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == list(countdown.generate(5, seed=0))
    assert not list(path.parent.glob("*.tmp"))
