"""Dataset checks before any download or model load (case C08, tests/cases.md).

For a local file (JSONL, JSON, CSV or parquet): it exists and is readable; it parses (the failing line is
named); each row has a `messages` conversation (or a query/prompt column ms-swift converts); every column a
selected reward function reads is present in every row; each column keeps one JSON type across rows (pyarrow
refuses mixed types deep inside `datasets`); and there are enough prompts for one generation batch (with
fewer, ms-swift's dataloader is empty and accelerate crashes with `UnboundLocalError: current_batch`).

A hub dataset (`org/name[:subset][#rows]`) is checked for its form; with OFFLINE=true its local cache
must exist. ms-swift's `#N` suffix samples N rows.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from entrypoint.errors import LOCAL, Problem
from entrypoint.facts.datasets import (
    HUB_ID_RE,
    MAX_ROW_PROBLEMS,
    MESSAGE_COLUMNS,
    READ_SUFFIXES,
    ROLES_OF,
    DatasetSpec,
    as_swift_reads,
    dataset_key,
    is_local,
    message_column,
    parse_spec,
    standard_messages,
    type_name,
)
from entrypoint.plan import memory
from entrypoint.recipe import swift_schema

if TYPE_CHECKING:
    from entrypoint.facts.facts import Facts

ROLES = {"system", "user", "assistant", "tool", "tool_call", "tool_response"}
# Columns ms-swift 3.6.4 reads a row's prompt from: the conversation columns and those its preprocessors
# rename to `query` (swift_schema.preprocessors(), read from v3.6.4:swift/llm/dataset/preprocessor/core.py).
PROMPT_COLUMNS = tuple(
    dict.fromkeys(
        [
            *MESSAGE_COLUMNS,
            *(k for k, v in swift_schema.preprocessors()["response"]["columns"].items() if v == "query"),
        ]
    )
)
# Columns users commonly have instead of the one a reward reads (an SFT set's answer: response, output).
SYNONYMS = {
    "solution": [
        "answer",
        "answers",
        "label",
        "ground_truth",
        "reference",
        "target",
        "gold",
        "response",
        "output",
    ]
}


def check_messages(path: Path, rows: Iterable[tuple[int, dict]]) -> list[Problem]:
    """Each row's prompt as ms-swift reads it (datasets.MESSAGE_COLUMNS, standard_messages): the first
    MAX_ROW_PROBLEMS rows at fault, then how many more there are."""
    problems: list[Problem] = []
    more = 0
    for number, row in rows:
        if len(problems) >= MAX_ROW_PROBLEMS:
            more += _row_problem(path, number, row) is not None
            continue
        found = _row_problem(path, number, row)
        if found is not None:
            problems.append(found)
    if more:
        problems.append(
            Problem(
                f"dataset {path}", f"{more} more row(s) have faults like these", "fix them as the ones above"
            )
        )
    return problems


def _row_problem(path: Path, number: int, row: dict) -> Problem | None:
    """The first fault of one row's prompt, or None."""
    where = f"dataset {path} line {number}"
    column = message_column(row)
    if column is None:
        # a prompt column with or without an answer column (response, output): ms-swift's preprocessor makes a
        # user turn of it, and an answer turn that the rollout drops before generating (as below)
        if any(c in row for c in PROMPT_COLUMNS):
            return None
        return Problem(
            where,
            f"has no prompt: no `messages` column (columns: {', '.join(sorted(row)) or 'none'})",
            'add "messages": [{"role": "user", "content": "..."}]',
        )
    messages = standard_messages(row[column])
    if isinstance(row[column], str) and messages is None:
        return Problem(
            where,
            f"`{column}` is text that ms-swift cannot read as a list (it reads text with ast.literal_eval)",
            'write it as a list literal, e.g. [{"role": "user", "content": "..."}]',
        )
    if not isinstance(messages, list) or not messages:
        return Problem(
            where, f"`{column}` must be a non-empty list", 'e.g. [{"role": "user", "content": "..."}]'
        )
    if not all(
        isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in messages
    ):
        return Problem(
            where,
            "each message needs a role (system/user/assistant/tool) and a string content",
            'e.g. {"role": "user", "content": "..."}',
        )
    if not any(m["role"] == "user" for m in messages):
        return Problem(
            where,
            f"`{column}` has no user turn: nothing to prompt with",
            "add the question as a user message",
        )
    # A final assistant turn is valid: ms-swift 3.6.4 drops it before generating (Template.encode when not
    # training, v3.6.4:swift/llm/template/base.py:482; GRPOTrainer, grpo_trainer.py:684), and rewards read
    # their reference from their own column (`solution`), which check_columns asks for.
    return None


