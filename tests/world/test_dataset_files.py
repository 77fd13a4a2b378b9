"""The dataset file readers (entrypoint/world/dataset_files.py) on files past the rows they check."""

from __future__ import annotations

import json

from entrypoint.facts.datasets import MAX_ROWS_PARSED
from entrypoint.world import dataset_files


def _rows(count: int) -> list[str]:
    return [
        json.dumps({"messages": [{"role": "user", "content": f"q{i}"}], "solution": str(i)})
        for i in range(count)
    ]


def test_a_large_file_cut_short_is_caught_at_its_last_line(tmp_path):
    """Past MAX_ROWS_PARSED rows lines are only counted, but the last one is parsed: a copy cut short (which
    `datasets` fails on after ms-swift loaded the model) is refused naming that line."""
    path = tmp_path / "big.jsonl"
    rows = _rows(MAX_ROWS_PARSED + 10)
    path.write_text("\n".join(rows) + "\n" + rows[0][:20] + "\n")
    _, total, problems = dataset_files.read_rows(path)
    assert total == MAX_ROWS_PARSED + 11
    (problem,) = problems
    assert (
        problem.fatal
        and problem.where.endswith(f"line {MAX_ROWS_PARSED + 11}")
        and "cut short" in problem.message
    )


def test_a_large_whole_file_says_how_much_was_checked(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(_rows(MAX_ROWS_PARSED + 10)) + "\n")
    rows, total, problems = dataset_files.read_rows(path)
    assert len(rows) == MAX_ROWS_PARSED and total == MAX_ROWS_PARSED + 10
    (note,) = problems
    assert not note.fatal and f"the first {MAX_ROWS_PARSED} were checked" in note.message
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(_rows(20)) + "\n")
    assert dataset_files.read_rows(small)[2] == []
