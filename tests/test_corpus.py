"""A corpus of maintainer-written configurations: ms-swift v3.6.4's GRPO example scripts
(examples/train/grpo/{internal,external,multi_node,plugin,qwen2_5_omni}/*.sh and the commands of its GRPO
docs), translated into recipes (tests/corpus/recipes/, by `python -m entrypoint import`, paths pointed at
the user's copies in tests/corpus/data/), each with an inventory for its GPU count.

Every one must `validate` (exit 0) with the model's real config.json in the ModelScope cache, so the
memory planner runs on it (before, the 72B LoRA on 4 x 80 GB and the 32B full run on 8 x 80 GB were
refused once the config was found), and `plan`'s argv must carry every `swift rlhf` / `swift rollout` flag
the recipe sets, except those the entrypoint composes itself (COMPOSED says which and why).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from entrypoint import hubcache, keys, swift_schema
from entrypoint.recipe import read_env_file
from tests.conftest import INVENTORIES, ROOT, clean_env, run_cli

CORPUS = ROOT / "tests" / "corpus"
RECIPES = sorted((CORPUS / "recipes").glob("*.env"))

# recipe -> (inventory, extra KEY=VALUE words a migrating user adds: the node addresses the scripts leave
# as placeholders, the NODE_RANK that DLC sets)
SETUP = {
    "docs-grpo-code-training": ("8xA100-nvlink-ib", ()),
    "docs-grpo-countdown": ("4xA100-nvlink-ib", ()),
    "external-agent": ("8xA100-nvlink-ib", ()),
    "external-grpo-32b-full": ("8xA100-nvlink-ib", ("ROLLOUT_HOST=10.0.0.2",)),
    "external-grpo-7b": ("8xA100-nvlink-ib", ()),
    "external-vllm-multi-turn": ("8xA100-nvlink-ib", ()),
    "internal-pt": ("1xA100-80gb", ()),
    "internal-vllm-72b-4gpu": ("4xA100-nvlink-ib", ()),
    "internal-vllm-lora-qwenvl72b": ("8xA100-nvlink-ib", ()),
    "internal-vllm-multi-turn": ("8xA100-nvlink-ib", ()),
    "internal-vllm-vl7b": ("8xA100-nvlink-ib", ()),
    "multi-node-multi-node1": ("4xA100-nvlink-ib", ("RUN_NAME=math7b",)),
    "multi-node-multi-node2": ("4xA100-nvlink-ib", ("RUN_NAME=math7b", "MASTER_ADDR=10.0.0.1")),
    "multi-node-qwen2-5-32b-full": ("8xA100-nvlink-ib", ("ROLLOUT_HOST=10.0.0.2",)),
    # NUM_GENERATIONS 48 over 4 completions x 8 processes per node: 3 nodes (DLC sets WORLD_SIZE, RANK)
    "multi-node-train-dlc": (
        "8xA100-nvlink-ib",
        ("NNODES=3", "NODE_RANK=1", "MASTER_ADDR=10.0.0.1", "RUN_NAME=dlc"),
    ),
    "plugin-run-external-reward-func": ("1xA100-80gb", ()),
    "plugin-run-external-reward-model": ("8xA100-nvlink-ib", ()),
    "qwen2-5-omni-grpo": ("4xA100-nvlink-ib", ()),
}

# Flags the recipe may set that do not reach argv as written, and why.
COMPOSED = {
    "model": "an OFFLINE run passes the local snapshot (plan._offline_model); else as written",
    "dataset": "a generated dataset replaces it; else as written",
    "external_plugins": "the image's own reward plugin comes first (entrypoint/rewards/grpo_rig_rewards.py)",
    "system": "a prompt file is passed by its resolved path",
}


def _place_models(cache: Path) -> None:
    """Each corpus model's config.json where ModelScope keeps a download (hubcache.expected)."""
    for config in (CORPUS / "models").glob("*/config.json"):
        repo = config.parent.name.replace("--", "/", 1)
        target = hubcache.expected(repo, "models", False, {"MODELSCOPE_CACHE": str(cache)})
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(config, target / "config.json")


