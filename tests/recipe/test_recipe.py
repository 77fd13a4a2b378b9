"""Recipe layers, key kinds and refusals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from entrypoint.errors import BadInput
from entrypoint.recipe import load as recipe
from entrypoint.recipe import swift_schema
from entrypoint.recipe.args import RolloutArgs, TrainerArgs
from tests.conftest import ROOT

RECIPES = ROOT / "recipes"


def write(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / "defaults.env").write_text("LORA_RANK=8\nSEED=1\nTRAIN_TYPE=lora\n")
    path = tmp_path / f"{name}.env"
    path.write_text(text)
    return path


def test_precedence_defaults_recipe_environment_command_line(tmp_path):
    write(tmp_path, "r", "SEED=2\nLORA_RANK=16\nNUM_GENERATIONS=4\n")
    r = recipe.load(["recipe=r", "num_generations=8"], {"SEED": "3", "NUM_GENERATIONS": "6"}, tmp_path)
    assert r.trainer["lora_rank"] == ["16"] and r.source("LORA_RANK") == "recipes/r.env:2"
    assert r.trainer["seed"] == ["3"] and r.source("SEED") == "environment"
    assert r.trainer["num_generations"] == ["8"] and r.source("NUM_GENERATIONS") == "command line"
    assert r.trainer["train_type"] == ["lora"] and r.source("TRAIN_TYPE") == "recipes/defaults.env:3"


def test_environment_only_contributes_known_keys(tmp_path):
    write(tmp_path, "r", "MODEL=m\n")
    r = recipe.load(
        ["recipe=r"],
        {"COLUMNS": "80", "DEBUG": "1", "LOCAL_RANK": "3", "HOME": "/root", "PATH": "/bin"},
        tmp_path,
    )
    assert "columns" not in r.trainer and "debug" not in r.trainer and "local_rank" not in r.trainer


def test_every_shipped_recipe_loads():
    names = recipe.available_recipes()
    assert {"smoke", "countdown-1x4090", "tcm-4x4090"} <= set(names)
    assert (
        len(list(RECIPES.rglob("*.env"))) == len(names) + 1
    )  # + defaults.env; no recipe hides in a subfolder
    for name in names:
        r = recipe.load([f"recipe={name}"], {})
        assert r.trainer.get("model"), name


def test_types_and_choices_are_checked(tmp_path):
    write(
        tmp_path,
        "r",
        "NUM_GENERATIONS=eight\nTORCH_DTYPE=bf16\nUSE_VLLM=maybe\nTRAIN_GPUS=0\nROLLOUT_PORT=x\n",
    )
    with pytest.raises(BadInput) as exc:
        recipe.load(["recipe=r"], {}, tmp_path)
    text = str(exc.value)
    assert "NUM_GENERATIONS (recipes/r.env:1): 'eight' is not an integer" in text
    assert "TORCH_DTYPE" in text and "bfloat16" in text
    assert "USE_VLLM" in text and "not a boolean" in text
    assert "ROLLOUT_PORT" in text
    assert len(exc.value.problems) == 4  # every problem, not only the first


def test_values_are_normalised_for_the_swift_cli(tmp_path):
    write(
        tmp_path, "r", "USE_VLLM=Yes\nREWARD_FUNCS=countdown   format\nSYSTEM=You are a helpful assistant.\n"
    )
    r = recipe.load(["recipe=r"], {}, tmp_path)
    assert r.trainer["use_vllm"] == ["true"]
    assert r.trainer["reward_funcs"] == ["countdown", "format"]
    assert r.trainer["system"] == ["You are a helpful assistant."]  # a str, not a list: one token


def test_list_arguments_are_typed_tuples_in_the_recipes_order(tmp_path):
    write(
        tmp_path,
        "r",
        "MODEL=Qwen/Qwen2.5-0.5B-Instruct\nREWARD_FUNCS=countdown   format\nREWARD_WEIGHTS=1 0.5\n"
        "DATASET=data/a.jsonl data/b.jsonl#10\nEXTERNAL_PLUGINS=plugins/mine.py\nSOFT_CACHE_LENGTH=64\n",
    )
    a = recipe.load(["recipe=r", "REWARD_MODEL=org/rm-a org/rm-b"], {}, tmp_path).trainer_args
    assert a.model == "Qwen/Qwen2.5-0.5B-Instruct"
    assert a.reward_funcs == ("countdown", "format")
    assert a.reward_weights == (1.0, 0.5) and all(type(w) is float for w in a.reward_weights)
    assert a.dataset == ("data/a.jsonl", "data/b.jsonl#10")
    assert a.external_plugins == ("plugins/mine.py",)
    assert a.reward_model == ("org/rm-a", "org/rm-b")
    assert a.soft_cache_length == 64


def test_list_arguments_a_recipe_leaves_out_are_ms_swifts_defaults(tmp_path):
    """ms-swift's [] and None both read as no items; an empty value on the command line hands a list back
    to ms-swift (REWARD_WEIGHTS then weighs every reward 1.0 at run time)."""
    write(tmp_path, "r", "REWARD_FUNCS=countdown\nREWARD_WEIGHTS=2\n")
    a = recipe.load(["recipe=r", "REWARD_FUNCS=", "REWARD_WEIGHTS="], {}, tmp_path).trainer_args
    assert a.reward_funcs == () and a.reward_weights == ()
    assert a.dataset == a.val_dataset == a.external_plugins == ()
    assert a.reward_model == a.reward_model_plugin == ()
    assert a.model is None and a.soft_cache_length is None and a.device_map is None
    assert a.vllm_gpu_memory_utilization == 0.9  # ms-swift's declared default, typed


@pytest.mark.parametrize("cls, command", [(TrainerArgs, "rlhf"), (RolloutArgs, "rollout")])
def test_every_list_argument_is_typed_as_a_tuple_of_its_schema_type(cls, command):
    """A field is a tuple exactly where ms-swift takes a list (nargs "+"), of the item type it parses."""
    schema = swift_schema.load(command)
    for field in dataclasses.fields(cls):
        spec = schema[field.name]
        if spec.nargs == "+":
            assert field.type == f"tuple[{spec.type}, ...]", field.name
        else:
            assert not field.type.startswith("tuple"), field.name


def test_unknown_key_gets_did_you_mean(tmp_path):
    write(tmp_path, "r", "NUM_GENERATION=8\n")
    with pytest.raises(BadInput, match="did you mean NUM_GENERATIONS"):
        recipe.load(["recipe=r"], {}, tmp_path)


def test_abbreviation_is_refused(tmp_path):
    write(tmp_path, "r", "")
    with pytest.raises(BadInput) as exc:
        recipe.load(["recipe=r", "vllm_server_ho=1.2.3.4"], {}, tmp_path)
    text = str(exc.value)
    assert "VLLM_SERVER_HO" in text and "abbreviations are refused" in text and "VLLM_SERVER_HOST" in text


def test_malformed_line_is_reported_with_its_number(tmp_path):
    write(tmp_path, "r", "SEED=1\nthis line has no equals sign\nLORA_RANK=4\n")
    with pytest.raises(BadInput, match=r"recipes/r.env:2: not a KEY=VALUE line"):
        recipe.load(["recipe=r"], {}, tmp_path)


def test_flags_on_the_command_line_are_refused_with_the_key_form(tmp_path):
    write(tmp_path, "r", "")
    with pytest.raises(BadInput, match="write NUM_GENERATIONS=<value>"):
        recipe.load(["recipe=r", "--num_generations"], {}, tmp_path)


def test_missing_recipe_lists_shipped_ones():
    with pytest.raises(BadInput, match="smoke"):
        recipe.load(["recipe=nope"], {})
    with pytest.raises(BadInput, match="no recipe named"):
        recipe.load([], {})


def test_rollout_keys_map_to_swift_rollout_arguments(tmp_path):
    write(tmp_path, "r", "ROLLOUT_MAX_MODEL_LEN=4096\nROLLOUT_ENFORCE_EAGER=1\n")
    r = recipe.load(["recipe=r"], {}, tmp_path)
    assert r.rollout == {"max_model_len": ["4096"], "enforce_eager": ["true"]}


@pytest.mark.parametrize(
    ("key", "fix"),
    [
        ("VLLM_SERVER_HOST=1.2.3.4", "ROLLOUT_GPUS"),
        ("VLLM_SERVER_BASE_URL=http://x:8000", "a base URL alone does not enable server mode"),
        ("VLLM_MODE=server", "ROLLOUT_GPUS set -> server"),
        ("CUDA_VISIBLE_DEVICES=0", "TRAIN_GPUS"),
        ("NPROC_PER_NODE=4", "TRAIN_GPUS"),
        ("RESUME_FROM_CHECKPOINT=/x", "same RUN_NAME"),
        ("RLHF_TYPE=dpo", "always passes --rlhf_type grpo"),
    ],
)
def test_keys_the_entrypoint_composes_are_refused(tmp_path, key, fix):
    write(tmp_path, "r", key + "\n")
    with pytest.raises(BadInput, match="set by the entrypoint") as exc:
        recipe.load(["recipe=r"], {}, tmp_path)
    assert fix in str(exc.value)


def test_env_passthrough_keys(tmp_path):
    write(tmp_path, "r", "WANDB_PROJECT=tcm\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n")
    r = recipe.load(["recipe=r"], {}, tmp_path)
    assert r.env == {"WANDB_PROJECT": "tcm", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_ms_swift_environment_knobs_are_accepted_as_environment(tmp_path):
    """ms-swift reads knobs such as FPS_MAX_FRAMES (Qwen VL video) and SWIFT_DEBUG from the environment;
    a recipe that sets them passes them on instead of being refused as unknown (v3.6.4 examples set them
    as `VAR=... swift rlhf`). MAX_PIXELS is also an argument, but the variable is what qwen_vl_utils reads."""
    write(tmp_path, "r", "FPS_MAX_FRAMES=16\nVIDEO_MAX_PIXELS=50176\nSWIFT_DEBUG=1\nMAX_PIXELS=602112\n")
    r = recipe.load(["recipe=" + str(tmp_path / "r.env")], environ={})
    assert r.env == {
        "FPS_MAX_FRAMES": "16",
        "VIDEO_MAX_PIXELS": "50176",
        "SWIFT_DEBUG": "1",
        "MAX_PIXELS": "602112",
    }
    assert "max_pixels" not in r.trainer


@pytest.mark.cli
def test_keys_lists_the_values_the_schema_accepts():
    """`keys` says what each owned key takes, from the field that checks it: each listed value of
    MEMORY_CHECK validates, and an unlisted one (`refuse`, which the old text suggested) is refused."""
    from tests.conftest import clean_env, run_cli

    out = run_cli("keys", env=clean_env()).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("MEMORY_CHECK="))
    values = line.split("# ", 1)[1].split(":", 1)[0].split(" | ")
    assert values == ["error", "warn", "off"]
    for value in values:
        assert run_cli("validate", "recipe=smoke", f"MEMORY_CHECK={value}", env=clean_env()).returncode == 0
    assert run_cli("validate", "recipe=smoke", "MEMORY_CHECK=refuse", env=clean_env()).returncode == 2
    assert "DATASET_ROWS=256" in out and "integer >= 1" in out


@pytest.mark.parametrize(
    ("name", "said", "fix"),
    [
        ("../../etc/x", "is a path, not a name", "RUN_NAME=etc-x"),
        ("/abs", "is a path, not a name", "RUN_NAME=abs"),
        ("..", "the parent of OUTPUT_DIR", "RUN_NAME=my-run"),
        (".", "OUTPUT_DIR itself", "RUN_NAME=my-run"),
        ("a/b", "is a path, not a name", "RUN_NAME=a-b"),
        ("my run", "is not a run name", "RUN_NAME=my-run"),
        ("-x", "is not a run name", "RUN_NAME=x"),
        (".hidden", "is not a run name", "RUN_NAME=hidden"),
    ],
)
def test_a_run_name_that_is_not_one_path_component_is_refused_with_a_name_that_is(tmp_path, name, said, fix):
    """RUN_NAME=../../etc/x, /abs and .. once wrote the run outside OUTPUT_DIR."""
    write(tmp_path, "r", "MODEL=m\n")
    with pytest.raises(BadInput) as exc:
        recipe.load(["recipe=r", f"RUN_NAME={name}"], {}, tmp_path)
    (problem,) = exc.value.problems
    assert problem.where == "RUN_NAME (command line)"
    assert said in problem.message and "letters, digits, '.', '_' and '-'" in problem.message
    assert fix in problem.fix


@pytest.mark.parametrize("name", ["smoke-1", "run_2.v3", "A", "countdown-20261201-120000", "x" * 128])
def test_plain_run_names_are_accepted(tmp_path, name):
    write(tmp_path, "r", "MODEL=m\n")
    assert name == recipe.load(["recipe=r", f"RUN_NAME={name}"], {}, tmp_path).settings.RUN_NAME


def test_disable_hooks_takes_hook_names_and_refuses_others_naming_the_accepted_ones(tmp_path):
    write(tmp_path, "r", "MODEL=m\n")
    r = recipe.load(["recipe=r", "DISABLE_HOOKS= Top_K_First, lean"], {}, tmp_path)
    assert r.settings.disabled_hooks == {"top_k_first", "lean"}
    assert recipe.load(["recipe=r"], {}, tmp_path).settings.disabled_hooks == frozenset()
    with pytest.raises(BadInput) as exc:
        recipe.load(["recipe=r", "DISABLE_HOOKS=lean,top_k"], {}, tmp_path)
    (problem,) = exc.value.problems
    assert problem.where == "DISABLE_HOOKS (command line)" and "'top_k' is not a hook" in problem.message
    assert "emulate_vram, keep_pools, graphs_up_to_max_seqs, inspect_here, top_k_first" in problem.message
    assert problem.fix == "did you mean DISABLE_HOOKS=top_k_first?"


def test_a_hook_variable_given_as_a_key_is_refused_with_the_key_that_turns_the_hook_off(tmp_path):
    write(tmp_path, "r", "MODEL=m\n")
    with pytest.raises(BadInput) as exc:
        recipe.load(["recipe=r", "GRPO_RIG_VLLM_TOP_K_FIRST=0", "GRPO_RIG_EMULATE_VRAM_GB=24"], {}, tmp_path)
    fixes = {p.where: p.fix for p in exc.value.problems}
    assert (
        fixes["GRPO_RIG_VLLM_TOP_K_FIRST (command line)"]
        == "DISABLE_HOOKS=top_k_first turns it off in every child"
    )
    assert fixes["GRPO_RIG_EMULATE_VRAM_GB (command line)"].endswith("; EMULATE_VRAM_GB sets its value")


@pytest.mark.parametrize(
    ("pair", "said", "fix"),
    [
        (
            "STALL_TIMEOUT=1e-9",
            "1e-09 s is below the 60 s this setting takes: a GRPO step's rollout alone",
            "set STALL_TIMEOUT=0 for automatic, or a value >= 60 (the default: 0)",
        ),
        ("STALL_TIMEOUT=30", "30 s is below the 60 s", "set STALL_TIMEOUT=0 for automatic, or a value >= 60"),
        ("STALL_TIMEOUT=-5", "-5 s is below the 60 s", "set STALL_TIMEOUT=0 for automatic, or a value >= 60"),
        ("STALL_TIMEOUT=nan", "nan is not a number of seconds", "set STALL_TIMEOUT=0 for automatic"),
        (
            "GPU_MONITOR_INTERVAL=0",
            "0 s is below the 0.1 s",
            "set GPU_MONITOR_INTERVAL=a value >= 0.1 (the default: 2)",
        ),
        (
            "GPU_MONITOR_INTERVAL=1e-6",
            "1e-06 s is below the 0.1 s",
            "set GPU_MONITOR_INTERVAL=a value >= 0.1",
        ),
        (
            "NODE_CHECK_TIMEOUT=0.01",
            "0.01 s is below the 1 s",
            "set NODE_CHECK_TIMEOUT=a value >= 1 (the default: 300)",
        ),
        (
            "ROLLOUT_STARTUP_TIMEOUT=2",
            "2 s is below the 30 s this setting takes: vLLM loads the model",
            "set ROLLOUT_STARTUP_TIMEOUT=a value >= 30 (the default: 900)",
        ),
        (
            "STOP_GRACE_SECONDS=0",
            "0 s is below the 1 s",
            "set STOP_GRACE_SECONDS=a value >= 1 (the default: 20)",
        ),
        ("STOP_GRACE_SECONDS=-1", "-1 s is below the 1 s", "set STOP_GRACE_SECONDS=a value >= 1"),
    ],
)
def test_a_time_setting_below_its_least_sensible_value_is_refused_with_the_least(tmp_path, pair, said, fix):
    """STALL_TIMEOUT=1e-9 was accepted (a run ended as stalled at once); 0, negative and tiny intervals and
    timeouts are refused with the least value each takes and why."""
    write(tmp_path, "r", "MODEL=m\n")
    with pytest.raises(BadInput) as exc:
        recipe.load(["recipe=r", pair], {}, tmp_path)
    (problem,) = exc.value.problems
    assert problem.where == f"{pair.split('=')[0]} (command line)"
    assert problem.message.startswith(said), problem.render()
    assert problem.fix.startswith(fix), problem.render()


def test_time_settings_at_their_least_or_automatic_are_taken_and_a_simulated_trainer_may_go_below(tmp_path):
    """The least is a real run's; the tests' fake ms-swift (GRPO_RIG_SWIFT) steps in milliseconds."""
    write(tmp_path, "r", "MODEL=m\n")
    s = recipe.load(
        [
            "recipe=r",
            "STALL_TIMEOUT=60",
            "GPU_MONITOR_INTERVAL=0.1",
            "STOP_GRACE_SECONDS=1",
            "NODE_CHECK_TIMEOUT=1",
            "ROLLOUT_STARTUP_TIMEOUT=30",
        ],
        {},
        tmp_path,
    ).settings
    assert (s.STALL_TIMEOUT, s.GPU_MONITOR_INTERVAL, s.STOP_GRACE_SECONDS) == (60, 0.1, 1)
    assert recipe.load(["recipe=r", "STALL_TIMEOUT=0"], {}, tmp_path).settings.STALL_TIMEOUT == 0
    fake = {"GRPO_RIG_SWIFT": "tests/fakes/swift"}
    assert recipe.load(["recipe=r", "STALL_TIMEOUT=3"], fake, tmp_path).settings.STALL_TIMEOUT == 3
    with pytest.raises(BadInput):  # not below zero, even simulated
        recipe.load(["recipe=r", "STOP_GRACE_SECONDS=-1"], fake, tmp_path)


def test_each_value_carries_its_origin(tmp_path: Path):
    """Every value knows the layer that set it as an Origin, and its detail (the file and line); the text the
    manifest records is written from those."""
    (tmp_path / "defaults.env").write_text("TRAIN_TYPE=lora\n")
    (tmp_path / "r.env").write_text("LORA_RANK=16\n")
    r = recipe.load(["recipe=r", "NUM_GENERATIONS=8"], {"SEED": "3"}, tmp_path)
    assert r.values["TRAIN_TYPE"] == recipe.Value(
        "lora", recipe.Origin.DEFAULTS_FILE, "recipes/defaults.env:1"
    )
    assert r.values["LORA_RANK"] == recipe.Value("16", recipe.Origin.RECIPE_FILE, "recipes/r.env:1")
    assert (
        r.origin("SEED") is recipe.Origin.ENVIRONMENT
        and r.origin("NUM_GENERATIONS") is recipe.Origin.COMMAND_LINE
    )
    assert [r.layer(k) for k in ("TRAIN_TYPE", "LORA_RANK", "SEED", "NUM_GENERATIONS", "BETA")] == [
        0,
        1,
        2,
        3,
        -1,
    ]
    shaped = r.with_values([recipe.Choice("PER_DEVICE_TRAIN_BATCH_SIZE", 4, "the largest that fits")])
    assert shaped.resolved()["PER_DEVICE_TRAIN_BATCH_SIZE"] == {
        "value": "4",
        "source": "planner: the largest that fits",
    }
    assert (
        shaped.trainer_args.per_device_train_batch_size == 4
        and shaped.layer("PER_DEVICE_TRAIN_BATCH_SIZE") == 4
    )
    assert shaped.without_planner().values == r.values


def test_a_recipe_key_mistyped_or_renamed_in_the_environment_is_warned_about_not_dropped_silently():
    """Cases re-run: ROLLOUT_HSOT=10.0.0.5 in the environment (compose's `environment:`) planned a colocated
    run with no word; VLLM_DEVICE and LOAD_IN_4BIT were ignored the same way. Warned with the key meant, not
    refused: the environment holds other programs' variables, and those (PATH, vLLM's own VLLM_USE_V1, an
    unrelated NCCL_ or DEBUG) stay quiet."""
    environ = {
        "ROLLOUT_HSOT": "10.0.0.5",
        "VLLM_DEVICE": "cuda:1",
        "LOAD_IN_4BIT": "true",
        "PATH": "/usr/bin",
        "VLLM_USE_V1": "0",
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
        "DEBUG": "1",
        "MASTER_PORT": "29500",
    }
    r = recipe.load(["recipe=smoke"], environ=environ)
    warned = {p.where: p for p in r.problems if "(environment)" in p.where}
    assert sorted(warned) == [
        "LOAD_IN_4BIT (environment)",
        "ROLLOUT_HSOT (environment)",
        "VLLM_DEVICE (environment)",
    ]
    assert not any(p.fatal for p in warned.values())
    assert "did you mean ROLLOUT_HOST?" in warned["ROLLOUT_HSOT (environment)"].fix
    assert "QUANT_METHOD=bnb QUANT_BITS=4" in warned["LOAD_IN_4BIT (environment)"].fix
    assert "ROLLOUT_GPUS" in warned["VLLM_DEVICE (environment)"].fix
