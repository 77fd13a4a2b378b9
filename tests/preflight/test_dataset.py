"""The dataset against the rewards that read it (entrypoint/preflight/dataset.py; case C08 of
tests/cases.md): columns, rows that are not JSON or not a conversation, encodings, csv and parquet files,
hub ids, too few prompts for a generation batch, prompts longer than MAX_LENGTH, VAL_DATASET, all read as
ms-swift 3.6.4 reads and renames them. Through `train` and `validate` with a fake `swift` that records
every start (tests/fakes/swift): a refusal exits 2 with the fix named and the fake never ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import INVENTORIES, clean_env, refused_dataset, run_cli

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree


def write_dataset(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


# C08: dataset does not fit the reward functions ------------------------------------------------------------

C08_ROW = '{"messages":[{"role":"user","content":"What is 2+2?"}],"answer":"4"}'


def test_c08_accuracy_needs_solution_and_the_answer_column_is_named(tmp_path):
    data = write_dataset(tmp_path, [C08_ROW] * 64)
    err = refused_dataset(tmp_path, data, "accuracy format")
    assert "reward accuracy reads the `solution` column" in err
    assert "rename the `answer` column to `solution`" in err


def test_c08_line_that_is_not_json_is_named(tmp_path):
    good = '{"messages":[{"role":"user","content":"q"}],"solution":"4"}'
    data = write_dataset(tmp_path, [good] * 10 + ['{"messages": [ oops'] + [good] * 10)
    err = refused_dataset(tmp_path, data, "accuracy")
    assert f"dataset {data} line 11: is not JSON" in err


def test_c08_column_with_two_types_is_refused(tmp_path):
    rows = [
        json.dumps(
            {
                "messages": [{"role": "user", "content": "q"}],
                "solution": "4",
                "meta": {"a": 1} if i % 2 else [1],
            }
        )
        for i in range(20)
    ]
    err = refused_dataset(tmp_path, write_dataset(tmp_path, rows), "accuracy")
    assert "column `meta` is a object here but a list on line 1" in err


def test_c08_fewer_prompts_than_one_generation_batch_is_refused(tmp_path):
    rows = [
        json.dumps({"messages": [{"role": "user", "content": f"q{i}"}], "solution": "4"}) for i in range(3)
    ]
    # smoke: 8 completions / NUM_GENERATIONS 4 = 2 prompts per generation; ask for 16 x 2 / 4 = 8
    err = refused_dataset(
        tmp_path,
        write_dataset(tmp_path, rows),
        "accuracy",
        "PER_DEVICE_TRAIN_BATCH_SIZE=16",
        "GRADIENT_ACCUMULATION_STEPS=2",
    )
    assert "3 training prompts, fewer than one generation batch needs (8)" in err


def test_c08_plugin_reward_columns_come_from_its_signature(tmp_path):
    rows = [json.dumps({"messages": [{"role": "user", "content": "q"}], "target": 5}) for _ in range(20)]
    err = refused_dataset(tmp_path, write_dataset(tmp_path, rows), "countdown")
    assert "reads the `nums` column" in err


def test_c08_missing_dataset_file_mentions_the_data_mount(tmp_path):
    inside = refused_dataset(
        tmp_path, "/data/missing.jsonl", "format", extra_env={"GRPO_RIG_VERSION": "test"}
    )
    assert "file not found inside the container" in inside and "./data at /data" in inside
    here = refused_dataset(tmp_path, "/data/tcm_train.jsonl", "format")  # on the host, as a clone's user is
    assert "file not found on this machine" in here and "DATASET=examples/tcm/sample.jsonl" in here
    assert "inside the container" not in here


def test_c08_messages_without_user_turn(tmp_path):
    rows = [json.dumps({"messages": [{"role": "system", "content": "s"}], "solution": "1"})] * 20
    err = refused_dataset(tmp_path, write_dataset(tmp_path, rows), "accuracy")
    assert "has no user turn" in err


def _validate_dataset(tmp_path, data, rewards):
    return run_cli(
        "validate",
        "recipe=smoke",
        "DATASET_GENERATOR=",
        f"DATASET={data}",
        f"REWARD_FUNCS={rewards}",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )


def test_c08_csv_and_parquet_datasets_are_checked_as_json_lines_are(tmp_path):
    """ms-swift reads a local .csv or .parquet with the `datasets` builder of that name (loader.py:207-212):
    the same faults (a reward's column missing, too few prompts, a row pandas cannot split) are refused,
    and a good file passes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    csv_answer = tmp_path / "answer.csv"
    csv_answer.write_text("query,answer\n" + "What is 2+2?,4\n" * 50)
    err = refused_dataset(tmp_path, csv_answer, "accuracy format")
    assert "reads the `solution` column" in err and "rename the `answer` column to `solution`" in err
    one = tmp_path / "one.csv"
    one.write_text("query,solution\nWhat is 2+2?,4\n")
    assert "1 training prompts, fewer than one generation batch needs (2)" in refused_dataset(
        tmp_path, one, "accuracy"
    )
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("query,solution\n" + "q,4\n" * 5 + "What is 2,000 + 2?,2002\n" + "q,4\n" * 5)
    assert f"dataset {ragged} line 7: has 3 fields where the header has 2" in refused_dataset(
        tmp_path, ragged, "accuracy"
    )
    good = tmp_path / "good.csv"
    good.write_text('query,solution\n"What is 2,000 + 2?",2002\n' + "What is 2+2?,4\n" * 20)
    assert _validate_dataset(tmp_path, good, "accuracy format").returncode == 0

    table = {"messages": [[{"role": "user", "content": "What is 2+2?"}]] * 30, "answer": ["4"] * 30}
    pq.write_table(pa.table(table), tmp_path / "answer.parquet")
    assert "rename the `answer` column to `solution`" in refused_dataset(
        tmp_path, tmp_path / "answer.parquet", "accuracy"
    )
    pq.write_table(pa.table({**table, "solution": table.pop("answer")}), tmp_path / "good.parquet")
    assert _validate_dataset(tmp_path, tmp_path / "good.parquet", "accuracy").returncode == 0
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    assert "is not a readable parquet file" in refused_dataset(
        tmp_path, tmp_path / "broken.parquet", "accuracy"
    )


def test_c08_messages_are_read_as_ms_swift_reads_them(tmp_path):
    """ms-swift's MessagesPreprocessor reads text with ast.literal_eval (a CSV's `messages` column) and takes
    `from`/`value` and human/gpt for role/content and user/assistant: such rows pass; text it cannot read, or
    a conversation without a user turn however spelled, is refused."""
    literal = "[{'role': 'user', 'content': 'What is 2+2?'}]"
    as_text = write_dataset(tmp_path, [json.dumps({"messages": literal, "solution": "4"})] * 20)
    assert _validate_dataset(tmp_path, as_text, "accuracy").returncode == 0
    csv_file = tmp_path / "messages.csv"
    csv_file.write_text("messages,solution\n" + f'"{literal}",4\n' * 20)
    assert _validate_dataset(tmp_path, csv_file, "accuracy").returncode == 0
    sharegpt = [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "What is 2+2?"}]
    assert (
        _validate_dataset(
            tmp_path,
            write_dataset(tmp_path, [json.dumps({"messages": sharegpt, "solution": "4"})] * 20),
            "accuracy",
        ).returncode
        == 0
    )
    no_user = [{"from": "system", "value": "s"}, {"from": "gpt", "value": "4"}]
    assert "has no user turn" in refused_dataset(
        tmp_path,
        write_dataset(tmp_path, [json.dumps({"messages": no_user, "solution": "4"})] * 20),
        "accuracy",
    )
    unreadable = write_dataset(tmp_path, [json.dumps({"messages": "[{'role': 'user'", "solution": "4"})] * 20)
    assert "`messages` is text that ms-swift cannot read as a list" in refused_dataset(
        tmp_path, unreadable, "accuracy"
    )


