"""The committed argument lists are those of the installed ms-swift (the lock's 3.6.4)."""

from __future__ import annotations

import json

import pytest

from entrypoint.recipe import swift_schema


@pytest.mark.slow  # imports ms-swift (~25 s)
@pytest.mark.parametrize("command", swift_schema.COMMANDS)
def test_committed_schema_matches_the_installed_ms_swift(command):
    committed = json.loads(swift_schema.path_for(command).read_text())
    assert swift_schema.generate(command) == committed, (
        f"regenerate: python -m entrypoint.recipe.swift_schema --write ({command})"
    )


def test_schema_knows_the_grpo_arguments_and_not_the_removed_ones():
    rlhf, rollout = swift_schema.load("rlhf"), swift_schema.load("rollout")
    assert (
        len(rlhf) == 400 and len(rollout) == 133
    )  # dataclasses.fields of RLHFArguments / RolloutArguments, init fields
    for name in ("num_generations", "vllm_mode", "vllm_server_host", "sleep_level", "move_model_batches"):
        assert name in rlhf
    for name in ("vllm_device", "num_infer_workers", "vllm_max_num_seqs", "tuner_type", "load_in_4bit"):
        assert name not in rlhf
    assert "gpu_memory_utilization" in rollout and "vllm_gpu_memory_utilization" not in rollout
    assert rlhf["reward_funcs"].nargs == "+" and rlhf["use_vllm"].type == "bool"
    assert rlhf["torch_dtype"].choices == ("bfloat16", "float16", "float32", "None")


@pytest.mark.cli
def test_committed_environment_scan_matches_the_installed_ms_swift():
    """The environment knobs a recipe may set are those the lock's ms-swift reads (AST scan, no import)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("swift")
    if spec is None or spec.origin is None:
        pytest.skip("ms-swift is not installed in this environment")
    scanned = swift_schema.scan_environment(Path(spec.origin).parent)
    committed = json.loads(swift_schema.ENV_FILE.read_text())
    assert scanned == committed, "regenerate: python -m entrypoint.recipe.swift_schema --write"
    # ms-swift's GRPO code reads these; a recipe that sets them must reach the trainer
    for name in ("MAX_PIXELS", "SWIFT_DEBUG", "NPROC_PER_NODE"):
        assert name in swift_schema.environment_variables()


@pytest.mark.slow  # imports ms-swift (~25 s)
def test_committed_model_types_match_the_installed_ms_swift():
    committed = json.loads(swift_schema.MODEL_TYPES_FILE.read_text())
    assert swift_schema.generate_model_types() == committed, (
        "regenerate: python -m entrypoint.recipe.swift_schema --write"
    )


@pytest.mark.parametrize(
    ("model", "registered"),
    [
        ("meta-llama/Llama-3.2-3B-Instruct", "llama3_2"),
        ("Qwen/Qwen3-4B", "qwen3"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2_5"),
        ("/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/0123abc", "qwen2_5"),
        ("/data/models/my-finetune", None),
    ],
)
def test_a_model_s_registered_type_is_found_by_its_name_as_ms_swift_does(model, registered):
    assert swift_schema.registered_type(model) == registered


@pytest.mark.slow  # imports ms-swift (~25 s)
def test_committed_registry_matches_the_installed_ms_swift():
    committed = json.loads(swift_schema.REGISTRY_FILE.read_text())
    assert swift_schema.generate_registry() == committed, (
        "regenerate: python -m entrypoint.recipe.swift_schema --write"
    )


def test_the_registry_holds_3_6_4_s_names_and_not_later_ones():
    registry = swift_schema.registry()
    assert registry["loss_types"] == ["bnpo", "dr_grpo", "grpo"]  # sapo, cispo: later versions
    assert {"lora", "full"} <= set(registry["train_types"]) and "qlora" not in registry["train_types"]
    assert registry["orms"]["accuracy"] == ["solution"] and registry["orms"]["format"] == []
    assert (
        "qwen2_5_vl" in registry["transformers_model_types"]
        and "qwen3_vl" not in registry["transformers_model_types"]
    )
    assert {"chatml", "qwen2_5", "llama3_2"} <= set(registry["templates"])
    from entrypoint.world import plugin_probe

    assert registry["orms"] == plugin_probe.BUILTIN_COLUMNS  # the probe's stub registers the same built-ins


@pytest.mark.slow  # imports ms-swift (~25 s) and runs its preprocessors
def test_committed_preprocessors_match_the_installed_ms_swift():
    committed = json.loads(swift_schema.PREPROCESSORS_FILE.read_text())
    assert swift_schema.generate_preprocessors() == committed, (
        "regenerate: python -m entrypoint.recipe.swift_schema --write"
    )


SHAPES = [
    ({"question": "q", "answer": "4"}, None),
    ({"question": "q", "answer": "4", "solution": "4"}, None),
    ({"query": "q", "response": "r", "answer": "4"}, None),
    ({"messages": [{"role": "user", "content": "q"}], "answer": "4", "nums": [1, 2]}, None),
    ({"conversations": [{"from": "human", "value": "q"}], "system": "s", "target": 5}, None),
    ({"instruction": "i", "input": "n", "output": "o", "nums": [1]}, None),
    ({"Question": "q", "Answer": "4", "target": 7}, None),
    ({"problem": "q", "solution": "4", "images": "a.png"}, None),
    ({"question": "q", "answer": "4"}, {"answer": "solution"}),
    ({"prompt": "q", "label": "x", "gold": "4"}, {"gold": "solution"}),
]


@pytest.mark.slow  # imports ms-swift (~25 s) and runs its loader's renaming and preprocessors
@pytest.mark.parametrize(("row", "mapping"), SHAPES)
def test_the_columns_the_rewards_receive_are_those_ms_swift_passes(row, mapping):
    """facts.datasets.as_swift_reads against ms-swift itself: a local file's columns renamed by --columns
    (DatasetLoader._load_dataset_path), then AutoPreprocessor, as GRPO loads it (remove_unused_columns
    off)."""
    from datasets import Dataset
    from swift.llm.dataset.preprocessor.core import AutoPreprocessor, RowPreprocessor

    from entrypoint.facts import datasets as facts_datasets

    data = Dataset.from_list([row, row])
    if mapping:
        data = RowPreprocessor.safe_rename_columns(data, mapping)
    out = AutoPreprocessor()(data)
    read = facts_datasets.as_swift_reads(list(row), mapping)
    assert set(out.features) == set(read.received()) | {"messages"}
    expected = [{k: v for k, v in r.items() if k != "messages"} for r in out]
    got = [{k: v for k, v in facts_datasets.as_swift_row(dict(row), read).items() if k != "messages"}] * 2
    assert [set(e) for e in expected] == [set(g) for g in got]
