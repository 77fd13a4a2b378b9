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

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from entrypoint.recipe import importer, keys, swift_schema
from entrypoint.recipe.load import read_env_file
from tests.conftest import INVENTORIES, LOCK_CANNOT_RUN, RECIPES, ROOT, SETUP, clean_env, run_cli

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
    return run_cli(
        command,
        f"recipe={recipe}",
        f"INVENTORY={INVENTORIES / (inventory + '.json')}",
        f"OUTPUT_DIR={tmp_path}/out",
        *words,
        *extra,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_validate_accepts_the_maintainers_configuration(recipe, modelscope_cache, tmp_path):
    proc = _run(recipe, modelscope_cache, tmp_path, "validate")
    if recipe.stem in LOCK_CANNOT_RUN:  # refused, by that one reason
        assert proc.returncode == 2 and "(1 error" in proc.stderr, proc.stderr
        assert LOCK_CANNOT_RUN[recipe.stem] in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(_run(recipe, modelscope_cache, tmp_path, "plan", "--json").stdout)
    if plan["layout"]["mode"] in ("colocate", "server", "hf"):
        assert "not estimated" not in proc.stdout, "the planner did not read the model's config.json"


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_plan_argv_carries_every_flag_the_recipe_sets(recipe, modelscope_cache, tmp_path):
    if recipe.stem in LOCK_CANNOT_RUN:
        pytest.skip(f"the lock cannot run it: {LOCK_CANNOT_RUN[recipe.stem]}")
    plan = json.loads(_run(recipe, modelscope_cache, tmp_path, "plan", "--json").stdout)
    argvs = {p["role"]: p["argv"] for p in plan["processes"]}
    values, _ = read_env_file(recipe, recipe.name)
    for word in SETUP[recipe.stem][1]:  # the test's own KEY=VALUE words override the recipe's
        key, value = word.split("=", 1)
        if key in values:
            values[key] = dataclasses.replace(values[key], value=value)
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
    cases = (
        ("smoke", None, ()),
        ("smoke-gpu", "1x4090-driver535", ()),
        ("smoke-server", "2x4090-driver535", ()),
        ("countdown-1x4090", "1x4090-driver535", ()),
        ("countdown-7b-1x4090", "1x4090-driver535", ()),
        ("countdown-14b-1x4090", "1x4090-driver535", ()),
        ("arithmetic-gpu", "1x4090-driver535", ()),
        ("tcm-4x4090", "5x4090-driver535", (f"DATASET={ROOT / 'examples' / 'tcm' / 'sample.jsonl'}",)),
    )
    assert sorted(c[0] for c in cases) == sorted(
        p.stem for p in (ROOT / "recipes").glob("*.env") if p.stem != "defaults"
    )
    for recipe, inventory, words in cases:
        extra = [f"INVENTORY={INVENTORIES / (inventory + '.json')}"] if inventory else []
        proc = run_cli("validate", f"recipe={recipe}", *extra, *words, env=clean_env())
        assert proc.returncode == 0, (recipe, proc.stderr)
        assert f"recipe {recipe}: valid" in proc.stdout, (recipe, proc.stdout)


# ms-swift's own scripts, read as bash reads them (tests/corpus/scripts/README.md says where each is from) ---

SCRIPTS_DIR = ROOT / "tests" / "corpus" / "scripts"
SCRIPTS = sorted(SCRIPTS_DIR.rglob("*.sh"))
RECORD = r"""
record() { { printf '%s\0' "$@"; printf '\1'; env -0; printf '\2'; } >> "$RECORD_TO"; }
swift() { record swift "$@"; }
torchrun() { record torchrun "$@"; }
nohup() { "$@"; }  # the external nohup would not see the functions
"""


def _under_bash(script: Path, tmp_path: Path) -> list[tuple[list[str], dict[str, str]]]:
    """(argv, environment the script set) of each `swift` / `torchrun` the script runs under bash. A variable
    the script reads but never sets (DLC's $WORLD_SIZE) is given its own name as value, as import keeps it."""
    out = tmp_path / "record"
    out.write_bytes(b"")
    text = script.read_text()
    unset = set(re.findall(r"\$\{?([A-Za-z_]\w*)", text)) - set(re.findall(r"([A-Za-z_]\w*)=", text))
    base = {"PATH": os.environ["PATH"], "RECORD_TO": str(out), **{n: f"${n}" for n in unset}}

    def run(body: str) -> list[tuple[list[str], dict[str, str]]]:
        out.write_bytes(b"")
        subprocess.run(["bash", "-c", RECORD + body, "bash", str(script)], env=base, check=True, cwd=tmp_path)
        calls = []
        for record in out.read_bytes().split(b"\2")[:-1]:
            argv, env = record.split(b"\1")
            pairs = (e.decode().split("=", 1) for e in env.split(b"\0") if e)
            calls.append(([a.decode() for a in argv.split(b"\0")[:-1]], dict(pairs)))
        return calls

    baseline = run("record probe")[0][1]  # what the environment holds before the script sets anything
    return [
        (argv, {k: v for k, v in env.items() if baseline.get(k) != v and k != "_"})
        for argv, env in run('source "$1"')
    ]


def _flags(words: list[str]) -> list[tuple[str, list[str]]]:
    flags: list[tuple[str, list[str]]] = []
    for word in words:
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            flags.append((name, [value] if eq else []))
        elif flags:
            flags[-1][1].append(word)
    return flags


def _bash_commands(calls) -> list[tuple[str, list, dict, dict]]:
    """(subcommand, flags, torchrun options, environment) of each swift rlhf / rollout bash ran."""
    out = []
    for argv, env in calls:
        torchrun: dict[str, str] = {}
        if argv[0] == "torchrun":
            script = next(i for i, w in enumerate(argv) if w.endswith(".py"))
            torchrun = {n: v[0] for n, v in _flags(argv[1:script])}
            argv = ["swift", Path(argv[script]).stem, *argv[script + 1 :]]
        if argv[1] in ("rlhf", "rollout"):
            out.append((argv[1], _flags(argv[2:]), torchrun, env))
    return out


def test_the_script_corpus_is_ms_swift_s_grpo_examples():
    assert (
        len(list((SCRIPTS_DIR / "v3.6.4").rglob("*.sh"))) == 18
    )  # every .sh under examples/train/grpo at v3.6.4
    assert len(list((SCRIPTS_DIR / "later").rglob("*.sh"))) == 3


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(s.relative_to(SCRIPTS_DIR)) for s in SCRIPTS])
def test_import_reads_each_script_as_bash_runs_it(script, tmp_path):
    """Every `swift rlhf` / `swift rollout` command bash runs, with its flags, values (prompts quoted over
    several lines included), torchrun options and environment, is the one `import` reads; the commented-out
    rollout commands are import's own addition (bash runs none)."""
    norm = lambda s: re.sub(r"\$\{(\w+)\}", r"$\1", s)  # noqa: E731 - ${X} and $X are one variable
    ran = [
        (sub, flags, {k: norm(v) for k, v in tr.items()}, env)
        for sub, flags, tr, env in _bash_commands(_under_bash(script, tmp_path))
    ]
    read = [
        (
            c.sub,
            [(n, [norm(v) for v in vals]) for n, vals in c.flags],
            {k: norm(v) for k, v in c.torchrun.items()},
            {k: norm(v) for k, v in c.env.items()},
        )
        for c in importer.parse(script.read_text())
        if not c.commented
    ]
    assert read == [
        (sub, [(n, [norm(v) for v in vals]) for n, vals in flags], tr, {k: norm(v) for k, v in env.items()})
        for sub, flags, tr, env in ran
    ]
    if script.parent.name == "later" or script.read_text().count("swift rlhf") == 0:
        return
    assert read, "bash runs a swift rlhf command here"


