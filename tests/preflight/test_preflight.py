"""Preflight: bad input refused in seconds, before any model load or GPU process, with the fix named.

Each test runs `python -m entrypoint train ...` with a fake `swift` that records every start
(tests/fakes/swift) and asserts exit status 2, the message, and that the fake never ran.
Cases C02, C03, C07, C08 of tests/cases.md (C09: tests/plan/test_memory.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from entrypoint.facts.facts import ModelConfig
from entrypoint.recipe import keys
from tests.conftest import (
    FAKES,
    INVENTORIES,
    ROOT,
    build_plan,
    clean_env,
    flag,
    inventory_file,
    refused,
    refused_dataset,
    run_cli,
    tmpfs,
)

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

COLOCATE = FAKES / "colocate.env"
SERVER = FAKES / "server.env"


def write_dataset(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


# C02: /dev/shm too small ---------------------------------------------------------------------------


def test_c02_small_shm_with_p2p_disabled_multi_gpu_run_is_refused(tmp_path):
    inv = inventory_file(tmp_path, "5x4090-driver535", shm_bytes=64 * 1024**2)
    err = refused(
        tmp_path,
        f"recipe={SERVER}",
        f"INVENTORY={inv}",
        "TRAIN_GPUS=0-3",
        "ROLLOUT_GPUS=4",
        "DATALOADER_NUM_WORKERS=4",
    )
    assert "/dev/shm is 64 MiB" in err and "NCCL_P2P_DISABLE=1" in err
    assert "ipc: host" in err and "shm_size" in err


def test_c02_small_shm_with_nccl_shm_disabled_is_a_warning_that_says_so(tmp_path):
    """Cases re-run: NCCL_SHM_DISABLE=1 keeps NCCL off /dev/shm (sockets instead), yet the refusal said the
    GPU processes exchange data through it."""
    inv = inventory_file(tmp_path, "5x4090-driver535", shm_bytes=64 * 1024**2)
    proc = run_cli(
        "validate",
        f"recipe={SERVER}",
        f"INVENTORY={inv}",
        "TRAIN_GPUS=0-3",
        "ROLLOUT_GPUS=4",
        "DATALOADER_NUM_WORKERS=4",
        "NCCL_SHM_DISABLE=1",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning: /dev/shm: /dev/shm is 64 MiB; NCCL_SHM_DISABLE=1 keeps NCCL off it" in proc.stdout


def test_c02_shipped_compose_file_sets_ipc_or_shm_size():
    text = (ROOT / "compose.yaml").read_text()
    assert "ipc: host" in text or "shm_size" in text


def test_c02_small_shm_warning_names_what_uses_it(tmp_path):
    """Cases re-run: two A100s with P2P and no dataloader workers were warned that "dataloader workers pass
    batches through it"; the warning names the users there are."""
    inv = inventory_file(tmp_path, "2xA100-nvlink-ib", shm_bytes=64 * 1024**2)
    proc = run_cli(
        "validate",
        f"recipe={SERVER}",
        f"INVENTORY={inv}",
        "DATALOADER_NUM_WORKERS=0",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "the 2 GPU processes share memory through it" in proc.stdout and "dataloader" not in proc.stdout


def test_c02_small_shm_single_gpu_with_workers_is_only_a_warning(tmp_path):
    inv = inventory_file(tmp_path, "1x4090-driver535", shm_bytes=64 * 1024**2)
    proc = run_cli(
        "validate",
        f"recipe={COLOCATE}",
        f"INVENTORY={inv}",
        "DATALOADER_NUM_WORKERS=2",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning: /dev/shm" in proc.stdout


# C03: no GPU in the container ------------------------------------------------------------------------


def test_c03_no_gpu_names_the_compose_block_and_the_toolkit(tmp_path):
    inv = inventory_file(
        tmp_path,
        "1x4090-driver535",
        gpus=[],
        p2p=[],
        driver_version=None,
        nvml_error="NVML Shared Library Not Found",
    )
    err = refused(
        tmp_path, "recipe=countdown-1x4090", f"INVENTORY={inv}", extra_env={"GRPO_RIG_VERSION": "test"}
    )
    assert "No GPU is visible inside the container (NVML Shared Library Not Found)" in err
    assert "deploy.resources.reservations.devices" in err and "NVIDIA Container Toolkit" in err
    assert "Traceback" not in err


def test_no_gpu_on_a_host_suggests_an_example_inventory(tmp_path):
    """Outside the image (no GRPO_RIG_VERSION), `plan`/`validate` on a laptop: no talk of the container."""
    inv = inventory_file(
        tmp_path,
        "1x4090-driver535",
        gpus=[],
        p2p=[],
        driver_version=None,
        nvml_error="NVML Shared Library Not Found",
    )
    proc = run_cli("validate", "recipe=countdown-1x4090", f"INVENTORY={inv}", env=clean_env())
    assert proc.returncode == 2
    assert "No GPU is visible on this machine" in proc.stderr and "inside the container" not in proc.stderr
    assert "INVENTORY=examples/inventories/1x4090-driver535.json" in proc.stderr


def test_ms_swift_style_flags_and_unquoted_lists_get_the_right_fix(tmp_path):
    err = refused(tmp_path, "recipe=smoke", "--num_generations", "8")
    assert "fix: write NUM_GENERATIONS=8" in err and "usage:" not in err
    err = refused(tmp_path, "recipe=smoke", "--vllm_server_host", "10.0.0.2")  # composed: no key to write
    assert "write VLLM_SERVER_HOST" not in err and "ROLLOUT_HOST=<address>" in err
    err = refused(tmp_path, "recipe=smoke", "REWARD_FUNCS=countdown", "format")
    assert 'fix: quote the whole value: REWARD_FUNCS="countdown format"' in err
    assert "FORMAT=<value>" not in err


def test_c03_doctor_without_a_gpu_gives_the_same_help():
    inside = run_cli("doctor", env=clean_env(GRPO_RIG_VERSION="test"))
    assert inside.returncode == 0 and "deploy.resources.reservations.devices" in inside.stdout
    assert "NVIDIA Container Toolkit" in inside.stdout
    here = run_cli("doctor", env=clean_env())
    assert "INVENTORY=examples/inventories/1x4090-driver535.json" in here.stdout


def test_c03_no_gpu_from_real_nvml_on_this_machine(tmp_path):
    """This machine has no GPU: the real NVML probe must give the same one-paragraph answer."""
    err = refused(tmp_path, "recipe=countdown-1x4090")  # on the host: no GRPO_RIG_VERSION
    assert "No GPU is visible on this machine" in err and "Traceback" not in err
    err = refused(tmp_path, "recipe=countdown-1x4090", extra_env={"GRPO_RIG_VERSION": "test"})  # the image
    assert "deploy.resources.reservations.devices" in err and "Traceback" not in err


def test_c03_driver_too_old_states_minimum_and_recommended(tmp_path):
    inv = inventory_file(tmp_path, "1x4090-driver535", driver_version="525.60.11")
    err = refused(tmp_path, "recipe=countdown-1x4090", f"INVENTORY={inv}")
    assert ">= 525.60.13" in err and "CUDA 12.4 runtime" in err
    assert "550.54.14" in err and "RTX 40" in err


# C07: removed, renamed and invented arguments -----------------------------------------------------------


@pytest.mark.parametrize("key", sorted(keys.RENAMED))
def test_c07_every_row_of_the_renamed_table_is_refused_with_its_replacement(tmp_path, key):
    err = refused(tmp_path, "recipe=smoke", f"{key}=1")
    row = keys.RENAMED[key]
    assert key in err and row.fix in err and row.source in err


@pytest.mark.parametrize(
    ("pair", "replacement"),
    [
        ("vllm_device=cuda:1", "ROLLOUT_GPUS=<ordinal>"),
        ("num_infer_workers=1", "ROLLOUT_GPUS=<ordinal>"),
        ("vllm_max_num_seqs=64", "ROLLOUT_MAX_NUM_SEQS"),
        ("ROLLOUT_VLLM_GPU_MEMORY_UTILIZATION=0.5", "ROLLOUT_GPU_MEMORY_UTILIZATION=<value>"),
        ("tuner_type=lora", "TRAIN_TYPE=lora"),
        ("load_in_4bit=true", "QUANT_METHOD=bnb QUANT_BITS=4"),
        ("sft_type=lora", "TRAIN_TYPE"),
        # spelled as on ms-swift's command line (cases re-run: these got only "see keys")
        ("tuner-type=lora", "TRAIN_TYPE=lora"),
        ("vllm-device=cuda:1", "ROLLOUT_GPUS=<ordinal>"),
        ("num-generations=4", "write NUM_GENERATIONS"),
    ],
)
def test_c07_values_copied_from_old_posts_and_newer_docs(tmp_path, pair, replacement):
    assert replacement in refused(
        tmp_path, "recipe=countdown-1x4090", f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}", pair
    )


def test_c07_abbreviated_argument_is_refused(tmp_path):
    err = refused(tmp_path, "recipe=smoke", "vllm_server_ho=10.0.0.2")
    assert "abbreviations are refused" in err and "VLLM_SERVER_HOST" in err


def test_c07_device_map_with_vllm_is_refused(tmp_path):
    err = refused(
        tmp_path,
        "recipe=countdown-1x4090",
        f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}",
        "DEVICE_MAP=auto",
    )
    assert "not compatible with device_map" in err and "remove DEVICE_MAP" in err


