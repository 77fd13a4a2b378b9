"""Dataset specs and files as ms-swift reads them: `org/name[:subset][#rows]` hub ids, local files, and
the vocabulary of their rows (read by world/dataset_files.py; checked by preflight/dataset.py)."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from entrypoint.recipe import load as recipe_mod

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
    return (
        path.startswith(("/", "./", "../", "~")) or path.endswith(LOCAL_SUFFIXES) or recipe_mod.exists(path)
    )


def type_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "list", dict: "object"}.get(type(value), type(value).__name__)


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
