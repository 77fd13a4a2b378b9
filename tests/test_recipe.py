"""Recipe layers, key kinds and refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from entrypoint.errors import BadInput
from entrypoint.recipe import load as recipe

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


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
    """Issue 26: RUN_NAME=../../etc/x, /abs and .. wrote the run outside OUTPUT_DIR."""
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