def test_c08_a_conversation_column_is_a_prompt_and_faulty_rows_past_five_are_counted(tmp_path):
    """New-user trial: ms-swift renames `conversation` and `conversations` to `messages` (core.py:434-436);
    `conversation` was refused as "no prompt". And 32 faulty rows said "5 errors" with no word of the rest."""
    turn = [{"role": "user", "content": "What is 2+2?"}]
    rows = [json.dumps({"conversation": turn, "solution": "4"})] * 32
    assert _validate_dataset(tmp_path, write_dataset(tmp_path, rows), "accuracy").returncode == 0
    rows = [json.dumps({"conversation": [{"role": "system", "content": "s"}], "solution": "4"})] * 32
    err = refused_dataset(tmp_path, write_dataset(tmp_path, rows), "accuracy")
    assert (
        err.count("`conversation` has no user turn") == 5 and "27 more row(s) have faults like these" in err
    )


def test_hub_dataset_is_checked_for_form_and_offline_cache(tmp_path):
    err = refused_dataset(tmp_path, "not a dataset", "format")
    assert "neither an existing file nor a hub id" in err
    err = refused_dataset(
        tmp_path,
        "zouxuhong/Countdown-Tasks-3to4#100",
        "format",
        "OFFLINE=true",
        extra_env={"MODELSCOPE_CACHE": str(tmp_path / "ms")},
    )
    assert "this run is offline and the dataset is not in the local hub cache" in err
    assert str(tmp_path / "ms" / "datasets" / "zouxuhong" / "Countdown-Tasks-3to4") in err