def test_full_fine_tuning_of_a_4bit_model_is_refused_and_qlora_is_not(tmp_path):
    """New-user trial: an import with --tuner_type full --load_in_4bit true became TRAIN_TYPE=full with bnb
    4-bit and validated; transformers' Trainer refuses that after the model loads."""
    err = refused(tmp_path, "recipe=smoke", "TRAIN_TYPE=full", "QUANT_METHOD=bnb", "QUANT_BITS=4")
    assert "refuses to fine-tune a quantized model without adapters" in err and "TRAIN_TYPE=lora" in err
    assert not [p for p in _quant_problems("recipe=smoke", "QUANT_METHOD=bnb", "QUANT_BITS=4") if p.fatal]


def _quant_problems(*pairs: str, inventory: str = "5x4090-driver535", **changes):
    """The value checks' problems about quantization of a plan where bitsandbytes imports (unless `changes`
    say otherwise)."""
    from entrypoint.plan import build as plan_mod
    from entrypoint.preflight import packages, values
    from tests.conftest import facts_for, load_inventory, load_recipe

    r = load_recipe(*pairs)
    importable = facts_for(r).importable | {"bitsandbytes"}
    if changes.pop("without_bitsandbytes", False):
        importable = importable - {"bitsandbytes"}
    facts = facts_for(r, None, **{"importable": importable, **changes})
    plan = plan_mod.build(r, load_inventory(inventory), facts)
    found = values.check(plan, facts) + packages.check(plan, facts)
    return [p for p in found if "QUANT" in p.where or "bnb" in p.where]


QLORA_14B = (
    "recipe=countdown-1x4090",
    f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}",
    "MODEL=Qwen/Qwen3-14B",
    "QUANT_METHOD=bnb",
    "QUANT_BITS=4",
)


def test_qlora_passes_where_bitsandbytes_imports_and_names_the_lock_where_it_does_not(tmp_path):
    """bitsandbytes is in the lock: QLoRA colocated with vLLM (LoRA, vLLM's V1 engine, nf4, an architecture vLLM
    0.8.5 loads in 4-bit with LoRA) has no problem; a Python without it (an older venv or image) is told to
    re-sync from the lock, a local problem (`plan` warns, `validate` refuses)."""
    assert _quant_problems(*QLORA_14B, inventory="1x4090-driver535") == []
    missing = _quant_problems(*QLORA_14B, inventory="1x4090-driver535", without_bitsandbytes=True)
    assert [p.kind for p in missing] == ["local"]
    assert "bitsandbytes cannot be imported" in missing[0].message and "make venv" in missing[0].fix


@pytest.mark.parametrize(
    ("pairs", "says", "fix"),
    [
        (
            ("QUANT_BITS=8",),
            "quantizes a bf16 checkpoint while it loads it to bitsandbytes 4-bit NF4 only",
            "QUANT_BITS=4 (QLoRA), or USE_VLLM=false",
        ),
        (("DEEPSPEED=zero3",), "ZeRO-3 shards nothing of a bitsandbytes model", "DEEPSPEED=zero2"),
        (("TRAIN_TYPE=full",), "refuses to fine-tune a quantized model", "TRAIN_TYPE=lora"),
        (("BNB_4BIT_QUANT_TYPE=fp4",), "vLLM 0.8.5 quantizes its copy to nf4", "BNB_4BIT_QUANT_TYPE=nf4"),
        (("VLLM_SCHEDULER_STEPS=8",), "only as the trained adapter", "VLLM_SCHEDULER_STEPS=1"),
        (("SLEEP_LEVEL=2",), "only as the trained adapter", "SLEEP_LEVEL=1"),
        (
            ("DISABLE_HOOKS=adapter_sync",),
            "only as the trained adapter",
            "take adapter_sync out of DISABLE_HOOKS",
        ),
        (("QUANT_BITS=3",), "ms-swift 3.6.4 loads bitsandbytes weights in 4 or 8 bits", "QUANT_BITS=4"),
    ],
)
def test_qlora_settings_vllm_or_ms_swift_cannot_run_are_refused_naming_why(pairs, says, fix):
    problems = [p for p in _quant_problems(*QLORA_14B, *pairs, inventory="1x4090-driver535") if p.fatal]
    assert any(says in p.message and fix in p.fix for p in problems), [p.render() for p in problems]


def test_qlora_without_vllm_may_load_8_bits():
    """transformers loads bitsandbytes 8-bit for generation inside the trainer: only vLLM's copy needs 4."""
    assert _quant_problems(*QLORA_14B, "QUANT_BITS=8", "USE_VLLM=false", inventory="1x4090-driver535") == []


def test_qlora_with_a_rollout_server_is_refused_naming_the_colocated_route():
    problems = _quant_problems(
        f"recipe={SERVER}", "TRAIN_GPUS=0-3", "ROLLOUT_GPUS=4", "QUANT_METHOD=bnb", "QUANT_BITS=4"
    )
    assert any("not weights vLLM can load" in p.message and "remove ROLLOUT_GPUS" in p.fix for p in problems)


def test_qlora_of_an_architecture_vllm_cannot_load_in_4bit_is_refused_and_an_unlisted_one_warns():
    """vLLM 0.8.5's bitsandbytes loader needs packed_modules_mapping, its LoRA SupportsLoRA (facts/vllm_bnb.py):
    Qwen3-MoE has neither there; an architecture its registry does not list goes through its Transformers
    backend, unmeasured: a warning."""
    from entrypoint.plan.memory import shipped_config

    config = shipped_config("Qwen/Qwen3-14B")
    moe = _quant_problems(
        *QLORA_14B,
        inventory="1x4090-driver535",
        model_config=ModelConfig({**config, "architectures": ["Qwen3MoeForCausalLM"]}, "test"),
    )
    assert [p.fatal for p in moe] == [True] and "cannot load Qwen3MoeForCausalLM" in moe[0].message
    assert "packed_modules_mapping" in moe[0].message and "USE_VLLM=false" in moe[0].fix
    odd = _quant_problems(
        *QLORA_14B,
        inventory="1x4090-driver535",
        model_config=ModelConfig({**config, "architectures": ["MyForCausalLM"]}, "test"),
    )
    assert [p.fatal for p in odd] == [False] and "does not list MyForCausalLM" in odd[0].message


@pytest.mark.parametrize("word", ["ALL", "all", "all_linear", "all-linears"])
def test_target_modules_ms_swift_does_not_expand_are_refused_naming_all_linear(tmp_path, word):
    """Users' trial: --lora_target_modules ALL (ms-swift 2.x) validated, then PEFT found no module named ALL
    after the model loaded."""
    err = refused(tmp_path, "recipe=smoke", f"TARGET_MODULES={word}")
    assert f"{word!r} is not a word ms-swift 3.6.4 knows" in err and "TARGET_MODULES=all-linear" in err
    for fine in ("all-linear", "q_proj v_proj", "all-linear all-embedding"):
        ok = run_cli(
            "validate", "recipe=smoke", f"TARGET_MODULES={fine}", f"OUTPUT_DIR={tmp_path}", env=clean_env()
        )
        assert ok.returncode == 0, (fine, ok.stderr)