@pytest.fixture(scope="module")
def modelscope_cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("modelscope")
    _place_models(cache)
    return cache


def test_the_corpus_holds_at_least_fifteen_configurations():
    assert len(RECIPES) >= 15
    assert sorted(SETUP) == sorted(r.stem for r in RECIPES)
    for recipe in RECIPES:
        assert recipe.read_text().startswith("# Imported from "), recipe  # it says where it came from


def _run(recipe: Path, cache: Path, tmp_path: Path, command: str, *extra: str):
    inventory, words = SETUP[recipe.stem]
    env = clean_env(MODELSCOPE_CACHE=str(cache))
    return run_cli(command, f"recipe={recipe}", f"INVENTORY={INVENTORIES / (inventory + '.json')}",
                   f"OUTPUT_DIR={tmp_path}/out", *words, *extra, env=env, timeout=120)  # fmt: skip


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_validate_accepts_the_maintainers_configuration(recipe, modelscope_cache, tmp_path):
    proc = _run(recipe, modelscope_cache, tmp_path, "validate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(_run(recipe, modelscope_cache, tmp_path, "plan", "--json").stdout)
    if plan["layout"]["mode"] in ("colocate", "server", "hf"):
        assert "not estimated" not in proc.stdout, "the planner did not read the model's config.json"


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_plan_argv_carries_every_flag_the_recipe_sets(recipe, modelscope_cache, tmp_path):
    plan = json.loads(_run(recipe, modelscope_cache, tmp_path, "plan", "--json").stdout)
    argvs = {p["role"]: p["argv"] for p in plan["processes"]}
    values, _ = read_env_file(recipe, recipe.name)
    rlhf, rollout = swift_schema.load("rlhf"), swift_schema.load("rollout")
    for key, value in values.items():
        kind = keys.lookup(key).kind
        if kind == "env":  # ms-swift's environment knobs (MAX_PIXELS for the VL models) reach its environment
            assert argvs and all(
                p["env"].get(key) == value.value for p in plan["processes"] if p["role"] == "trainer"
            ), key
            continue
        if kind == "rollout":
            role, flag = "rollout", key.lower()[len("rollout_") :]
        elif kind == "trainer":
            role, flag = "trainer", key.lower()
        else:
            continue  # the entrypoint's own keys (layout, ports, nodes)
        if flag in COMPOSED:
            assert f"--{flag}" in argvs[role], (key, COMPOSED[flag])
            continue
        argv = argvs[role]
        assert f"--{flag}" in argv, f"{key} does not reach `{role}`'s argv"
        start = argv.index(f"--{flag}") + 1
        got = argv[start : start + len(value.value.split())]
        spec = (rollout if role == "rollout" else rlhf)[flag]
        assert got == spec.coerce(value.value), (key, got)


def test_validate_of_the_shipped_recipes_stays_fast():
    """Preflight is the seconds-long check before heavy work: every shipped recipe validates on the machine
    it is for (tcm-4x4090 with its sample data) within the refusal bound of tests/conftest.py (15 s, also with
    a training on the other core); the measured times are bench/validate_time.py's."""
    cases = (("smoke", None, ()), ("smoke-gpu", "1x4090-driver535", ()), ("smoke-server", "2x4090-driver535", ()),
             ("countdown-1x4090", "1x4090-driver535", ()),
             ("tcm-4x4090", "5x4090-driver535", (f"DATASET={ROOT / 'examples' / 'tcm' / 'sample.jsonl'}",)))  # fmt: skip
    assert sorted(c[0] for c in cases) == sorted(
        p.stem for p in (ROOT / "recipes").glob("*.env") if p.stem != "defaults"
    )
    for recipe, inventory, words in cases:
        extra = [f"INVENTORY={INVENTORIES / (inventory + '.json')}"] if inventory else []
        start = time.monotonic()
        proc = run_cli("validate", f"recipe={recipe}", *extra, *words, env=clean_env())
        elapsed = time.monotonic() - start
        assert proc.returncode == 0, (recipe, proc.stderr)
        assert elapsed < 15, f"validate recipe={recipe} took {elapsed:.1f} s"