def test_messages_that_are_not_a_conversation_are_problems_not_tracebacks(tmp_path):
    rows = [json.dumps({"messages": "What is 2+2?", "solution": "4"})] * 20 + ['["an", "array"]']
    err = refused_dataset(tmp_path, write_dataset(tmp_path, rows), "accuracy")
    assert "`messages` is text that ms-swift cannot read as a list" in err and "Traceback" not in err
    rows = [json.dumps({"messages": "42", "solution": "4"})] * 20  # text ms-swift reads, but not as a list
    err = refused_dataset(tmp_path, write_dataset(tmp_path, rows), "accuracy")
    assert "`messages` must be a non-empty list" in err and "Traceback" not in err


def test_latin1_dataset_is_a_problem_not_a_traceback(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(
        ('{"messages": [{"role": "user", "content": "caf\xe9"}], "solution": "1"}\n' * 20).encode("latin-1")
    )
    err = refused_dataset(tmp_path, path, "accuracy")
    assert "save the file as UTF-8" in err and "Traceback" not in err


def test_byte_order_mark_and_json_array_in_a_jsonl_file_are_accepted_as_ms_swift_reads_them(tmp_path):
    """ms-swift 3.6.4 loads .jsonl with datasets' json builder, which reads a file behind a UTF-8 byte-order
    mark and one JSON array of objects: refusing them was a false refusal (case C08's variants,
    tests/cases.md)."""
    import datasets

    row = '{"messages": [{"role": "user", "content": "q"}], "solution": "1"}'
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + (row + "\n").encode() * 20)
    array = tmp_path / "array.jsonl"
    array.write_text("[\n" + ",\n".join([row] * 20) + "\n]\n")
    for path in (bom, array):
        assert len(datasets.load_dataset("json", data_files=str(path), split="train")) == 20
        proc = run_cli(
            "validate",
            "recipe=smoke",
            "DATASET_GENERATOR=",
            f"DATASET={path}",
            "REWARD_FUNCS=accuracy",
            f"OUTPUT_DIR={tmp_path}/out",
            env=clean_env(),
        )
        assert proc.returncode == 0, proc.stderr


def test_a_broken_line_names_its_line_and_column(tmp_path):
    row = '{"messages": [{"role": "user", "content": "q"}], "solution": "1"}'
    path = tmp_path / "broken.jsonl"
    path.write_text((row + "\n") * 10 + row[:-1] + "\n" + (row + "\n") * 10)
    err = refused_dataset(tmp_path, path, "accuracy")
    assert f"line 11: is not JSON (Expecting ',' delimiter; column {len(row)})" in err


# Datasets and plugins that validated but could not train ----------------------------------------------------

USER = {"role": "user", "content": "What is 6 x 7?"}


def test_empty_solution_values_are_refused(tmp_path):
    rows = [json.dumps({"messages": [USER], "solution": "" if i % 2 else "42"}) for i in range(20)]
    err = refused_dataset(tmp_path, write_dataset(tmp_path, rows), "accuracy")
    assert "`solution` is empty (10 of 20 rows read)" in err and "fill `solution`" in err


def test_rows_ending_with_an_assistant_turn_are_valid_as_ms_swift_drops_it(tmp_path):
    """ms-swift 3.6.4 removes a final assistant turn before generating (Template.encode when not training,
    swift/llm/template/base.py:482): a local copy of a set like AI-MO/NuminaMath-TIR (its answer as the last
    message, the reference in `solution`) validates as its hub id does."""
    rows = [json.dumps({"messages": [USER, {"role": "assistant", "content": "42"}], "solution": "42"})] * 20
    proc = run_cli(
        "validate",
        "recipe=smoke",
        "DATASET_GENERATOR=",
        f"DATASET={write_dataset(tmp_path, rows)}",
        "REWARD_FUNCS=accuracy",
        env=clean_env(),
    )
    assert proc.returncode == 0 and "assistant turn" not in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )


@pytest.mark.parametrize("prompt", ["problem", "input", "query", "instruction"])
def test_a_prompt_in_any_column_ms_swift_reads_it_from_is_valid(tmp_path, prompt):
    """ms-swift's ResponsePreprocessor reads the prompt from query, prompt, input, instruction, question or
    problem (swift/llm/dataset/preprocessor/core.py:347): rows with one of them and `solution` train."""
    rows = [json.dumps({prompt: "What is 6 x 7?", "solution": "42"})] * 20
    proc = run_cli(
        "validate",
        "recipe=smoke",
        "DATASET_GENERATOR=",
        f"DATASET={write_dataset(tmp_path, rows)}",
        "REWARD_FUNCS=accuracy",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_alpaca_rows_for_accuracy_are_asked_for_a_solution_from_output(tmp_path):
    """instruction/input/output: the prompt is read (ms-swift's preprocessor), but accuracy compares with
    `solution`, which an SFT set keeps in `output`; never "rename `instruction` to `solution`"."""
    rows = [json.dumps({"instruction": "Add", "input": "6 + 7", "output": "13"})] * 20
    err = refused_dataset(tmp_path, write_dataset(tmp_path, rows), "accuracy")
    assert "`output`" in err and "solution" in err, err
    assert "rename the `instruction` column" not in err


def test_val_dataset_is_checked_as_the_training_data_is(tmp_path):
    """Cases re-run: VAL_DATASET was never read before training, so a missing file, a line that is not
    JSON or a column the rewards read surfaced minutes later inside ms-swift's evaluation."""
    from entrypoint.rewards import tasks

    good = tasks.write_jsonl(tasks.TASKS["countdown"], tmp_path / "val.jsonl", 4, seed=7)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(good.read_text().splitlines()[0] + "\n{not json\n")
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_text(good.read_text().replace('"target"', '"goal"'))

    def validate(value: str):
        return run_cli(
            "validate",
            "recipe=smoke",
            f"VAL_DATASET={value}",
            "PER_DEVICE_EVAL_BATCH_SIZE=4",
            f"OUTPUT_DIR={tmp_path}",
            env=clean_env(),
        )

    assert validate(str(good)).returncode == 0
    missing = validate(str(tmp_path / "nope.jsonl"))
    assert (
        missing.returncode == 2 and f"VAL_DATASET {tmp_path / 'nope.jsonl'}: file not found" in missing.stderr
    )
    bad = validate(str(broken))
    assert bad.returncode == 2 and "broken.jsonl line 2: is not JSON" in bad.stderr, bad.stderr
    columns = validate(str(renamed))
    assert columns.returncode == 2 and "reads the `target` column" in columns.stderr, columns.stderr


@pytest.mark.parametrize(
    "pairs, knob",
    [
        (
            ("recipe=countdown-1x4090",),
            "lower GENERATION_BATCH_SIZE (now 32 = 4 prompts x NUM_GENERATIONS 8)",
        ),
        (
            (
                "recipe=countdown-1x4090",
                "GENERATION_BATCH_SIZE=",
                "STEPS_PER_GENERATION=4",
                "PER_DEVICE_TRAIN_BATCH_SIZE=8",
            ),
            "lower STEPS_PER_GENERATION or PER_DEVICE_TRAIN_BATCH_SIZE",
        ),
    ],
)
def test_too_few_prompts_names_the_knob_that_sets_this_recipes_generation_batch(tmp_path, pairs, knob):
    """Cases re-run: with GENERATION_BATCH_SIZE set, the fix named the micro-batch and accumulation, which
    do not change it."""
    from entrypoint.rewards import tasks

    data = tasks.write_jsonl(tasks.TASKS["countdown"], tmp_path / "tiny.jsonl", 2, seed=1)
    proc = run_cli(
        "validate",
        *pairs,
        f"DATASET={data}",
        "DATASET_GENERATOR=",
        f"OUTPUT_DIR={tmp_path}",
        f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}",
        env=clean_env(),
    )
    assert proc.returncode == 2 and "fewer than one generation batch needs" in proc.stderr, proc.stderr
    assert f"fix: add prompts, or {knob}" in proc.stderr, proc.stderr