def test_an_eval_batch_that_does_not_fit_num_generations_gets_the_value_to_set(tmp_path):
    """New-user trial: "set PER_DEVICE_EVAL_BATCH_SIZE so that it x 1 is a multiple of 6" left the arithmetic to
    the reader; the fix names the nearest value that works."""
    err = refused(
        tmp_path,
        "recipe=smoke",
        "NUM_GENERATIONS=6",
        "PER_DEVICE_TRAIN_BATCH_SIZE=6",
        "GRADIENT_ACCUMULATION_STEPS=1",
        "SPLIT_DATASET_RATIO=0.1",
        "PER_DEVICE_EVAL_BATCH_SIZE=4",
    )
    assert "set PER_DEVICE_EVAL_BATCH_SIZE=6 (the nearest value" in err
    ok = run_cli(
        "validate",
        "recipe=smoke",
        "NUM_GENERATIONS=6",
        "PER_DEVICE_TRAIN_BATCH_SIZE=6",
        "GRADIENT_ACCUMULATION_STEPS=1",
        "SPLIT_DATASET_RATIO=0.1",
        "PER_DEVICE_EVAL_BATCH_SIZE=6",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert "PER_DEVICE_EVAL_BATCH_SIZE" not in ok.stdout + ok.stderr, ok.stderr


def test_all_problems_are_reported_together(tmp_path):
    err = refused(tmp_path, "recipe=smoke", "load_in_4bit=true", "vllm_device=auto", "NUM_GENERATIONS=x")
    assert err.count("error:") == 3


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
    `from`/`value` and human/gpt for role/content and user/assistant: such rows pass; text it cannot read, or a
    conversation without a user turn however spelled, is refused."""
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


# Value checks ms-swift reports late ------------------------------------------------------------------------


def test_num_generations_must_divide_the_generation_batch(tmp_path):
    err = refused(tmp_path, "recipe=smoke", "NUM_GENERATIONS=3")
    assert (
        "3 does not divide the generation batch (8 completions/device x 1 process(es) x 1 steps = 8)" in err
    )
    assert "[2, 4, 8]" in err


def test_vllm_memory_fraction_out_of_range(tmp_path):
    err = refused(
        tmp_path,
        "recipe=countdown-1x4090",
        f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}",
        "VLLM_GPU_MEMORY_UTILIZATION=40",
    )
    assert "40 is not a fraction in (0, 1]" in err


def test_system_prompt_file_must_exist(tmp_path):
    err = refused(tmp_path, "recipe=smoke", "SYSTEM=prompts/missing.txt")
    assert "the system prompt file prompts/missing.txt does not exist" in err


# Plugins --------------------------------------------------------------------------------------------------


def test_unregistered_reward_name(tmp_path):
    err = refused(tmp_path, "recipe=smoke", "REWARD_FUNCS=countdown TCMSDAccuracy")
    assert "no reward function is registered under 'TCMSDAccuracy'" in err and "tcm_sd_accuracy" in err


def test_plugin_stem_that_shadows_an_installed_module_is_refused(tmp_path):
    plugin = tmp_path / "datasets.py"
    plugin.write_text(
        "from swift.plugin import ORM, orms\nclass R(ORM):\n    def __call__(self, completions, **kw):\n        return [1.0] * len(completions)\norms['mine'] = R\n"
    )
    err = refused(tmp_path, "recipe=smoke", f"EXTERNAL_PLUGINS={plugin}", "REWARD_FUNCS=mine")
    assert "as module 'datasets', which is already the installed" in err and "rename the file" in err


def test_plugin_that_fails_to_import_is_reported(tmp_path):
    plugin = tmp_path / "my_broken_rewards.py"
    plugin.write_text("import numpy\nraise RuntimeError('typo in my reward')\n")
    err = refused(tmp_path, "recipe=smoke", f"EXTERNAL_PLUGINS={plugin}", "REWARD_FUNCS=countdown")
    assert "import failed: RuntimeError: typo in my reward" in err


def test_plugin_import_leaks_nothing_into_the_entrypoint(tmp_path):
    marker = tmp_path / "imported"
    plugin = tmp_path / "my_marker_rewards.py"
    plugin.write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\nfrom swift.plugin import orms\n"
    )
    proc = run_cli(
        "validate", "recipe=smoke", f"EXTERNAL_PLUGINS={plugin}", f"OUTPUT_DIR={tmp_path}", env=clean_env()
    )
    assert proc.returncode == 0, proc.stderr
    import sys

    assert "my_marker_rewards" not in sys.modules and marker.exists()


def test_missing_plugin_file(tmp_path):
    err = refused(
        tmp_path,
        "recipe=smoke",
        "EXTERNAL_PLUGINS=/data/plugin.py",
        "REWARD_FUNCS=countdown",
        extra_env={"GRPO_RIG_VERSION": "test"},
    )
    assert "/data/plugin.py: does not exist inside the container" in err
    err = refused(tmp_path, "recipe=smoke", "EXTERNAL_PLUGINS=/data/plugin.py", "REWARD_FUNCS=countdown")
    assert "/data/plugin.py: does not exist on this machine" in err  # on a clone: no container to look in


# Environment -------------------------------------------------------------------------------------------------


def test_a_read_only_output_volume_is_called_read_only_not_given_a_chown(tmp_path):
    """A read-only mount was refused as "not writable" with `chown` to the owner it already had."""
    with tmpfs(tmp_path / "volume", "1m", "ro"):  # read-only: even root cannot write there
        err = refused(tmp_path, "recipe=smoke", f"OUTPUT_DIR={tmp_path / 'volume'}/runs")
    assert (
        f"error: OUTPUT_DIR {tmp_path / 'volume'}/runs: is on a read-only file system ({tmp_path / 'volume'})"
        in err
    )
    assert "fix: mount it read-write (compose: remove :ro from its volume)" in err and "chown" not in err


@pytest.mark.parametrize(
    "info, said, fix",
    [
        (
            {"read_only": True, "owner": "1000:1000", "write_error": "Read-only file system"},
            "is on a read-only file system",
            "mount it read-write (compose: remove :ro from its volume)",
        ),
        (
            {"owner": "4242:4242", "write_error": "Permission denied"},
            "is not writable by this process, though it belongs to its user (uid:gid 4242:4242, owner 4242:4242; "
            "Permission denied)",
            "give the owner write permission to",
        ),
        (
            {"owner": "0:0", "write_error": "Permission denied"},
            "is not writable by this process (uid:gid 4242:4242; the directory belongs to 0:0; Permission denied)",
            "on the host: `sudo chown -R 4242:4242 ./output`",
        ),
    ],
)
def test_an_output_dir_that_cannot_be_written_gets_the_fix_of_its_cause(info, said, fix):
    """Read-only mount, a mode that keeps out its own owner, another owner: chown only for the last."""
    import dataclasses

    from entrypoint.facts.facts import PathInfo
    from entrypoint.preflight import environment

    plan = build_plan("recipe=smoke", "RUN_NAME=r")
    out = str(Path(plan.recipe.settings.OUTPUT_DIR).expanduser())
    shut = PathInfo(
        exists=True, is_dir=True, readable=True, writable=False, nearest=out, disk_free_gib=100, **info
    )
    facts = dataclasses.replace(plan.facts, paths={**plan.facts.paths, out: shut}, uid=4242, gid=4242)
    (problem,) = [p for p in environment.check(plan, facts, 0) if p.where == f"OUTPUT_DIR {out}"]
    assert problem.message == said or problem.message.startswith(said), problem.render()
    assert problem.fix.startswith(fix) and ("chown" in problem.fix) == (info["owner"] == "0:0")


@pytest.mark.parametrize("where", ["itself", "its parent"])
def test_output_dir_that_is_a_file_says_so(tmp_path, where):
    """A regular file was once reported as "not writable ... chown"."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    out = blocker if where == "itself" else blocker / "runs"
    err = refused(tmp_path, "recipe=smoke", f"OUTPUT_DIR={out}")
    said = "is a file, not a directory" if where == "itself" else f"cannot be made: {blocker} is a file"
    assert (
        f"error: OUTPUT_DIR {out}: {said}" in err
        and "chown" not in err
        and "point OUTPUT_DIR at a directory" in err
    )


def test_a_run_directory_that_is_a_file_says_so(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "r").write_text("")  # refused() names the run r
    err = refused(tmp_path, "recipe=smoke")
    assert f"error: RUN_NAME r: {tmp_path / 'out' / 'r'} is a file, not a run directory" in err


def test_validate_passes_on_the_shipped_recipes(tmp_path):
    cases = [
        ("recipe=smoke",),
        ("recipe=countdown-1x4090", f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}"),
        (
            "recipe=tcm-4x4090",
            f"INVENTORY={INVENTORIES / '5x4090-driver535.json'}",
            f"DATASET={ROOT / 'examples/tcm/sample.jsonl'}",
            "PER_DEVICE_TRAIN_BATCH_SIZE=1",
            "GRADIENT_ACCUMULATION_STEPS=3",
        ),
    ]
    for pairs in cases:
        proc = run_cli("validate", *pairs, f"OUTPUT_DIR={tmp_path}", env=clean_env())
        assert proc.returncode == 0, (pairs, proc.stdout, proc.stderr)
        assert "valid" in proc.stdout


def test_validate_reports_every_problem_and_exits_2(tmp_path):
    proc = run_cli(
        "validate",
        "recipe=smoke",
        "NUM_GENERATIONS=3",
        "REWARD_FUNCS=nope",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert proc.returncode == 2
    assert "NUM_GENERATIONS" in proc.stderr and "'nope'" in proc.stderr


# Variants found by re-running the cases as a user ---------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "yes", ""])
def test_p2p_disable_values_nccl_reads_as_zero_are_refused_on_cards_without_p2p(tmp_path, value):
    err = refused(
        tmp_path,
        "recipe=countdown-1x4090",
        f"INVENTORY={INVENTORIES / '2x4090-driver535.json'}",
        f"NCCL_P2P_DISABLE={value}",
    )
    assert "it reads integers: write 1" in err


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
    mark and one JSON array of objects: refusing them was a false refusal (case C08's variants, tests/cases.md)."""
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


@pytest.mark.parametrize("value", ["http://10.0.0.2:8000", "10.0.0.2:8000", "10.0.0.2/v1"])
def test_rollout_host_must_be_a_bare_address(tmp_path, value):
    err = refused(
        tmp_path,
        "recipe=tcm-4x4090",
        f"INVENTORY={INVENTORIES / '5x4090-driver535.json'}",
        "ROLLOUT_GPUS=",
        f"ROLLOUT_HOST={value}",
    )
    assert "is not a bare address" in err


def test_rollout_server_keys_without_a_rollout_server_are_refused(tmp_path):
    err = refused(
        tmp_path,
        "recipe=countdown-1x4090",
        f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}",
        "ROLLOUT_GPU_MEMORY_UTILIZATION=0.5",
    )
    assert (
        "rollout-server settings, but this run has no rollout server" in err
        and "VLLM_GPU_MEMORY_UTILIZATION" in err
    )


def test_no_gpu_with_the_default_train_gpus_is_the_missing_gpu_fault(tmp_path):
    inv = inventory_file(
        tmp_path,
        "1x4090-driver535",
        gpus=[],
        p2p=[],
        driver_version=None,
        nvml_error="NVML Shared Library Not Found",
    )
    err = refused(
        tmp_path,
        "recipe=countdown-1x4090",
        f"INVENTORY={inv}",
        "USE_VLLM=false",
        "VLLM_GPU_MEMORY_UTILIZATION=",
        "VLLM_MAX_MODEL_LEN=",
        "SLEEP_LEVEL=",
        "TRAIN_GPUS=all",
    )
    assert "No GPU is visible on this machine" in err and "TRAIN_GPUS=none" in err
    assert err.count("error:") == 1  # one clear message, no consequences of it


def test_recipe_file_with_a_byte_order_mark_loads(tmp_path):
    recipe_file = tmp_path / "bom.env"
    recipe_file.write_bytes(b"\xef\xbb\xbf" + (ROOT / "recipes" / "smoke.env").read_bytes())
    proc = run_cli("plan", f"recipe={recipe_file}", env=clean_env())
    assert proc.returncode == 0, proc.stderr


# Offline runs ---------------------------------------------------------------------------------------------

QWEN_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}
COUNTDOWN = ("recipe=countdown-1x4090", f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}")


def place(directory: Path) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(QWEN_CONFIG))
    return directory