def check_columns(
    path: Path,
    rows: list[tuple[int, dict]],
    needed: dict[str, list[str]],
    mapping: dict[str, str] | None = None,
) -> list[Problem]:
    """`needed`: column -> reward functions that read it, checked against the columns ms-swift 3.6.4 passes
    to the rewards (facts.datasets.as_swift_reads: its preprocessors turn `query`, `answer`, `response` and
    their kin into `messages`, and keep the others); `mapping`: the recipe's COLUMNS."""
    problems: list[Problem] = []
    present = list(dict.fromkeys(c for _, row in rows for c in row)) if rows else []
    read = as_swift_reads(present, mapping)
    received = read.received()
    for column, readers in needed.items():
        who = ", ".join(readers)
        source = received.get(column)
        if source is None and column in read.standard:  # the column is there, but ms-swift consumes it
            problems.append(
                Problem(
                    f"dataset {path}",
                    f"reward {who} reads the `{column}` column, but ms-swift 3.6.4 "
                    f"makes it the {ROLES_OF.get(read.standard[column], read.standard[column])} of "
                    f"`messages` (its {read.preprocessor} preprocessor), so the reward never receives "
                    f"it [source: {swift_schema.PREPROCESSOR_SOURCE}]",
                    f"rename the `{column}` column to `solution` (ms-swift keeps `solution` for the "
                    f"rewards) and read `solution` in {who}; or keep `{column}` and give the prompt "
                    "as `messages` (ms-swift then passes the other columns as they are)",
                )
            )
            continue
        if source is None and read.names.get(column) not in (None, column):
            problems.append(
                Problem(
                    f"dataset {path}",
                    f"reward {who} reads the `{column}` column, which ms-swift 3.6.4 "
                    f"passes as `{read.names[column]}` (its column mapping renames it)",
                    f"read `{read.names[column]}` in {who}, or rename the column in the file",
                )
            )
            continue
        missing = [number for number, row in rows if (source or column) not in row]
        if not missing:
            continue
        if len(missing) == len(rows):
            candidates = [c for c in SYNONYMS.get(column, []) if c in present] or difflib.get_close_matches(
                column, sorted(present), n=1
            )
            candidates = [c for c in candidates if c not in PROMPT_COLUMNS]  # never "rename the prompt"
            fix = (
                f"rename the `{candidates[0]}` column to `{column}`"
                if candidates
                else f"add a `{column}` column to every row"
            )
            problems.append(
                Problem(
                    f"dataset {path}",
                    f"reward {who} reads the `{column}` column, which no row has (columns: "
                    f"{', '.join(sorted(present))})",
                    fix,
                )
            )
        else:
            problems.append(
                Problem(
                    f"dataset {path} line {missing[0]}",
                    f"has no `{source or column}` column, which reward {who} reads ({len(missing)} rows lack "
                    "it)",
                    f"add `{source or column}` to those rows",
                )
            )
    for column, readers in needed.items():
        source = received.get(column, column)
        empty = [
            n for n, row in rows if source in row and (row[source] is None or str(row[source]).strip() == "")
        ]
        if empty:  # an empty reference scores every completion 0: no reward variance, nothing learned
            problems.append(
                Problem(
                    f"dataset {path} line {empty[0]}",
                    f"`{source}` is empty ({len(empty)} of {len(rows)} rows read), so reward "
                    f"{', '.join(readers)} has nothing to compare with and scores every completion the same",
                    f"fill `{source}` with the reference answer, or drop those rows",
                )
            )
    return problems


class FirstSeen(NamedTuple):
    """A column's JSON type where it first has a value, and that line."""

    kind: str
    line: int