@pytest.mark.cli
def test_an_empty_dataset_is_one_error_not_a_batch_fix_no_one_can_follow(tmp_path):
    """The cases re-run: a 0-byte dataset got 'has no rows' and then 'a generation batch needs <= 0
    prompt(s)'."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    proc = run_cli(
        "validate",
        "recipe=countdown-1x4090",
        f"DATASET={empty}",
        "DATASET_GENERATOR=",
        f"OUTPUT_DIR={tmp_path}",
        f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}",
        env=clean_env(),
    )
    assert proc.returncode == 2 and "has no rows" in proc.stderr, proc.stderr
    assert "fewer than one generation batch needs" not in proc.stderr, proc.stderr


def test_prompts_longer_than_max_length_are_refused_when_every_row_is_and_warned_when_some_may_be(tmp_path):
    """ms-swift drops a row longer than MAX_LENGTH after the model loaded (truncation_strategy 'delete'): 8
    prompts of ~4,000 tokens at MAX_LENGTH=512 once validated and then grew to 22 GB of RAM."""
    long_row = json.dumps({"messages": [{"role": "user", "content": "word " * 4000}], "solution": "1"})
    short_row = json.dumps({"messages": [USER], "solution": "42"})
    err = refused_dataset(
        tmp_path, write_dataset(tmp_path, [long_row] * 8), "accuracy", "MAX_LENGTH=512", "NUM_GENERATIONS=2"
    )
    assert "every row read has a prompt longer than MAX_LENGTH=512 (at least 3333 tokens)" in err
    assert "raise MAX_LENGTH" in err
    (tmp_path / "mixed").mkdir()
    (tmp_path / "fits").mkdir()
    mixed = write_dataset(tmp_path / "mixed", [short_row] * 19 + [long_row])
    proc = run_cli(
        "validate",
        "recipe=smoke",
        "DATASET_GENERATOR=",
        f"DATASET={mixed}",
        "REWARD_FUNCS=accuracy",
        "MAX_LENGTH=512",
        env=clean_env(),
    )
    said = proc.stdout + proc.stderr
    assert (
        proc.returncode == 0 and "1 of 20 rows read may have a prompt longer than MAX_LENGTH=512" in said
    ), said
    fits = write_dataset(tmp_path / "fits", [short_row] * 20)
    proc = run_cli(
        "validate",
        "recipe=smoke",
        "DATASET_GENERATOR=",
        f"DATASET={fits}",
        "REWARD_FUNCS=accuracy",
        "MAX_LENGTH=512",
        env=clean_env(),
    )
    assert "MAX_LENGTH" not in proc.stdout + proc.stderr


# The dataset as ms-swift 3.6.4 passes it to the rewards --------------------------------------------------


def test_a_reward_reading_a_column_ms_swift_turns_into_messages_is_refused_naming_the_rename(tmp_path):
    """Rows {"question", "answer"}: ms-swift's ResponsePreprocessor makes `answer` the assistant turn of
    `messages`; a reward reading `answer` never receives it and fails after the first rollout."""
    plugin = tmp_path / "my_answer_reward.py"
    plugin.write_text(
        "from swift.plugin import ORM, orms\nclass AnswerMatch(ORM):\n"
        "    def __call__(self, completions, answer, **kwargs):\n"
        "        return [float(a in c) for c, a in zip(completions, answer)]\n"
        "orms['answer_match'] = AnswerMatch\n"
    )
    rows = [json.dumps({"question": f"What is {i}+{i}?", "answer": str(2 * i)}) for i in range(32)]
    err = refused_dataset(
        tmp_path, write_dataset(tmp_path, rows), "answer_match", f"EXTERNAL_PLUGINS={plugin}"
    )
    assert (
        "reward answer_match reads the `answer` column, but ms-swift 3.6.4 makes it the assistant turn" in err
    )
    assert "rename the `answer` column to `solution`" in err and "read `solution` in answer_match" in err
    # the probe calls the reward with the columns ms-swift passes: it is told the same
    assert "missing 1 required positional argument: 'answer'" in err


@pytest.mark.parametrize(
    ("row", "columns", "solution_reader", "answer_reader"),
    [
        ({"question": "q", "answer": "4"}, None, "which no row has", "makes it the assistant turn"),
        (
            {"question": "q", "answer": "4"},
            '{"answer": "solution"}',
            None,
            "passes as `solution`",
        ),  # qlora.sh
        ({"messages": [{"role": "user", "content": "q"}], "answer": "4"}, None, "which no row has", None),
        ({"question": "q", "solution": "4"}, None, None, "which no row has"),  # ms-swift keeps `solution`
        ({"question": "q", "answer": "4", "solution": "4"}, None, None, None),  # two answers: neither renamed
    ],
)
def test_the_columns_a_reward_receives_follow_ms_swift_s_mapping(
    row, columns, solution_reader, answer_reader
):
    from entrypoint.facts.datasets import user_columns
    from entrypoint.preflight import dataset

    rows = [(n, dict(row)) for n in range(1, 5)]
    for column, expected in (("solution", solution_reader), ("answer", answer_reader)):
        found = dataset.check_columns(Path("d.jsonl"), rows, {column: ["r"]}, user_columns(columns))
        assert [p.message for p in found] == [] if expected is None else expected in found[0].message, (
            column,
            found,
        )
