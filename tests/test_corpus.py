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
from pathlib import Path

import pytest

from entrypoint.recipe import keys, swift_schema
from entrypoint.recipe.load import read_env_file
from tests.conftest import INVENTORIES, RECIPES, ROOT, SETUP, clean_env, run_cli

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

# Flags the recipe may set that do not reach argv as written, and why.
COMPOSED = {
    "model": "an OFFLINE run passes the local snapshot (plan._offline_model); else as written",
    "dataset": "a generated dataset replaces it; else as written",
    "external_plugins": "the image's own reward plugin comes first (entrypoint/rewards/grpo_rig_rewards.py)",
    "system": "a prompt file is passed by its resolved path",
}


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


def test_every_shipped_recipe_validates_on_the_machine_it_is_for():
    """Every shipped recipe validates on the machine it is for (tcm-4x4090 with its sample data). How long
    that takes is a benchmark, not a test: bench/validate_time.py (target: under 5 s on 2 cores)."""
    cases = (("smoke", None, ()), ("smoke-gpu", "1x4090-driver535", ()), ("smoke-server", "2x4090-driver535", ()),
             ("countdown-1x4090", "1x4090-driver535", ()), ("countdown-7b-1x4090", "1x4090-driver535", ()),
             ("countdown-14b-1x4090", "1x4090-driver535", ()),
             ("arithmetic-gpu", "1x4090-driver535", ()),
             ("tcm-4x4090", "5x4090-driver535", (f"DATASET={ROOT / 'examples' / 'tcm' / 'sample.jsonl'}",)))  # fmt: skip
    assert sorted(c[0] for c in cases) == sorted(
        p.stem for p in (ROOT / "recipes").glob("*.env") if p.stem != "defaults"
    )
    for recipe, inventory, words in cases:
        extra = [f"INVENTORY={INVENTORIES / (inventory + '.json')}"] if inventory else []
        proc = run_cli("validate", f"recipe={recipe}", *extra, *words, env=clean_env())
        assert proc.returncode == 0, (recipe, proc.stderr)
        assert f"recipe {recipe}: valid" in proc.stdout, (recipe, proc.stdout)