def check_types(path: Path, rows: list[tuple[int, dict]]) -> list[Problem]:
    """Each column keeps one JSON type on every row (nulls aside): the first row that changes it."""
    first: dict[str, FirstSeen] = {}
    problems: list[Problem] = []
    reported: set[str] = set()
    for number, row in rows:
        for column, value in row.items():
            kind = type_name(value)
            if kind == "null":
                continue
            if column not in first:
                first[column] = FirstSeen(kind, number)
            elif first[column].kind != kind and column not in reported:
                reported.add(column)
                problems.append(
                    Problem(
                        f"dataset {path} line {number}",
                        f"column `{column}` is a {kind} here but a {first[column].kind} on line "
                        f"{first[column].line} (a dataset column must keep one type)",
                        f"make `{column}` the same JSON type on every row",
                    )
                )
    return problems


class DatasetCheck(NamedTuple):
    """What `check` found: the problems, and the prompts in the local files (None: unknown, a hub dataset)."""

    problems: list[Problem]
    prompts: int | None


def check(
    specs: Sequence[str],
    needed: dict[str, list[str]],
    prompts_needed: int,
    holdout: float,
    offline: bool,
    use_hf: bool,
    facts: Facts,
    key: str = "DATASET",
    batch_fix: str = "lower PER_DEVICE_TRAIN_BATCH_SIZE / GRADIENT_ACCUMULATION_STEPS",
    max_length: int | None = None,
    mapping: dict[str, str] | None = None,
) -> DatasetCheck:
    """Check every dataset (as host.gather read it into `facts`) of recipe key `key` (DATASET or
    VAL_DATASET): its problems and the training prompts in local files (None if unknown). A file
    not there yet, or not readable, is of kind LOCAL. `batch_fix`: the knobs that shrink a generation
    batch in this recipe (rewards_and_data.batch_fix)."""
    problems: list[Problem] = []
    total_prompts: int | None = 0
    for text in specs:
        spec = parse_spec(text)
        found, prompts = _check_one(
            text, spec, needed, offline, use_hf, facts, key, max_length=max_length, mapping=mapping
        )
        problems += found
        total_prompts = None if prompts is None or total_prompts is None else total_prompts + prompts
    # a dataset with no rows at all has its own problem: "add prompts" is the whole of the fix there
    if total_prompts and prompts_needed:
        train_prompts = int(total_prompts * (1 - holdout))
        if train_prompts < prompts_needed:
            problems.append(
                Problem(
                    "DATASET",
                    f"{train_prompts} training prompts, fewer than one generation batch needs "
                    f"({prompts_needed}); ms-swift's dataloader would be empty and crash inside accelerate",
                    f"add prompts, or {batch_fix} so a generation batch needs <= {train_prompts} prompt(s)",
                )
            )
    return DatasetCheck(problems, total_prompts)


def _check_one(
    text: str,
    spec: DatasetSpec,
    needed: dict[str, list[str]],
    offline: bool,
    use_hf: bool,
    facts: Facts,
    key: str = "DATASET",
    batch_fix: str = "lower PER_DEVICE_TRAIN_BATCH_SIZE / GRADIENT_ACCUMULATION_STEPS",
    max_length: int | None = None,
    mapping: dict[str, str] | None = None,
) -> tuple[list[Problem], int | None]:
    """Problems of one dataset of recipe key `key` and its prompt count (None: unknown)."""
    where = f"{key} {text}"
    if not is_local(spec.path):
        if not HUB_ID_RE.match(spec.path):
            return [
                Problem(
                    where,
                    "is neither an existing file nor a hub id (org/name[:subset][#rows])",
                    "mount the file (./data -> /data) and give its container path",
                )
            ], None
        if offline and facts.hub_cached(spec.path, "datasets", use_hf) is None:
            return [
                Problem(
                    where,
                    "this run is offline and the dataset is not in the local hub cache; the hub's "
                    f"library would look in {facts.hub_where(spec.path, 'datasets', use_hf)}",
                    "download it once with network access (same cache volume), or use a local file",
                )
            ], None
        return [], None
    path = Path(spec.path).expanduser()
    info = facts.path(path)
    if not info.reachable:
        return [
            Problem(
                where,
                f"cannot be reached by uid {facts.uid} (a parent directory is not readable)",
                "chmod a+rx the directories on the host (./data is mounted read-only at /data)",
            )
        ], None
    if info.exists and not info.is_file:  # a directory, a device: nothing to look for elsewhere
        return [Problem(where, info.unusable_file(), "give the path of a JSONL (or JSON, CSV) file")], None
    if not info.is_file:
        if facts.in_container:
            hint = " (compose mounts ./data at /data, read-only)" if str(path).startswith("/data") else ""
            what, fix = (
                f"file not found inside the container{hint}",
                f"put the file there, or set {key} to its container path",
            )
        else:  # on the host (plan/validate from a clone): the recipe's path is the container's
            sample = " (tcm-4x4090's sample: DATASET=examples/tcm/sample.jsonl)" if "tcm" in path.name else ""
            what, fix = (
                "file not found on this machine",
                f"set {key} to a file here{sample}, or run inside the image",
            )
        return [Problem(where, what, fix, kind=LOCAL)], None
    if not info.readable:
        return [
            Problem(
                where, f"is not readable by uid {facts.uid}", "chmod a+r the file on the host", kind=LOCAL
            )
        ], None
    if path.suffix not in READ_SUFFIXES:
        return [], None  # .txt or another `datasets` builder: ms-swift reads it; rows not checked here
    data = facts.datasets[dataset_key(path)]
    if data.decode_error:
        return [Problem(where, f"is not UTF-8 text ({data.decode_error})", "save the file as UTF-8")], None
    problems = list(data.problems)
    rows = list(data.rows)
    if not rows:
        problems.append(Problem(where, "has no rows", "add rows"))
    problems += (
        check_messages(path, rows) + check_columns(path, rows, needed, mapping) + check_types(path, rows)
    )
    problems += check_lengths(path, rows, max_length)
    return problems, min(data.count, spec.rows) if spec.rows else data.count


