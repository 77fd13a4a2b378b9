"""Dataset checks before any download or model load (../shared/cases C08).

For a local file: it exists and is readable; JSONL/JSON parses (the failing line is named); each row has
a `messages` conversation (or a query/prompt column ms-swift converts); every column a selected reward
function reads is present in every row; each column keeps one JSON type across rows (pyarrow refuses
mixed types deep inside `datasets`); and there are enough prompts for one generation batch (with fewer,
ms-swift's dataloader is empty and accelerate crashes with `UnboundLocalError: current_batch`).

A hub dataset (`org/name[:subset][#rows]`) is checked for its form; with OFFLINE=true its local cache
must exist. ms-swift's `#N` suffix samples N rows.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from entrypoint import hubcache
from entrypoint.errors import Problem

MAX_ROWS_PARSED = 50_000  # rows fully checked; beyond that only lines are counted (keeps this in seconds)
LOCAL_SUFFIXES = (".jsonl", ".json", ".csv", ".txt", ".parquet")
HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(:[\w.-]+)?$")
ROLES = {"system", "user", "assistant", "tool"}
PROMPT_COLUMNS = ("messages", "query", "prompt", "instruction", "question", "conversations")
# Columns users commonly have instead of the one a reward reads.
SYNONYMS = {
    "solution": ["answer", "answers", "label", "ground_truth", "reference", "target", "gold", "response"]
}


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    text: str
    path: str  # without #N
    rows: int | None  # ms-swift's #N sampling


def parse_spec(text: str) -> DatasetSpec:
    m = re.match(r"^(.*?)#(\d+)$", text)
    return DatasetSpec(text, m.group(1), int(m.group(2))) if m else DatasetSpec(text, text, None)


def is_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or path.endswith(LOCAL_SUFFIXES) or Path(path).exists()


def _type_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "list", dict: "object"}.get(type(value), type(value).__name__)


def read_rows(path: Path) -> tuple[list[tuple[int, dict]], int, list[Problem]]:
    """(line number, row) pairs (up to MAX_ROWS_PARSED), total row count, parse problems."""
    problems: list[Problem] = []
    rows: list[tuple[int, dict]] = []
    where = f"dataset {path}"
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            return (
                [],
                0,
                [
                    Problem(
                        where,
                        f"is not valid JSON: {exc}",
                        "fix the file, or write JSONL: one object per line",
                    )
                ],
            )
        if not isinstance(data, list):
            return (
                [],
                0,
                [Problem(where, "a .json dataset must be a list of objects", "write a JSON list or JSONL")],
            )
        for i, row in enumerate(data[:MAX_ROWS_PARSED]):
            if isinstance(row, dict):
                rows.append((i + 1, row))
            else:
                problems.append(
                    Problem(
                        f"{where} item {i + 1}",
                        f"is a {_type_name(row)}, not an object",
                        "each item must be an object",
                    )
                )
        return rows, len(data), problems
    total = 0
    head = path.open("rb").read(4096)
    if head.startswith(b"\xef\xbb\xbf"):
        return (
            [],
            0,
            [
                Problem(
                    where,
                    "starts with a UTF-8 byte-order mark, which the JSON readers refuse",
                    "save the file as UTF-8 without BOM",
                )
            ],
        )
    if head.lstrip().startswith(b"["):
        return (
            [],
            0,
            [
                Problem(
                    where,
                    "is one JSON array, not JSON lines",
                    f"rename it to {path.with_suffix('.json').name}, or write one object per line",
                )
            ],
        )
    with path.open("r", encoding="utf-8", errors="strict") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            total += 1
            if len(rows) >= MAX_ROWS_PARSED:
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                problems.append(
                    Problem(
                        f"{where} line {number}",
                        f"is not JSON ({exc.msg} at column {exc.colno})",
                        "fix or remove that line",
                    )
                )
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
                problems.append(
                    Problem(
                        f"{where} line {number}",
                        f"is a JSON {_type_name(row)}, not an object",
                        "one JSON object per line",
                    )
                )
                continue
            rows.append((number, row))
    return rows, total, problems


def check_messages(path: Path, rows: Iterable[tuple[int, dict]]) -> list[Problem]:
    problems: list[Problem] = []
    for number, row in rows:
        where = f"dataset {path} line {number}"
        if "messages" not in row:
            if not any(c in row for c in PROMPT_COLUMNS):
                problems.append(
                    Problem(where, f"has no prompt: no `messages` column (columns: {', '.join(sorted(row)) or 'none'})",
                            'add "messages": [{"role": "user", "content": "..."}]')
                )  # fmt: skip
        else:
            messages = row["messages"]
            if not isinstance(messages, list) or not messages:
                problems.append(
                    Problem(
                        where,
                        "`messages` must be a non-empty list",
                        'e.g. [{"role": "user", "content": "..."}]',
                    )
                )
            elif not all(
                isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)
                for m in messages
            ):
                problems.append(
                    Problem(
                        where,
                        "each message needs a role (system/user/assistant/tool) and a string content",
                        'e.g. {"role": "user", "content": "..."}',
                    )
                )
            elif not any(m["role"] == "user" for m in messages):
                problems.append(
                    Problem(
                        where,
                        "`messages` has no user turn: nothing to prompt with",
                        "add the question as a user message",
                    )
                )
        if len(problems) >= 5:
            break
    return problems


def check_columns(path: Path, rows: list[tuple[int, dict]], needed: dict[str, list[str]]) -> list[Problem]:
    """`needed`: column -> reward functions that read it."""
    problems: list[Problem] = []
    present = set().union(*(row.keys() for _, row in rows)) if rows else set()
    for column, readers in needed.items():
        missing = [number for number, row in rows if column not in row]
        if not missing:
            continue
        who = ", ".join(readers)
        if len(missing) == len(rows):
            candidates = [c for c in SYNONYMS.get(column, []) if c in present] or difflib.get_close_matches(
                column, sorted(present), n=1
            )
            fix = (
                f"rename the `{candidates[0]}` column to `{column}`"
                if candidates
                else f"add a `{column}` column to every row"
            )
            problems.append(
                Problem(
                    f"dataset {path}",
                    f"reward {who} reads the `{column}` column, which no row has (columns: {', '.join(sorted(present))})",
                    fix,
                )
            )
        else:
            problems.append(
                Problem(
                    f"dataset {path} line {missing[0]}",
                    f"has no `{column}` column, which reward {who} reads ({len(missing)} rows lack it)",
                    f"add `{column}` to those rows",
                )
            )
    return problems


def check_types(path: Path, rows: list[tuple[int, dict]]) -> list[Problem]:
    first: dict[str, tuple[str, int]] = {}
    problems: list[Problem] = []
    reported: set[str] = set()
    for number, row in rows:
        for column, value in row.items():
            kind = _type_name(value)
            if kind == "null":
                continue
            if column not in first:
                first[column] = (kind, number)
            elif first[column][0] != kind and column not in reported:
                reported.add(column)
                problems.append(
                    Problem(
                        f"dataset {path} line {number}",
                        f"column `{column}` is a {kind} here but a {first[column][0]} on line {first[column][1]} "
                        "(a dataset column must keep one type)",
                        f"make `{column}` the same JSON type on every row",
                    )
                )
    return problems


def check(
    specs: list[str],
    needed: dict[str, list[str]],
    prompts_needed: int,
    holdout: float,
    offline: bool,
    use_hf: bool,
    environ: dict[str, str],
) -> tuple[list[Problem], int | None]:
    """Check every dataset. Returns (problems, number of training prompts in local files or None if unknown)."""
    problems: list[Problem] = []
    total_prompts: int | None = 0
    for text in specs:
        spec = parse_spec(text)
        if not is_local(spec.path):
            total_prompts = None
            if not HUB_ID_RE.match(spec.path):
                problems.append(
                    Problem(
                        f"DATASET {text}",
                        "is neither an existing file nor a hub id (org/name[:subset][#rows])",
                        "mount the file (./data -> /data) and give its container path",
                    )
                )
            elif offline and hubcache.cached(spec.path, "datasets", use_hf, environ) is None:
                problems.append(
                    Problem(
                        f"DATASET {text}",
                        "OFFLINE is set and the dataset is not in the local hub cache",
                        "download it once with network access (same cache volume), or use a local file",
                    )
                )
            continue
        path = Path(spec.path).expanduser()
        try:
            path.stat()
        except PermissionError:
            problems.append(
                Problem(
                    f"DATASET {text}",
                    f"cannot be reached by uid {os.getuid()} (a parent directory is not readable)",
                    "chmod a+rx the directories on the host (./data is mounted read-only at /data)",
                )
            )
            total_prompts = None
            continue
        except OSError:
            pass
        if not path.is_file():
            hint = " (compose mounts ./data at /data, read-only)" if str(path).startswith("/data") else ""
            problems.append(
                Problem(
                    f"DATASET {text}",
                    f"file not found inside the container{hint}",
                    "put the file there, or set DATASET to its container path",
                )
            )
            total_prompts = None
            continue
        if not os.access(path, os.R_OK):
            problems.append(
                Problem(
                    f"DATASET {text}",
                    f"is not readable by uid {os.getuid()}",
                    "chmod a+r the file on the host",
                )
            )
            total_prompts = None
            continue
        if path.suffix not in (".jsonl", ".json"):
            total_prompts = None  # csv/parquet: ms-swift reads them; rows are not checked here
            continue
        try:
            rows, count, found = read_rows(path)
        except UnicodeDecodeError as exc:
            problems.append(
                Problem(
                    f"DATASET {text}",
                    f"is not UTF-8 text ({exc.reason} at byte {exc.start})",
                    "save the file as UTF-8",
                )
            )
            total_prompts = None
            continue
        problems += found
        if not rows:
            problems.append(Problem(f"DATASET {text}", "has no rows", "add rows"))
        problems += check_messages(path, rows)
        problems += check_columns(path, rows, needed)
        problems += check_types(path, rows)
        if total_prompts is not None:
            total_prompts += min(count, spec.rows) if spec.rows else count
    if total_prompts is not None and prompts_needed:
        train_prompts = int(total_prompts * (1 - holdout))
        if train_prompts < prompts_needed:
            problems.append(
                Problem(
                    "DATASET",
                    f"{train_prompts} training prompts, fewer than one generation batch needs ({prompts_needed}); ms-swift's "
                    "dataloader would be empty and crash inside accelerate",
                    f"add prompts, or lower PER_DEVICE_TRAIN_BATCH_SIZE / GRADIENT_ACCUMULATION_STEPS so a generation batch needs <= {train_prompts}",
                )
            )
    return problems, total_prompts
