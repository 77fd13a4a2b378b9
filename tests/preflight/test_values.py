"""The recipe's values checked against each other and against what the lock's ms-swift, vLLM and
transformers accept (entrypoint/preflight/values.py), faults they would report only after the model
loaded: device_map with vLLM (case C07 of tests/cases.md), QLoRA settings, batch sizes that do not divide,
the completion length's spellings, the weight-sync path, model types and registered names. Through
`train` and `validate` (a refusal exits 2 and the fake `swift`, tests/fakes/swift, never ran) and on
values.check in process."""

from __future__ import annotations

import json

import pytest

from entrypoint.facts.facts import ModelConfig
from tests.conftest import FAKES, INVENTORIES, build_plan, clean_env, refused, run_cli

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

SERVER = FAKES / "server.env"


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
    """bitsandbytes is in the lock: QLoRA colocated with vLLM (LoRA, vLLM's V1 engine, nf4, an architecture
    vLLM 0.8.5 loads in 4-bit with LoRA) has no problem; a Python without it (an older venv or image) is told
    to re-sync from the lock, a local problem (`plan` warns, `validate` refuses)."""
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
    """vLLM 0.8.5's bitsandbytes loader needs packed_modules_mapping, its LoRA SupportsLoRA
    (facts/vllm_bnb.py): Qwen3-MoE has neither there; an architecture its registry does not list goes through
    its Transformers backend, unmeasured: a warning."""
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
    """New-user trial: "set PER_DEVICE_EVAL_BATCH_SIZE so that it x 1 is a multiple of 6" left the arithmetic
    to the reader; the fix names the nearest value that works."""
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


def test_reward_weights_count_the_reward_models_too(tmp_path):
    """ms-swift appends REWARD_MODEL entries to the reward functions before counting the weights."""
    plan = build_plan("recipe=smoke", "REWARD_MODEL=Qwen/Qwen2.5-0.5B-Instruct", "REWARD_WEIGHTS=1 1 0.5")
    assert not [p for p in plan.problems if p.fatal and "REWARD_WEIGHTS" in p.where]
    err = refused(tmp_path, "recipe=smoke", "REWARD_WEIGHTS=1 1 0.5")
    assert "3 weights for 2 reward function(s)" in err
    err = refused(tmp_path, "recipe=smoke", "REWARD_MODEL=a/b c/d", "REWARD_MODEL_PLUGIN=default")
    assert "1 plugin(s) for 2 reward model(s)" in err


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
        "qwen2_5 is registered in ms-swift 3.6.4 for Qwen2ForCausalLM, but MODEL's config.json says "
        "LlamaForCausalLM" in err
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
    names are its registries' (entrypoint/data/swift_registry.json, regenerated by
    tests/recipe/test_swift_schema.py)."""
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
        "from swift.plugin import multi_turns\nclass Tool:\n    pass\n"
        "multi_turns['tool_call_scheduler'] = Tool\n"
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


def test_a_recipes_qlora_turned_off_the_way_the_fix_says(tmp_path):
    """New-user trial: QUANT_METHOD=none was answered 'set QUANT_METHOD to a valid str'; the fix now names the
    choices and the empty value, and QUANT_METHOD= alone (the recipe's QUANT_BITS=4 kept) is warned about:
    ms-swift then loads the model unquantized while the argv still says --quant_bits 4."""
    err = refused(tmp_path, "recipe=countdown-14b-1x4090", "QUANT_METHOD=none")
    assert "'none' is not one of bnb, hqq" in err
    assert (
        "fix: set QUANT_METHOD to one of bnb, hqq, eetq, quanto, fp8, or leave it empty (QUANT_METHOD=)"
        in err
    )
    warned = _quant_problems("recipe=countdown-14b-1x4090", "QUANT_METHOD=", inventory="1x4090-driver535")
    assert [(p.fatal, p.fix) for p in warned] == [
        (False, "QUANT_BITS= (empty) too, or QUANT_METHOD=bnb for QLoRA")
    ]
    assert (
        _quant_problems(
            "recipe=countdown-14b-1x4090", "QUANT_METHOD=", "QUANT_BITS=", inventory="1x4090-driver535"
        )
        == []
    )