def _corpus_recipe_of(script: Path) -> Path | None:
    rel = script.relative_to(SCRIPTS_DIR / "v3.6.4").as_posix()
    return next((r for r in RECIPES if f"examples/train/grpo/{rel} " in r.read_text().splitlines()[0]), None)


# What the corpus recipes changed in the scripts' import: paths into ms-swift's checkout, pointed at the
# copies in tests/corpus/data.
REPOINTED = {
    "SYSTEM": "examples/train/grpo/prompt.txt",
    "EXTERNAL_PLUGINS": "examples/train/grpo/plugin/plugin.py",
}


@pytest.mark.parametrize(
    "script",
    sorted((SCRIPTS_DIR / "v3.6.4").rglob("*.sh")),
    ids=lambda s: s.relative_to(SCRIPTS_DIR / "v3.6.4").as_posix(),
)
def test_each_v3_6_4_script_imports_to_its_corpus_recipe(script, tmp_path):
    """The corpus recipes are the scripts' import as it is today, but for the paths into ms-swift's checkout;
    the two scripts without `swift rlhf` are refused as such."""
    recipe = _corpus_recipe_of(script)
    if recipe is None:
        with pytest.raises(ValueError, match="no `swift rlhf` command"):
            importer.to_recipe(script.read_text())
        assert script.name in ("full_lmdeploy.sh", "infer.sh")
        return
    fresh = tmp_path / "fresh.env"
    fresh.write_text(importer.to_recipe(script.read_text(), source=script.name))
    mine = {k: v.value for k, v in read_env_file(fresh, "fresh")[0].items()}
    theirs = {k: v.value for k, v in read_env_file(recipe, recipe.name)[0].items()}
    for key, original in REPOINTED.items():
        if mine.get(key) == original:
            mine[key] = theirs[key]
    assert mine == theirs