def test_offline_run_uses_the_modelscope_snapshot_where_modelscope_keeps_it(tmp_path):
    """ModelScope keeps Qwen/Qwen2.5-0.5B-Instruct as models/Qwen/Qwen2___5-0___5B-Instruct; an offline run
    passes that directory as --model (ModelScope has no offline switch), and HF's switches are set."""
    snapshot = place(tmp_path / "ms" / "models" / "Qwen" / "Qwen2___5-0___5B-Instruct")
    plan = build_plan(
        *COUNTDOWN,
        "OFFLINE=true",
        inventory="1x4090-driver535",
        environ={"MODELSCOPE_CACHE": str(tmp_path / "ms")},
    )
    assert not [p for p in plan.problems if p.fatal], plan.problems
    trainer = plan.processes[-1]
    assert flag(trainer.argv, "model") == [str(snapshot)]
    assert trainer.env["HF_HUB_OFFLINE"] == "1" and trainer.env["TRANSFORMERS_OFFLINE"] == "1"


def test_hf_offline_in_the_environment_counts_as_offline(tmp_path):
    """HF_HUB_OFFLINE=1 in the environment: the model must be local too; the refusal names where."""
    err = refused(
        tmp_path, *COUNTDOWN, extra_env={"HF_HUB_OFFLINE": "1", "MODELSCOPE_CACHE": str(tmp_path / "ms")}
    )
    assert "this run is offline (HF_HUB_OFFLINE=1 in the environment)" in err
    assert str(tmp_path / "ms" / "models" / "Qwen" / "Qwen2___5-0___5B-Instruct") in err
    assert "download it there once with network access" in err


def test_offline_run_uses_the_hugging_face_snapshot(tmp_path):
    """USE_HF=true: huggingface_hub's own cache lookup finds refs/main -> snapshots/<sha>."""
    repo = tmp_path / "hf" / "models--Qwen--Qwen2.5-0.5B-Instruct"
    snapshot = place(repo / "snapshots" / "7ae557604adf67be50417f59c2c2f167def9a775")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snapshot.name)
    plan = build_plan(
        *COUNTDOWN,
        "OFFLINE=true",
        "USE_HF=true",
        inventory="1x4090-driver535",
        environ={"HF_HUB_CACHE": str(tmp_path / "hf")},
    )
    assert not [p for p in plan.problems if p.fatal], plan.problems
    assert flag(plan.processes[-1].argv, "model") == [str(snapshot)]
    assert plan.facts.model_config.source == str(snapshot / "config.json")  # the planner read the real config


@pytest.mark.slow  # imports modelscope (~6 s)
def test_modelscope_itself_looks_where_the_entrypoint_says(tmp_path):
    """The directory naming is modelscope's: ask modelscope 1.28 (create_temporary_directory_and_cache)."""
    import os
    import subprocess
    import sys

    from entrypoint.world import hubcache

    code = (
        "from modelscope.hub.file_download import create_temporary_directory_and_cache as c;"
        "print(c('Qwen/Qwen2.5-0.5B-Instruct')[1].get_root_location())"
    )
    env = {**os.environ, "MODELSCOPE_CACHE": str(tmp_path / "ms")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ours = hubcache.expected(
        "Qwen/Qwen2.5-0.5B-Instruct", "models", False, {"MODELSCOPE_CACHE": str(tmp_path / "ms")}
    )
    assert Path(out.stdout.strip().splitlines()[-1]) == ours


# Value ranges (keys.RANGES) -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pair", "fix"),
    [
        ("PER_DEVICE_TRAIN_BATCH_SIZE=0", "set PER_DEVICE_TRAIN_BATCH_SIZE >= 1"),
        ("GRADIENT_ACCUMULATION_STEPS=0", "set GRADIENT_ACCUMULATION_STEPS >= 1"),
        ("LEARNING_RATE=-1e-5", "set LEARNING_RATE > 0 and <= 1"),
        ("LEARNING_RATE=10", "set LEARNING_RATE > 0 and <= 1"),
        ("TEMPERATURE=-1", "set TEMPERATURE > 0"),
        ("TEMPERATURE=0", "set TEMPERATURE > 0"),
        ("MAX_STEPS=-5", "set MAX_STEPS >= 1, or -1"),
        ("MAX_STEPS=0", "set MAX_STEPS >= 1, or -1"),
        ("TOP_P=1.5", "set TOP_P > 0 and <= 1"),
        ("TOP_K=0", "set TOP_K >= 1, or -1"),
        ("WARMUP_RATIO=2", "set WARMUP_RATIO >= 0 and <= 1"),
        ("LORA_RANK=0", "set LORA_RANK >= 1"),
    ],
)
def test_values_outside_their_range_are_refused_with_the_range(tmp_path, pair, fix):
    """Before: PER_DEVICE_TRAIN_BATCH_SIZE=0 ended in a ZeroDivisionError traceback (exit 1); the others
    were "valid" and failed late or meant something else."""
    err = refused(tmp_path, "recipe=smoke", pair)
    assert "is outside its range" in err and f"fix: {fix}" in err
    assert "Traceback" not in err
    assert "does not divide the generation batch" not in err  # no cascade from the refused value


