"""The arithmetic task generator and its reward (entrypoint/rewards/arithmetic.py), and the task registry
DATASET_GENERATOR reads (entrypoint/rewards/tasks.py)."""

from __future__ import annotations

import json

import pytest

from entrypoint.rewards import arithmetic, tasks


def test_same_seed_same_rows_and_every_solution_is_the_exact_result():
    rows = list(arithmetic.generate(300, seed=1))
    assert rows == list(arithmetic.generate(300, seed=1)) != list(arithmetic.generate(300, seed=2))
    for row in rows:
        assert set(row) == {"messages", "solution"}
        assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "user"]
        a, op, b = row["messages"][-1]["content"].removeprefix("What is ").removesuffix("?").split()
        assert int(row["solution"]) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    assert {r["messages"][-1]["content"].split()[3] for r in rows} == {"+", "-", "*"}
    # the worked example in the prompt is itself scored correct
    assert arithmetic.score(arithmetic.EXAMPLE_ANSWER, 42) == 1.0


@pytest.mark.parametrize(
    ("completion", "solution", "expected"),
    [
        ("<think> 89 + 42 = 131 </think>\n<answer> 131 </answer>", "131", 1.0),
        ("<think> 89 + 42 = 131 </think>\n<answer> 132 </answer>", "131", 0.0),
        ("<answer>-17</answer>", "-17", 1.0),  # differences can be negative
        ("89 + 42 = 131", "131", 1.0),  # no tags: the last number is the answer (format_partial scores tags)
        ("the answer is 131, or maybe 130", "131", 0.0),
        ("<answer> 131 </answer> then <answer> 7 </answer>", "131", 0.0),  # the last answer span counts
        ("no number at all", "131", 0.0),
        ("<answer>131</answer>", "not a number", 0.0),
        ("9" * 100_000, "9", 0.0),  # a runaway completion stays cheap and wrong
    ],
)
def test_the_reward_scores_the_last_answer(completion, solution, expected):
    assert arithmetic.score(completion, solution) == expected


def test_batch_form_reads_the_solution_column_row_by_row():
    assert arithmetic.arithmetic_rewards(["<answer>3</answer>", "4"], ["3", "5"]) == [1.0, 0.0]


@pytest.mark.parametrize("name", sorted(tasks.TASKS))
def test_every_generator_writes_its_columns_and_held_out_tasks_are_new(tmp_path, name):
    task = tasks.TASKS[name]
    path = tasks.write_jsonl(task, tmp_path / "d" / f"{name}.jsonl", rows=50, seed=7)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == list(task.generate(50, 7)) and all(set(r) == task.columns for r in rows)
    assert not list(path.parent.glob("*.tmp"))
    fresh = tasks.held_out(task, 40, seed=1234, seen_rows=50, seen_seed=7)
    seen = {task.key(r) for r in rows}
    assert len(fresh) == 40 and not seen & {task.key(r) for r in fresh}
    assert len({task.key(r) for r in fresh}) == 40  # no task twice among the held-out prompts
