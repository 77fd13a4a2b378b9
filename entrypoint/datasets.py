"""Dataset specs and files as ms-swift reads them: `org/name[:subset][#rows]` hub ids, local files, and
the rows of a JSON/JSONL file (read by host.gather; checked by preflight/dataset.py)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from entrypoint.errors import Problem

MAX_ROWS_PARSED = 50_000  # rows fully checked; beyond that only lines are counted (keeps this in seconds)
LOCAL_SUFFIXES = (".jsonl", ".json", ".csv", ".txt", ".parquet")
HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(:[\w.-]+)?$")


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    text: str
    path: str  # without #N
    rows: int | None  # ms-swift's #N sampling


def parse_spec(text: str) -> DatasetSpec:
    m = re.match(r"^(.*?)#(\d+)$", text)
    return DatasetSpec(text, m.group(1), int(m.group(2))) if m else DatasetSpec(text, text, None)


def dataset_key(path: str | Path) -> str:
    """How facts.Facts.datasets names a local dataset file: its absolute path."""
    return str(Path(path).expanduser().absolute())


def is_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or path.endswith(LOCAL_SUFFIXES) or Path(path).exists()


def type_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "list", dict: "object"}.get(type(value), type(value).__name__)


def read_rows(path: Path) -> tuple[list[tuple[int, dict]], int, list[Problem]]:
    """(line number, row) pairs (up to MAX_ROWS_PARSED), total row count, parse problems. Raises
    UnicodeDecodeError for a file that is not UTF-8."""
    return _read_json(path) if path.suffix == ".json" else _read_jsonl(path)


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
    with path.open("r", encoding="utf-8-sig", errors="strict") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            total += 1
            if len(rows) >= MAX_ROWS_PARSED:
                continue
            try:
                row = json.loads(line.rstrip("\r\n"))  # a column past the newline would point nowhere
            except ValueError as exc:
                problems.append(Problem(f"{where} line {number}", f"is not JSON ({exc.msg}; column {exc.colno})",
                                        "fix or remove that line"))  # fmt: skip
                if len(problems) >= 5:
                    problems.append(
                        Problem(
                            where,
                            "more lines fail to parse; stopped after 5",
                            "check how the file was written",
                        )
                    )
                    return rows, total, problems
                continue
            if not isinstance(row, dict):
                problems.append(Problem(f"{where} line {number}", f"is a JSON {type_name(row)}, not an object",
                                        "one JSON object per line"))  # fmt: skip
                continue
            rows.append((number, row))
    return rows, total, problems