def prompt_token_bounds(row: dict) -> tuple[int, int]:
    """(at least, at most) tokens of a row's prompt, without a tokenizer: at least one per 6 ASCII characters
    and per 2 other characters (a CJK character is 1-2 tokens in Qwen's and Llama's vocabularies); at most
    memory.estimate_prompt_tokens (3.5 ASCII characters per token, 1 per other, 8 per message)."""
    messages = row.get(message_column(row) or "") or [
        {"content": str(next((row[c] for c in PROMPT_COLUMNS if c in row), ""))}
    ]
    text = "".join(
        str(m.get("content", "")) if isinstance(m, dict) else str(m)
        for m in (messages if isinstance(messages, list) else [messages])
    )
    ascii_chars = sum(1 for ch in text if ord(ch) < 128)
    return ascii_chars // 6 + (len(text) - ascii_chars) // 2, memory.estimate_prompt_tokens([row])


def check_lengths(path: Path, rows: list[tuple[int, dict]], max_length: int | None) -> list[Problem]:
    """Prompts longer than MAX_LENGTH: ms-swift 3.6.4 drops a row whose encoding exceeds max_length (its
    default truncation_strategy 'delete', v3.6.4:swift/llm/argument/base_args/template_args.py:63), once the
    model has loaded; with every prompt too long nothing is left to train on (a run of ~5,000-token prompts
    at MAX_LENGTH=512 grew to 22 GB of RAM until the kernel ended it). Refused when every row read is
    surely too long, a warning when some may be."""
    if not max_length or not rows:
        return []
    bounds = [(number, *prompt_token_bounds(row)) for number, row in rows if isinstance(row, dict)]
    maybe = [(number, high) for number, low, high in bounds if high > max_length]
    surely = [low for _, low, _ in bounds if low > max_length]
    where, fix = (
        f"dataset {path}",
        ("raise MAX_LENGTH above the longest prompt plus MAX_COMPLETION_LENGTH, or shorten the prompts"),
    )
    if bounds and len(surely) == len(bounds):
        return [
            Problem(
                where,
                f"every row read has a prompt longer than MAX_LENGTH={max_length} (at least "
                f"{min(surely)} tokens): ms-swift drops such rows after loading the model, leaving nothing "
                "to train on",
                fix,
            )
        ]
    if maybe:
        number, high = max(maybe, key=lambda m: m[1])
        return [
            Problem(
                where,
                f"{len(maybe)} of {len(bounds)} rows read may have a prompt longer than "
                f"MAX_LENGTH={max_length} (up to about {high} tokens, line {number}): ms-swift drops them",
                fix,
                fatal=False,
            )
        ]
    return []