@pytest.mark.parametrize(
    ("script", "problems"),
    [
        # the scheduler is the missing plugin's (examples/train/grpo/plugin/plugin.py): not judged without it
        (
            "run_external_scheduler.sh",
            ["REPORT_TO=swanlab", "EXTERNAL_PLUGINS examples/train/grpo/plugin/plugin.py"],
        ),
        ("chord.sh", ["CHORD_SFT_DATASET", "REPORT_TO=swanlab"]),
        # QUANT_METHOD=bnb too where bitsandbytes cannot be imported (another change adds it to the lock)
        (
            "qlora.sh",
            ["ENABLE_THINKING", "VLLM_ENABLE_LORA", "EXTERNAL_PLUGINS"]
            + ([] if importlib.util.find_spec("bitsandbytes") else ["QUANT_METHOD=bnb"]),
        ),
    ],
)
def test_later_scripts_import_and_are_refused_for_what_3_6_4_lacks(script, problems, tmp_path):
    """The multi-line prompts import; what ms-swift 3.6.4 or this image lacks (later flags, swanlab,
    bitsandbytes, a plugin not here) is refused by validate, each by name."""
    out = tmp_path / "later.env"
    proc = run_cli(
        "import",
        str(SCRIPTS_DIR / "later" / script),
        "-o",
        str(out),
        f"OUTPUT_DIR={tmp_path}/out",
        f"INVENTORY={INVENTORIES / '8xA100-nvlink-ib.json'}",
        env=clean_env(),
        timeout=120,
    )
    assert out.exists() and "No closing quotation" not in proc.stderr and "cannot read" not in proc.stderr
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    for name in problems:
        assert f"error: {name}" in proc.stderr or f"error: ROLLOUT_{name}" in proc.stderr, (name, proc.stderr)
    values = {k: v.value for k, v in read_env_file(out, "later.env")[0].items()}
    assert values["SYSTEM"].count("\n") >= 2  # the prompt, whole