def test_values_inside_their_range_are_accepted(tmp_path):
    for pair in ("MAX_STEPS=-1", "TOP_K=-1", "LEARNING_RATE=1", "BETA=0", "WARMUP_RATIO=0"):
        proc = run_cli("validate", "recipe=smoke", pair, env=clean_env())
        assert proc.returncode == 0, (pair, proc.stderr)


def test_deprecated_gc_collect_after_offload_is_a_warning_not_a_refusal():
    """ms-swift 3.6.4 accepts it with a deprecation warning (rlhf_args.py:314-316)."""
    proc = run_cli("validate", "recipe=smoke", "GC_COLLECT_AFTER_OFFLOAD=true", env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert (
        "warning: GC_COLLECT_AFTER_OFFLOAD" in proc.stdout + proc.stderr
        and "deprecated" in proc.stdout + proc.stderr
    )


def test_reward_weights_count_the_reward_models_too(tmp_path):
    """ms-swift appends REWARD_MODEL entries to the reward functions before counting the weights."""
    plan = build_plan("recipe=smoke", "REWARD_MODEL=Qwen/Qwen2.5-0.5B-Instruct", "REWARD_WEIGHTS=1 1 0.5")
    assert not [p for p in plan.problems if p.fatal and "REWARD_WEIGHTS" in p.where]
    err = refused(tmp_path, "recipe=smoke", "REWARD_WEIGHTS=1 1 0.5")
    assert "3 weights for 2 reward function(s)" in err
    err = refused(tmp_path, "recipe=smoke", "REWARD_MODEL=a/b c/d", "REWARD_MODEL_PLUGIN=default")
    assert "1 plugin(s) for 2 reward model(s)" in err


def test_every_problem_is_printed_at_once(tmp_path):
    """The seed document's command, as a recipe: the recipe's own problems (a managed key, a removed one)
    and the plan's (missing files, memory) come in one refusal, not one batch after another."""
    recipe = tmp_path / "seed.env"
    recipe.write_text(
        "RLHF_TYPE=grpo\nMODEL=Qwen/Qwen2.5-1.5B-Instruct\nVLLM_DEVICE=auto\nDATASET=/path/to/data\n"
        "EXTERNAL_PLUGINS=examples/train/grpo/plugin/plugin.py\nREWARD_FUNCS=TCMSDAccuracy format\n"
        "SYSTEM=examples/train/grpo/prompt.txt\nPER_DEVICE_TRAIN_BATCH_SIZE=0\n"
    )
    err = refused(tmp_path, f"recipe={recipe}", f"INVENTORY={INVENTORIES / '5x4090-driver535.json'}")
    for where in (
        "RLHF_TYPE",
        "VLLM_DEVICE",
        "PER_DEVICE_TRAIN_BATCH_SIZE",
        "SYSTEM",
        "EXTERNAL_PLUGINS",
        "REWARD_FUNCS TCMSDAccuracy",
        "DATASET /path/to/data",
    ):
        assert f"error: {where}" in err, where


# Datasets and plugins that validated but could not train -----------------------------------------------------

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


def test_a_reward_returning_a_string_is_refused(tmp_path):
    plugin = tmp_path / "my_string_rewards.py"
    plugin.write_text(
        "from swift.plugin import ORM, orms\nclass R(ORM):\n    def __call__(self, completions, **kw):\n"
        "        return 'good'\norms['stringy'] = R\n"
    )
    err = refused(tmp_path, "recipe=smoke", f"EXTERNAL_PLUGINS={plugin}", "REWARD_FUNCS=stringy")
    assert "REWARD_FUNCS stringy: returned 'good' for 4 completions" in err
    assert "one number (or None where the reward does not apply) per completion" in err


@pytest.mark.parametrize(
    "returns, funcs, valid",
    [
        ("[float('nan')] * len(completions)", "countdown nanny", True),  # countdown scores every completion
        ("[float('nan')] * len(completions)", "nanny", False),  # nothing scores them: ms-swift fails
        ("[None] * len(completions)", "nanny", False),
        ("[float('nan') if i % 2 else 1.0 for i, _ in enumerate(completions)]", "nanny", False),
        ("[float('inf')] * len(completions)", "countdown nanny", False),  # inf breaks the mean
    ],
)
def test_nan_is_none_to_ms_swift_and_a_completion_no_reward_scores_is_refused(
    tmp_path, returns, funcs, valid
):
    """Cases re-run: an all-NaN reward was refused as 'return a list of floats' (NaN is a float), while NaN
    where another reward scores the completion is what ms-swift accepts (None becomes NaN there)."""
    plugin = tmp_path / "my_nan_rewards.py"
    plugin.write_text(
        "from swift.plugin import ORM, orms\nclass R(ORM):\n    def __call__(self, completions, **kw):\n"
        f"        return {returns}\norms['nanny'] = R\n"
    )
    proc = run_cli(
        "validate",
        "recipe=smoke",
        f"EXTERNAL_PLUGINS={plugin}",
        f"REWARD_FUNCS={funcs}",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert (proc.returncode == 0) == valid, proc.stderr
    if "nan" in returns and not valid:
        assert "every reward returned None or NaN for" in proc.stderr and "return 0.0 where" in proc.stderr


def test_a_reward_returning_numbers_and_none_is_accepted(tmp_path):
    plugin = tmp_path / "my_fine_rewards.py"
    plugin.write_text(
        "from swift.plugin import ORM, orms\nclass R(ORM):\n    def __call__(self, completions, target, **kw):\n"
        "        return [None if i == 0 else 1.0 for i, _ in enumerate(completions)]\norms['fine'] = R\n"
    )
    # beside a reward that scores every completion: alone, its None row is one ms-swift cannot score (below)
    proc = run_cli(
        "validate",
        "recipe=smoke",
        f"EXTERNAL_PLUGINS={plugin}",
        "REWARD_FUNCS=countdown fine",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr


def test_merged_export_needs_room_for_the_whole_model_before_the_run():
    """EXPORT_MERGED=true writes a full copy of the model: the free space is checked before training. On
    this machine (NVML's inventory) too little refuses; planned for another machine (INVENTORY) it warns."""
    import dataclasses

    from entrypoint.facts.facts import PathInfo
    from entrypoint.preflight import environment

    plan = build_plan(*COUNTDOWN, "EXPORT_MERGED=true", inventory="1x4090-driver535")
    here = dataclasses.replace(plan, inventory=plan.inventory.model_copy(update={"source": "nvml"}))
    out = str(Path(plan.recipe.settings.OUTPUT_DIR).expanduser())
    tight = PathInfo(exists=True, is_dir=True, readable=True, writable=True, nearest=out, disk_free_gib=1.0)
    facts = dataclasses.replace(plan.facts, paths={**plan.facts.paths, out: tight})
    disk = [p for p in environment.check(here, facts, 0) if p.where.startswith("disk under")]
    assert disk and disk[0].fatal and "the merged model (EXPORT_MERGED=true, 0.9 GiB)" in disk[0].message
    (elsewhere,) = [p for p in environment.check(plan, facts, 0) if p.where.startswith("disk under")]
    assert not elsewhere.fatal and "planned for another machine, INVENTORY" in elsewhere.message
    plan = build_plan(*COUNTDOWN, inventory="1x4090-driver535")  # without the export 1.0 GiB is enough
    assert not [p for p in environment.check(plan, facts, 0) if p.where.startswith("disk under")]


def test_room_for_one_checkpoint_but_not_for_all_of_them_is_a_warning_naming_the_limit_that_fits():
    import dataclasses

    from entrypoint.facts.facts import PathInfo
    from entrypoint.preflight import environment

    plan = build_plan("recipe=smoke", "MAX_STEPS=40", "SAVE_TOTAL_LIMIT=")  # 20 checkpoints of 28 MiB kept
    out = str(Path(plan.recipe.settings.OUTPUT_DIR).expanduser())
    room = PathInfo(exists=True, is_dir=True, readable=True, writable=True, nearest=out, disk_free_gib=0.25)
    facts = dataclasses.replace(plan.facts, paths={**plan.facts.paths, out: room})
    (disk,) = [p for p in environment.check(plan, facts, 0) if p.where.startswith("disk under")]
    assert not disk.fatal and "the disk fills after about 6 checkpoint(s)" in disk.message
    assert disk.fix.startswith("set SAVE_TOTAL_LIMIT=5 ") and "the same command resumes it" in disk.fix


def test_the_free_space_asked_for_comes_from_what_a_run_of_the_recipe_writes():
    """1.0 GiB was once asked for a smoke run that wrote 67 MB (2 checkpoints of 29.8 MB, the adapter
    9.8 MB, logs): now its checkpoints, the export and a margin."""
    from entrypoint.preflight import environment

    smoke = build_plan("recipe=smoke")
    need = environment.disk_need(smoke, smoke.facts)
    assert 67e6 / 1024**3 < need.peak < 0.15, need
    assert need.text == "this run writes about 116 MiB (2 checkpoint(s) of 28 MiB, the export and logs)"
    longer = build_plan("recipe=smoke", "MAX_STEPS=40", "SAVE_TOTAL_LIMIT=")  # every checkpoint kept: 20
    assert "20 checkpoint(s) of 28 MiB" in environment.disk_need(longer, longer.facts).text
    unknown = build_plan("recipe=smoke", "MODEL_SOURCE=hub", "MODEL=someone/unknown-model")
    assert environment.disk_need(unknown, unknown.facts).peak == 1.0


@pytest.mark.parametrize("name", ["smoke", "smoke-gpu", "smoke-server", "countdown-1x4090"])
def test_every_path_a_plan_writes_is_inside_its_run_directory(name):
    import dataclasses

    from entrypoint.preflight import environment

    plan = build_plan(f"recipe={name}", "EXPORT_MERGED=true", inventory="2x4090-driver535")
    assert len(plan.written) >= 3 and environment.check_run_paths(plan) == []
    outside = dataclasses.replace(
        plan.processes[-1], argv=[*plan.processes[-1].argv, "--output_dir", "/elsewhere"]
    )
    (problem,) = environment.check_run_paths(
        dataclasses.replace(plan, processes=[*plan.processes[:-1], outside])
    )
    assert f"the run would write outside {plan.run_dir}: /elsewhere" in problem.message


# What a new user sees on the host --------------------------------------------------------------------------


def test_a_missing_plugin_file_is_named_for_where_the_command_runs():
    """On a clone, "does not exist inside the container" sent a user looking for a container."""
    from entrypoint.rewards import check as rewards_check

    def missing(where: bool) -> str:
        _, problems = rewards_check.check(
            ["my_rewrds.py"], [], None, "", lambda f: "does not exist", in_container=where
        )
        return problems[0].render()

    assert (
        "does not exist on this machine" in missing(False)
        and "container" not in missing(False).split("fix:")[0]
    )
    assert "does not exist inside the container" in missing(True) and "/data" in missing(True)


def test_a_mistyped_reward_gets_a_did_you_mean():
    from entrypoint.rewards import check as rewards_check

    probe = {
        "registered": {n: {"class": n, "columns": []} for n in ("countdown", "format_partial", "accuracy")},
        "shadowed": [],
        "errors": [],
    }
    _, problems = rewards_check.check([], ["countdwn", "format_partial", "zzz"], probe, "", lambda f: "")
    fixes = {p.where: p.fix for p in problems}
    assert fixes["REWARD_FUNCS countdwn"].startswith("did you mean countdown?")
    assert "did you mean" not in fixes["REWARD_FUNCS zzz"]


def test_the_refusal_counts_errors_and_warnings_apart(tmp_path):
    """ "(1 problem(s))" stood over a warning and an error."""
    from entrypoint.errors import Problem, tally

    error, warning = Problem("A", "a"), Problem("B", "b", fatal=False)
    assert tally([error, warning]) == "1 error and 1 warning"
    assert (
        tally([error, error]) == "2 errors" and tally([warning]) == "1 warning" and tally([]) == "no problems"
    )
    proc = run_cli("validate", "recipe=smoke", f"DATASET={tmp_path / 'missing.jsonl'}", env=clean_env())
    assert proc.returncode == 2
    assert "refused before any heavy work (1 error and 1 warning):" in proc.stderr, proc.stderr


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
    """The cases re-run: a 0-byte dataset got 'has no rows' and then 'a generation batch needs <= 0 prompt(s)'."""
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


def test_a_mistyped_generator_is_one_error_with_a_did_you_mean():
    """Cases re-run: 'countdwn' gave three errors, two of them false ('no dataset named', 'fewer than one
    generation batch needs (2)'), and 'set a valid DATASET_GENERATOR'."""
    proc = run_cli("validate", "recipe=smoke", "DATASET_GENERATOR=countdwn", env=clean_env())
    assert proc.returncode == 2 and "(1 error)" in proc.stderr, proc.stderr
    assert "fix: did you mean DATASET_GENERATOR=countdown?" in proc.stderr


@pytest.mark.parametrize(
    "key, value, line",
    [
        ("ROLLOUT_HOST", "http://10.0.0.2:8000/", "ROLLOUT_HOST=10.0.0.2 ROLLOUT_PORT=8000"),
        ("ROLLOUT_HOST", "node1:8000", "ROLLOUT_HOST=node1 ROLLOUT_PORT=8000"),
        ("MASTER_ADDR", "tcp://10.0.0.1:29500", "MASTER_ADDR=10.0.0.1 MASTER_PORT=29500"),
    ],
)
def test_an_address_written_as_a_url_is_refused_with_the_keys_that_split_it(key, value, line):
    proc = run_cli("validate", "recipe=smoke", f"{key}={value}", env=clean_env())
    assert proc.returncode == 2 and "(1 error" in proc.stderr, proc.stderr
    assert f"fix: write {line}" in proc.stderr


def test_a_disk_too_small_names_the_incomplete_checkpoints_to_delete_and_no_knob_that_is_off():
    """Cases re-run: after a full disk the refusal said 'or set EXPORT_MERGED=false' (it was off) and not
    the checkpoint the full disk had cut short, whose deletion made the run fit."""
    import dataclasses

    from entrypoint.facts.facts import PathInfo, Previous
    from entrypoint.preflight import environment

    plan = build_plan("recipe=smoke", inventory="1x4090-driver535")
    plan = dataclasses.replace(plan, inventory=plan.inventory.model_copy(update={"source": "nvml"}))
    out = str(Path(plan.recipe.settings.OUTPUT_DIR).expanduser())
    tight = PathInfo(exists=True, is_dir=True, readable=True, writable=True, nearest=out, disk_free_gib=0.01)
    previous = Previous({"status": "failed"}, "", "", (("train/checkpoint-1", 15 / 1024),))
    facts = dataclasses.replace(plan.facts, paths={**plan.facts.paths, out: tight}, previous=previous)
    (disk,) = [p for p in environment.check(plan, facts, 0) if p.where.startswith("disk under")]
    assert disk.fatal and disk.fix.startswith(
        f"delete {plan.run_dir / 'train/checkpoint-1'} (15 MiB): incomplete"
    )
    assert "EXPORT_MERGED" not in disk.fix


@pytest.mark.parametrize("sleep", ["SLEEP_LEVEL=1", "OFFLOAD_MODEL=true OFFLOAD_OPTIMIZER=true"])
def test_expandable_segments_with_sleep_mode_are_refused_before_vllm_stops_on_them(tmp_path, sleep):
    """vLLM's sleep-mode pool asserts that expandable segments are off (vllm 0.8.5.post1
    device_allocator/cumem.py:146), after the model has loaded: refused in seconds, whether the recipe or the
    planner (offload: sleep level 1) chose sleep mode; without sleep mode the same allocator is valid."""
    base = [
        "recipe=countdown-1x4090",
        f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        f"OUTPUT_DIR={tmp_path}",
    ]
    refused = run_cli("validate", *base, *sleep.split(), env=clean_env())
    assert refused.returncode == 2, refused.stdout
    assert "refuses expandable segments" in refused.stderr
    assert "fix: set SLEEP_LEVEL=0 (expandable segments, no sleeping)" in refused.stderr
    awake = run_cli("validate", *base, "SLEEP_LEVEL=0", env=clean_env())
    assert awake.returncode == 0, awake.stderr


def test_a_folder_of_the_user_s_is_not_taken_for_a_run_directory(tmp_path):
    """RUN_NAME naming an existing folder with the user's files and no manifest.json: refused before anything
    is written, the files untouched; a directory holding only what a start writes before its manifest (a
    start that died early, other nodes' folders) is a run and is accepted."""
    folder = tmp_path / "out" / "r"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("my notes\n")
    (folder / "results.csv").write_text("a,b\n")
    err = refused(tmp_path, "recipe=smoke")
    assert (
        f"error: RUN_NAME r: {folder} already holds files that are not a grpo-rig run (README.md, results.csv) "
        "and no manifest.json"
    ) in err
    assert "fix: choose another RUN_NAME" in err
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "results.csv"]
    assert (folder / "README.md").read_text() == "my notes\n"

    early = tmp_path / "early"
    for name in ("logs", "data", "train", "nodes"):
        (early / "out" / "r" / name).mkdir(parents=True)
    (early / "out" / "r" / "run.lock").write_text("")
    proc = run_cli("validate", "recipe=smoke", f"OUTPUT_DIR={early / 'out'}", "RUN_NAME=r", env=clean_env())
    assert proc.returncode == 0 and "not a grpo-rig run" not in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )


def test_a_model_directory_with_a_config_but_no_weights_is_refused_naming_the_download(tmp_path):
    """A download that stopped after config.json: refused before the start-up, where loading it would fail;
    the same directory with weights (a single file or a sharded index) is valid."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN_CONFIG))
    (model / "tokenizer.json").write_text("{}")
    err = refused(tmp_path, "recipe=smoke", f"MODEL={model}", "MODEL_SOURCE=hub")
    assert f"{model} has a config.json but no weights" in err and "--local-dir" in err
    for weights in ("model.safetensors.index.json", "pytorch_model.bin"):
        (model / weights).write_text("{}")
        proc = run_cli("validate", "recipe=smoke", f"MODEL={model}", "MODEL_SOURCE=hub", env=clean_env())
        assert "no weights" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        (model / weights).unlink()


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


@pytest.mark.parametrize("alias", ["MAX_NEW_TOKENS", "RESPONSE_LENGTH"])
def test_ms_swift_s_other_spellings_of_the_completion_length_reach_the_plan(alias):
    """Users' trial: MAX_NEW_TOKENS=2048 planned the recipe's 256-token completions, while ms-swift 3.6.4's
    RLHF generates 2048 (rlhf_args.py:197-199): the plan now counts what ms-swift uses, and says so."""
    from entrypoint.preflight import values
    from tests.conftest import build_plan, facts_for, load_recipe

    pairs = ("recipe=countdown-1x4090", "RUN_NAME=c")
    by_alias = build_plan(*pairs, f"{alias}=2048", inventory="1x4090-driver535")
    direct = build_plan(*pairs, "MAX_COMPLETION_LENGTH=2048", inventory="1x4090-driver535")
    assert by_alias.recipe.trainer_args.max_completion_length == 2048
    assert [e.peak_gib for e in by_alias.memory] == [e.peak_gib for e in direct.memory]
    warned = [
        p
        for p in values.check(by_alias, facts_for(load_recipe(*pairs, f"{alias}=2048")))
        if p.where.startswith(alias)
    ]
    assert warned and not warned[0].fatal and "over MAX_COMPLETION_LENGTH=256" in warned[0].message
    assert warned[0].fix == f"set MAX_COMPLETION_LENGTH=2048 and remove {alias}"


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ("SLEEP_LEVEL=2", "SLEEP_LEVEL=2 discards the base weights"),
        ("VLLM_USE_V1=0", "vLLM's V0 engine runs it"),
        ("DISABLE_HOOKS=adapter_sync", "DISABLE_HOOKS turns adapter_sync off"),
    ],
)
def test_the_one_copy_path_without_adapter_sync_says_the_sync_is_the_slow_merge(extra, why):
    """New-user trial: each of these drops vLLM's adapter path silently, for steps about twice as long."""
    from entrypoint.preflight import values
    from tests.conftest import build_plan, facts_for, load_recipe

    pairs = ("recipe=countdown-7b-1x4090", extra)
    plan = build_plan(*pairs, inventory="1x4090-driver535")
    warned = [p for p in values.check(plan, facts_for(load_recipe(*pairs))) if p.where == "weight sync"]
    assert (
        warned
        and not warned[0].fatal
        and why in warned[0].message
        and "on the CPU every step" in warned[0].message
    )
    ok = build_plan("recipe=countdown-7b-1x4090", inventory="1x4090-driver535")
    assert not [
        p
        for p in values.check(ok, facts_for(load_recipe("recipe=countdown-7b-1x4090")))
        if p.where == "weight sync"
    ]


def test_a_changed_model_drops_the_recipe_s_model_type_where_ms_swift_registers_it_otherwise():
    """Users' trial: MODEL=meta-llama/Llama-3.2-3B-Instruct on countdown-1x4090 ran with --model_type qwen2_5
    (Qwen's template on Llama, unchecked by ms-swift). The recipe's type belonged to its own model: left out,
    said; kept for another Qwen2.5 and for a local folder (ms-swift needs it there)."""
    from tests.conftest import build_plan, load_recipe

    for model, kept in (
        ("meta-llama/Llama-3.2-3B-Instruct", False),
        ("Qwen/Qwen3-4B", False),
        ("Qwen/Qwen2.5-7B-Instruct", True),
        ("/data/models/my-qwen", True),
    ):
        r = load_recipe("recipe=countdown-1x4090", f"MODEL={model}")
        assert ("model_type" in r.trainer) == kept, model
        said = [p for p in r.problems if p.where.startswith("MODEL_TYPE (recipes/countdown-1x4090.env")]
        assert bool(said) != kept and all(not p.fatal for p in said), (model, said)
    plan = build_plan(
        "recipe=countdown-1x4090", "MODEL=meta-llama/Llama-3.2-3B-Instruct", inventory="1x4090-driver535"
    )
    assert "--model_type" not in plan.process("trainer").argv


def test_a_model_type_of_another_family_is_refused_naming_the_right_one(tmp_path):
    err = refused(
        tmp_path,
        "recipe=countdown-1x4090",
        "MODEL=meta-llama/Llama-3.2-3B-Instruct",
        "MODEL_TYPE=qwen2_5",
        "MEMORY_CHECK=warn",
    )
    assert "qwen2_5 is not the type ms-swift 3.6.4 registers" in err and "MODEL_TYPE=llama3_2" in err
    # a local folder: by its config.json's architectures
    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 2048,
                "intermediate_size": 8192,
                "num_hidden_layers": 16,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "vocab_size": 128256,
            }
        )
    )
    (folder / "model.safetensors").write_bytes(b"")
    err = refused(tmp_path, "recipe=countdown-1x4090", f"MODEL={folder}", "MEMORY_CHECK=warn")
    assert (
        "qwen2_5 is registered in ms-swift 3.6.4 for Qwen2ForCausalLM, but MODEL's config.json says LlamaForCausalLM"
        in err
    )
    assert "llama3_2" in err
    # no type at all: ms-swift cannot tell which of the Llama types it is, and stops at start-up
    err = refused(tmp_path, "recipe=countdown-1x4090", f"MODEL={folder}", "MODEL_TYPE=", "MEMORY_CHECK=warn")
    assert "types share its architecture LlamaForCausalLM: it would stop at start-up asking for one" in err
    # unless the folder is a checkpoint whose args.json names it (ms-swift reads that first)
    (folder / "args.json").write_text(json.dumps({"model_type": "llama3_2"}))
    ok = run_cli(
        "validate",
        "recipe=countdown-1x4090",
        f"MODEL={folder}",
        "MODEL_TYPE=",
        "MEMORY_CHECK=warn",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert "MODEL_TYPE" not in ok.stderr, ok.stderr


def test_every_spelling_of_the_completion_length_is_named_with_the_one_ms_swift_uses():
    from entrypoint.preflight import values
    from tests.conftest import build_plan, facts_for, load_recipe

    pairs = ("recipe=countdown-1x4090", "RESPONSE_LENGTH=1024", "MAX_NEW_TOKENS=2048")
    plan = build_plan(*pairs, inventory="1x4090-driver535")
    (warned,) = [
        p for p in values.check(plan, facts_for(load_recipe(*pairs))) if p.where.startswith("RESPONSE_LENGTH")
    ]
    assert "up to 1024 tokens" in warned.message and "MAX_NEW_TOKENS=2048" in warned.message
    assert warned.fix == "set MAX_COMPLETION_LENGTH=1024 and remove RESPONSE_LENGTH and MAX_NEW_TOKENS"


# Registered names: what the lock's ms-swift (and transformers) look up by name -----------------------------


def _value_problems(*pairs: str, **changes):
    from entrypoint.preflight import values

    plan = build_plan("recipe=smoke", *pairs, **changes)
    return values.check(plan, plan.facts)


@pytest.mark.parametrize(
    ("pair", "message", "fix"),
    [
        (
            "LOSS_TYPE=sapo",
            "registers no GRPO loss type named 'sapo'",
            "LOSS_TYPE=<one of: bnpo, dr_grpo, grpo>",
        ),
        (
            "LOSS_TYPE=cispo",
            "registers no GRPO loss type named 'cispo'",
            "LOSS_TYPE=<one of: bnpo, dr_grpo, grpo>",
        ),
        ("TRAIN_TYPE=foo", "registers no train type named 'foo'", "TRAIN_TYPE=<one of: adalora,"),
        ("TRAIN_TYPE=qlora", "registers no train type named 'qlora'", "QUANT_METHOD=bnb and QUANT_BITS=4"),
        ("TEMPLATE=qwen9", "registers no template named 'qwen9'", "did you mean qwen?"),
        ("MULTI_TURN_SCHEDULER=tool_call_scheduler", "registers no multi-turn scheduler", "math_tip_trick"),
        ("REWARD_MODEL_PLUGIN=gen_rm", "registers no reward-model plugin", "did you mean genrm?"),
        (
            "REPORT_TO=tensorbaord",
            "is not an integration transformers 4.51.3 knows",
            "did you mean tensorboard?",
        ),
        ("MODEL_TYPE=qwen25", "registers no model type 'qwen25'", "did you mean qwen2_5"),
    ],
)
def test_a_name_the_lock_s_ms_swift_does_not_register_is_refused(pair, message, fix):
    """ms-swift 3.6.4 looks these up by name once the model has loaded (`Unknown loss type`, KeyError); the
    names are its registries' (entrypoint/data/swift_registry.json, regenerated by test_swift_schema.py)."""
    found = [p for p in _value_problems(pair) if message in p.message]
    assert len(found) == 1 and found[0].fatal and found[0].where.startswith(pair.split("=")[0]), found
    assert fix in found[0].fix, found[0]
    assert not [
        p
        for p in _value_problems(
            pair.split("=")[0]
            + "="
            + {
                "LOSS_TYPE": "bnpo",
                "TRAIN_TYPE": "lora",
                "TEMPLATE": "chatml",
                "MULTI_TURN_SCHEDULER": "math_tip_trick",
                "REWARD_MODEL_PLUGIN": "default",
                "REPORT_TO": "tensorboard",
                "MODEL_TYPE": "llama",
            }[pair.split("=")[0]]
        )
        if "register" in p.message or "knows" in p.message
    ]


def test_a_plugin_s_own_scheduler_is_a_registered_name(tmp_path):
    """The probe reports what the plugins add to ms-swift's registries; a scheduler a plugin registers is
    accepted, one it does not is refused naming both."""
    plugin = tmp_path / "my_scheduler_plugin.py"
    plugin.write_text(
        "from swift.plugin import multi_turns\nclass Tool:\n    pass\nmulti_turns['tool_call_scheduler'] = Tool\n"
    )
    from entrypoint.world import plugin_probe

    result, error = plugin_probe.run([str(plugin)])
    assert not error and "tool_call_scheduler" in result["registries"]["multi_turn_schedulers"]
    assert "math_tip_trick" in result["registries"]["multi_turn_schedulers"]
    ok = _value_problems(
        f"EXTERNAL_PLUGINS={plugin}",
        "MULTI_TURN_SCHEDULER=tool_call_scheduler",
        plugins=result,
        plugin_error="",
    )
    assert not [p for p in ok if "MULTI_TURN_SCHEDULER" in p.where]
    bad = _value_problems(
        f"EXTERNAL_PLUGINS={plugin}", "MULTI_TURN_SCHEDULER=tool_scheduler", plugins=result, plugin_error=""
    )
    assert [p for p in bad if "MULTI_TURN_SCHEDULER" in p.where and "tool_call_scheduler" in p.fix]


def test_a_model_whose_model_type_transformers_does_not_know_is_refused(tmp_path):
    """A config.json with model_type qwen3_vl (a newer family): transformers 4.51.3 cannot build it, after the
    start-up; refused in seconds. A config with its own code (auto_map) is left to it."""
    model = tmp_path / "Qwen3-VL-4B-Instruct"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"")
    config = {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "model_type": "qwen3_vl",
        "hidden_size": 2560,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "vocab_size": 151936,
    }
    (model / "config.json").write_text(json.dumps(config))
    err = refused(tmp_path, "recipe=smoke", f"MODEL={model}", "MODEL_TYPE=qwen2_5_vl", "MODEL_SOURCE=hub")
    assert "model_type 'qwen3_vl', which transformers 4.51.3 does not know" in err
    (model / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoConfig": "x.Config"}}))
    found = _value_problems(f"MODEL={model}", "MODEL_TYPE=qwen2_5_vl", "MODEL_SOURCE=hub")
    assert not [p for p in found if "does not know" in p.message]


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


# The plugin probe's time bound: a slow import is a warning, a failing one an error ------------------------


@pytest.mark.parametrize(
    ("load", "cpus", "seconds", "why"),
    [
        (0.5, 2, 120, "120 s"),
        (None, None, 120, "120 s"),
        (8.0, 2, 480, "120 s x 4.0 for a load average of 8.0 on 2 core(s)"),
        (40.0, 2, 600, "capped"),
    ],
)
def test_the_probe_waits_longer_on_a_busier_machine(load, cpus, seconds, why):
    from entrypoint.world import plugin_probe

    got, text = plugin_probe.probe_bound(load, cpus)
    assert got == seconds and why in text


def test_a_plugin_slower_to_import_than_the_bound_is_a_warning_not_a_refusal(tmp_path):
    """A fixed 120 s bound refused a valid plugin on a busy machine ("importing the reward plugins failed:
    ... timed out"); the import had not failed. Past the bound the run goes on, saying how long it waited."""
    from entrypoint.rewards import check as rewards_check
    from entrypoint.world import plugin_probe

    plugin = tmp_path / "my_slow_rewards.py"
    plugin.write_text(
        "import time\ntime.sleep(5)\nfrom swift.plugin import ORM, orms\n"
        "class Slow(ORM):\n    def __call__(self, completions, **kw):\n        return [1.0] * len(completions)\n"
        "orms['slow_reward'] = Slow\n"
    )
    result, error = plugin_probe.run([str(plugin)], bound=(1.0, "1 s (a test's bound)"))
    assert not error and result["slow"]["seconds"] >= 1 and result["slow"]["bound"] == "1 s (a test's bound)"
    infos, problems = rewards_check.check(
        [str(plugin)], ["slow_reward", "format"], result, error, lambda f: ""
    )
    assert [p.fatal for p in problems] == [False] and "had not finished after" in problems[0].message
    assert "the import did not fail" in problems[0].message and set(infos) == {"format"}
    # an import that fails is an error still, however fast
    plugin.write_text("raise RuntimeError('typo in my reward')\n")
    result, error = plugin_probe.run([str(plugin)], bound=(60.0, "60 s"))
    _, problems = rewards_check.check([str(plugin)], ["format"], result, error, lambda f: "")
    assert any(p.fatal and "import failed: RuntimeError: typo in my reward" in p.message for p in problems)


def test_an_inline_system_prompt_longer_than_a_file_name_is_a_prompt_not_a_crash(tmp_path):
    """chord.sh passes its several-line prompt inline: looking it up as a path raised ENAMETOOLONG."""
    proc = run_cli(
        "validate",
        "recipe=smoke",
        "SYSTEM=" + "You are a helpful assistant. " * 20,
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
