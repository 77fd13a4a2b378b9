"""The rows of a local JSON/JSONL, CSV or parquet dataset file, as ms-swift 3.6.4 reads them (the `datasets`
builder named by the extension: facts/datasets.py, READ_SUFFIXES); called by host.gather and evaluate."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from entrypoint.errors import Problem
from entrypoint.facts.datasets import MAX_ROW_PROBLEMS, MAX_ROWS_PARSED, type_name


def read_rows(path: Path) -> tuple[list[tuple[int, dict]], int, list[Problem]]:
    """(line number, row) pairs (up to MAX_ROWS_PARSED), total row count, parse problems, for a file with
    one of READ_SUFFIXES. The number is a JSONL or CSV row's line, a JSON list's item, a parquet file's row.
    Raises UnicodeDecodeError for a text file that is not UTF-8."""
    readers = {".json": _read_json, ".csv": _read_csv, ".parquet": _read_parquet}
    return readers.get(path.suffix, _read_jsonl)(path)


def _read_csv(path: Path) -> tuple[list[tuple[int, dict]], int, list[Problem]]:
    """A CSV file as `datasets`' csv builder gives ms-swift its rows (pandas.read_csv, na_filter=False): a
    header row of column names, every value text (an empty field stays ""). A row with more fields than the
    header stops pandas ("Error tokenizing data"), so it is a problem here."""
    where = f"dataset {path}"
    rows: list[tuple[int, dict]] = []
    problems: list[Problem] = []
    total = 0
    with path.open("r", encoding="utf-8-sig", errors="strict", newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            total += 1
            if None in row:  # DictReader's key for the fields past the header's
                columns = len(reader.fieldnames or [])
                problems.append(
                    Problem(
                        f"{where} line {reader.line_num}",
                        f"has {columns + len(row[None])} fields where the header has {columns}",
                        "quote fields that contain commas, or fix that line",
                    )
                )
                if len(problems) >= MAX_ROW_PROBLEMS:
                    return rows, total, problems
                continue
            if len(rows) < MAX_ROWS_PARSED:
                rows.append((reader.line_num, {k: "" if v is None else v for k, v in row.items()}))
    return rows, total, problems


def _read_parquet(path: Path) -> tuple[list[tuple[int, dict]], int, list[Problem]]:
    """A parquet file's rows (pyarrow, which `datasets`' parquet builder reads it with): the first
    MAX_ROWS_PARSED as Python values, the count from the file's metadata."""
    import pyarrow.parquet as pq  # only for a parquet dataset: pyarrow takes a second to import

    try:
        f = pq.ParquetFile(path)
        batch = next(f.iter_batches(batch_size=MAX_ROWS_PARSED), None)
    except Exception as exc:  # pyarrow's ArrowInvalid / OSError for a file it cannot read
        return (
            [],
            0,
            [Problem(f"dataset {path}", f"is not a readable parquet file ({exc})", "write it again")],
        )
    rows = [] if batch is None else batch.to_pylist()
    return [(i + 1, row) for i, row in enumerate(rows)], f.metadata.num_rows, []


def _read_json(path: Path) -> tuple[list[tuple[int, dict]], int, list[Problem]]:
    where = f"dataset {path}"
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except ValueError as exc:
        return (
            [],
            0,
            [
                Problem(
                    where, f"is not valid JSON: {exc}", "fix the file, or write JSONL: one object per line"
                )
            ],
        )
    if not isinstance(data, list):
        return (
            [],
            0,
            [Problem(where, "a .json dataset must be a list of objects", "write a JSON list or JSONL")],
        )
    rows, problems = [], []
    for i, row in enumerate(data[:MAX_ROWS_PARSED]):
        if isinstance(row, dict):
            rows.append((i + 1, row))
        else:
            problems.append(
                Problem(
                    f"{where} item {i + 1}",
                    f"is a {type_name(row)}, not an object",
                    "each item must be an object",
                )
            )
    return rows, len(data), problems


def _read_jsonl(path: Path) -> tuple[list[tuple[int, dict]], int, list[Problem]]:
    where = f"dataset {path}"
    head = path.open("rb").read(4096)
    # ms-swift 3.6.4 reads .jsonl with datasets' json builder (swift/llm/dataset/loader.py:208), which takes a
    # byte-order mark and, when line parsing fails, one JSON array of objects: both are valid input.
    if head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"["):
        return _read_json(path)
    rows: list[tuple[int, dict]] = []
    problems: list[Problem] = []
    total = 0
    last: tuple[int, str] | None = None  # the last line past MAX_ROWS_PARSED: a file cut short ends there
    with path.open("r", encoding="utf-8-sig", errors="strict") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            total += 1
            if len(rows) >= MAX_ROWS_PARSED:
                last = (number, line)
                continue
            try:
                row = json.loads(line.rstrip("\r\n"))  # a column past the newline would point nowhere
            except ValueError as exc:
                problems.append(
                    Problem(
                        f"{where} line {number}",
                        f"is not JSON ({exc.msg}; column {exc.colno})",
                        "fix or remove that line",
                    )
                )
                if len(problems) >= MAX_ROW_PROBLEMS:
                    problems.append(
                        Problem(
                            where,
                            f"more lines fail to parse; stopped after {MAX_ROW_PROBLEMS}",
                            "check how the file was written",
                        )
                    )
                    return rows, total, problems
                continue
            if not isinstance(row, dict):
                problems.append(
                    Problem(
                        f"{where} line {number}",
                        f"is a JSON {type_name(row)}, not an object",
                        "one JSON object per line",
                    )
                )
                continue
            rows.append((number, row))
    return rows, total, problems + _beyond_the_parsed(where, total, last)


def _beyond_the_parsed(where: str, total: int, last: tuple[int, str] | None) -> list[Problem]:
    """Past MAX_ROWS_PARSED rows only lines are counted (seconds, not minutes, for a million rows): the last
    line is still parsed (a download or copy cut short ends mid-line, which `datasets` fails on only after
    ms-swift loaded the model), and a warning says how much was checked."""
    if last is None:
        return []
    number, line = last
    try:
        json.loads(line.rstrip("\r\n"))
    except ValueError as exc:
        return [
            Problem(
                f"{where} line {number}",
                f"(the last line) is not JSON ({exc.msg}): the file looks cut short",
                "write or copy the file again",
            )
        ]
    return [
        Problem(
            where,
            f"has {total} rows: the first {MAX_ROWS_PARSED} were checked, the rest counted (and the "
            "last line parsed)",
            "split it, or check the rest with a script of your own",
            fatal=False,
        )
    ]
