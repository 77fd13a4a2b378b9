"""Dataset specs and files as ms-swift reads them: `org/name[:subset][#rows]` hub ids, local files, and
the rows of a JSON/JSONL, CSV or parquet file (read by host.gather; checked by preflight/dataset.py)."""

from __future__ import annotations

import ast
import csv
import dataclasses
import json
import re
from pathlib import Path

from entrypoint.errors import Problem

MAX_ROWS_PARSED = 50_000  # rows fully checked; beyond that only lines are counted (keeps this in seconds)
MAX_ROW_PROBLEMS = 5  # faulty rows named one by one (the readers stop there; preflight counts the rest)
LOCAL_SUFFIXES = (".jsonl", ".json", ".csv", ".txt", ".parquet")
# the files whose rows are read and checked: ms-swift 3.6.4 loads a local file with the `datasets` builder
# named by its extension (swift/llm/dataset/loader.py:207-212: jsonl -> json, csv with na_filter=False,
# parquet); .txt (one `text` column, no prompt column ms-swift converts) is left to ms-swift
READ_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(:[\w.-]+)?$")

# How ms-swift 3.6.4's MessagesPreprocessor reads a conversation (swift/llm/dataset/preprocessor/core.py):
# a text value through ast.literal_eval (default_repair_messages, :398-401, e.g. a CSV column), a message's
# role under `role` or `from` and its content under `content` or `value` (:424-425), and role names mapped
# (to_std_messages, :463-476)
ROLE_KEYS, CONTENT_KEYS = ("role", "from"), ("content", "value")
MESSAGE_COLUMNS = ("messages", "conversations", "conversation")  # renamed to `messages` (:434-436)
ROLE_NAMES = {"human": "user", "gpt": "assistant", "bot": "assistant", "function_call": "tool_call",
              "function_response": "tool_response", "observation": "tool_response",
              "observations": "tool_response"}  # fmt: skip


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
                problems.append(Problem(f"{where} line {reader.line_num}",
                                        f"has {columns + len(row[None])} fields where the header has {columns}",
                                        "quote fields that contain commas, or fix that line"))  # fmt: skip
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
                problems.append(Problem(f"{where} line {number}", f"is a JSON {type_name(row)}, not an object",
                                        "one JSON object per line"))  # fmt: skip
                continue
            rows.append((number, row))
    return rows, total, problems


def standard_messages(value):
    """A row's `messages` as ms-swift makes it standard (ROLE_KEYS, CONTENT_KEYS, ROLE_NAMES): a list of
    {"role", "content"} where it is a list of objects; text read as a Python literal first (None when that
    fails); anything else as it is, for the checks to name."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        return value
    standard = []
    for m in value:
        role = next((m[k] for k in ROLE_KEYS if k in m), None)
        content = next((m[k] for k in CONTENT_KEYS if k in m), None)
        role = ROLE_NAMES.get(role.replace("-", "_"), role) if isinstance(role, str) else role
        standard.append({"role": role, "content": content})
    return standard


def message_column(row: dict) -> str | None:
    """The column ms-swift takes a row's conversation from (MESSAGE_COLUMNS), or None."""
    return next((c for c in MESSAGE_COLUMNS if c in row), None)
