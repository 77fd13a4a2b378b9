"""`python -m entrypoint import`: an ms-swift command line or script becomes a recipe.

The source documents' commands (tests/fixtures/seed-*.sh, copied from the two seed write-ups) import into
recipes that, once the problems `import` prints are fixed as their fixes say, validate and plan the same
swift arguments as the shipped recipes made from those seeds, except where the shipped recipe's comments
say why not. Every corpus recipe (ms-swift's own examples, tests/recipe/test_corpus.py) survives the round
trip: its planned commands, imported again, plan the same commands.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from entrypoint.recipe import importer, keys
from entrypoint.recipe.load import read_env_file
from tests.conftest import (
    INVENTORIES,
    LOCK_CANNOT_RUN,
    RECIPES,
    ROOT,
    SETUP,
    clean_env,
    inventory_file,
    run_cli,
)

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

FIXTURES = ROOT / "tests" / "fixtures"
IGNORED = {"output_dir", "run_name", "add_version", "logging_dir"}  # the run directory: per run


def import_to(tmp_path: Path, source: Path | str, *words: str, name: str = "imported.env"):
    out = tmp_path / name
    args = [str(source)] if isinstance(source, Path) else []
    proc = run_cli("import", *args, "-o", str(out), *words, env=clean_env())
    return proc, out


def swift_args(argv: list[str]) -> dict[str, list[str]]:
    """--flag -> tokens of a planned swift argv (program and subcommand left out)."""
    out: dict[str, list[str]] = {}
    name = None
    for token in argv[2:]:
        if token.startswith("--"):
            name = token[2:]
            out[name] = []
        elif name is not None:
            out[name].append(token)
    return {k: v for k, v in out.items() if k not in IGNORED}


def plan_json(recipe: Path, inventory: str, *words: str, env: dict | None = None) -> dict:
    proc = run_cli(
        "plan",
        "--json",
        f"recipe={recipe}",
        f"INVENTORY={INVENTORIES / (inventory + '.json')}",
        "RUN_NAME=r",
        *words,
        env=env or clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def edit(recipe: Path, **values: str) -> None:
    """What a user does with the printed fixes: replace those keys' lines."""
    lines = [ln for ln in recipe.read_text().splitlines() if ln.split("=", 1)[0] not in values]
    recipe.write_text("\n".join(lines + [f"{k}={shlex.quote(v)}" for k, v in values.items()]) + "\n")


def justified(recipe: Path, key: str) -> bool:
    """The shipped recipe says why it differs from the seed: a comment names the key, or the planner set
    it."""
    text = recipe.read_text()
    comments = " ".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    return key in comments


# The source documents ---------------------------------------------------------------------------------------


def test_seed_000_imports_to_the_tcm_recipe(tmp_path):
    proc, out = import_to(
        tmp_path, FIXTURES / "seed-000-tcm.sh", f"INVENTORY={INVENTORIES / '5x4090-driver535.json'}"
    )
    text = out.read_text()
    # the <= 3.5 layout becomes a rollout server on the last GPU; composed flags are dropped with a reason
    assert "TRAIN_GPUS=0,1,2,3" in text and "ROLLOUT_GPUS=4" in text
    assert "# --vllm_device auto: removed in 3.6" in text and "# --rlhf_type: dropped" in text
    assert "ROLLOUT_GPU_MEMORY_UTILIZATION=0.9" in text and "ROLLOUT_MAX_MODEL_LEN=4096" in text
    for composed in ("RLHF_TYPE=", "VLLM_DEVICE=", "OUTPUT_DIR=", "NPROC_PER_NODE=", "CUDA_VISIBLE_DEVICES="):
        assert f"\n{composed}" not in text
    assert "\nLORA_RANK=" not in text and "\nTORCH_DTYPE=" not in text  # equal to recipes/defaults.env
    # the seed's own mistakes come back as validate's problems, each with its fix
    assert proc.returncode == 2
    for where in (
        "DATASET /path/to/data",
        "EXTERNAL_PLUGINS examples/train/grpo/plugin/plugin.py",
        "REWARD_FUNCS TCMSDAccuracy",
        "SYSTEM",
    ):
        assert f"error: {where}" in proc.stderr, where
    dataset = tmp_path / "tcm.jsonl"
    row = {"messages": [{"role": "user", "content": "舌红苔黄，脉数。辨证？"}], "solution": "热证"}
    dataset.write_text("\n".join(json.dumps(row, ensure_ascii=False) for _ in range(64)) + "\n")
    edit(
        out,
        DATASET=str(dataset),
        EXTERNAL_PLUGINS="",
        REWARD_FUNCS="tcm_sd_accuracy format",
        SYSTEM="recipes/prompts/tcm.txt",
    )
    shipped = ROOT / "recipes" / "tcm-4x4090.env"
    mine = plan_json(out, "5x4090-driver535")
    ours = plan_json(shipped, "5x4090-driver535", f"DATASET={dataset}")
    compare(mine, ours, shipped, seed_flags=FIXTURES / "seed-000-tcm.sh")


def test_seed_001_imports_to_the_countdown_recipe(tmp_path):
    proc, out = import_to(
        tmp_path, FIXTURES / "seed-001-countdown.sh", f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}"
    )
    assert proc.returncode == 2
    assert "error: REWARD_FUNCS: no reward function" in proc.stderr
    assert "error: DATASET Countdown-Tasks-3to4#100: is neither an existing file nor a hub id" in proc.stderr
    assert "warning: VLLM_GPU_MEMORY_UTILIZATION: set, but USE_VLLM is false" in proc.stderr
    edit(out, DATASET="zouxuhong/Countdown-Tasks-3to4#100", REWARD_FUNCS="countdown format", USE_VLLM="true")
    shipped = ROOT / "recipes" / "countdown-1x4090.env"
    mine = plan_json(out, "1x4090-driver535")
    ours = plan_json(shipped, "1x4090-driver535")
    compare(mine, ours, shipped, seed_flags=FIXTURES / "seed-001-countdown.sh")


def compare(mine: dict, ours: dict, shipped: Path, seed_flags: Path) -> None:
    """Every swift argument the seed sets is planned alike, or the shipped recipe says why not."""
    seed = importer.parse(seed_flags.read_text())
    set_by_seed = {name for c in seed if c.sub == "rlhf" for name, _ in c.flags}
    roles = {p["role"]: swift_args(p["argv"]) for p in mine["processes"]}
    theirs = {p["role"]: swift_args(p["argv"]) for p in ours["processes"]}
    moved = {k.lower(): v[len("ROLLOUT_") :].lower() for k, v in keys.COLOCATE_ONLY.items() if v}
    planner = {c["key"] for c in ours["shape"]}  # the batch shape `plan` explains, with its reasons
    differences = []
    for flag in sorted(set_by_seed - IGNORED - set(importer.DROPPED) - {"vllm_device"}):
        role, name = ("rollout", moved[flag]) if flag in moved and "rollout" in roles else ("trainer", flag)
        a, b = roles[role].get(name), theirs[role].get(name)
        if a != b:
            differences.append(flag)
            key = ("ROLLOUT_" + name if role == "rollout" else name).upper()
            assert justified(shipped, key) or key in planner, (
                f"{key}: the seed's {a} became {b} in {shipped.name} with no comment saying why"
            )
    assert len(differences) < len(set_by_seed) / 2, differences  # most of the seed survives as it was


# Scripts and command lines ----------------------------------------------------------------------------------


def test_a_command_line_after_two_dashes(tmp_path):
    proc = run_cli(
        "import",
        "--",
        "CUDA_VISIBLE_DEVICES=0",
        "MAX_PIXELS=602112",
        "swift",
        "rlhf",
        "--rlhf_type",
        "grpo",
        "--model",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "--reward_funcs",
        "accuracy",
        "format",
        "--load_in_4bit",
        "true",
        "--lora_rank",
        "8",
        env=clean_env(),
    )
    assert 'REWARD_FUNCS="accuracy format"' in proc.stdout and "MAX_PIXELS=602112" in proc.stdout
    assert "QUANT_METHOD=bnb" in proc.stdout and "QUANT_BITS=4" in proc.stdout  # a renamed flag, translated
    assert "\nLOAD_IN_4BIT" not in proc.stdout and "\nLORA_RANK" not in proc.stdout
    assert proc.stdout.startswith("# Imported from the command line")


def test_shell_variables_exports_and_comments_are_read_as_a_shell_would(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "#!/bin/bash\n# a comment\nMODEL=Qwen/Qwen2.5-0.5B-Instruct\nexport NPROC_PER_NODE=2\n"
        "export CUDA_VISIBLE_DEVICES=0,1\nswift rlhf \\\n  --model $MODEL \\\n"
        "  --system 'You are \"kind\".' \\\n"
        "  --reward_funcs ${REWARD:-accuracy}\n"
    )
    proc = run_cli("import", str(script), env=clean_env())
    assert "MODEL=Qwen/Qwen2.5-0.5B-Instruct" in proc.stdout and "TRAIN_GPUS=0,1" in proc.stdout
    assert 'SYSTEM="You are \\"kind\\"."' in proc.stdout
    values, _ = read_env_file_text(proc.stdout, tmp_path)
    assert values["SYSTEM"] == 'You are "kind".'


def read_env_file_text(text: str, tmp_path: Path):
    path = tmp_path / "read.env"
    path.write_text(text)
    values, problems = read_env_file(path, "read.env")
    return {k: v.value for k, v in values.items()}, problems


def test_a_script_with_control_flow_is_refused_with_its_line(tmp_path):
    script = tmp_path / "loop.sh"
    script.write_text("set -e\nfor lr in 1e-6 5e-7; do\n  swift rlhf --model m --learning_rate $lr\ndone\n")
    proc = run_cli("import", str(script), env=clean_env())
    assert proc.returncode == 2
    assert "line 2: 'for lr in 1e-6 5e-7; do' is shell control flow" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_script_without_swift_rlhf_is_refused(tmp_path):
    script = tmp_path / "infer.sh"
    script.write_text("CUDA_VISIBLE_DEVICES=0 swift infer --model m\n")
    proc = run_cli("import", str(script), env=clean_env())
    assert proc.returncode == 2 and "no `swift rlhf` command" in proc.stderr


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_every_corpus_recipe_survives_the_round_trip(recipe, modelscope_cache, tmp_path):
    """ms-swift's examples, as planned: the plan's own `swift rollout` and `swift rlhf` commands (with their
    CUDA_VISIBLE_DEVICES / NPROC_PER_NODE / node variables) imported again plan the same swift arguments."""
    if recipe.stem in LOCK_CANNOT_RUN:
        pytest.skip(f"the lock cannot run it: {LOCK_CANNOT_RUN[recipe.stem]}")
    inventory, words = SETUP[recipe.stem]
    env = clean_env(MODELSCOPE_CACHE=str(modelscope_cache))
    before = plan_json(recipe, inventory, *words, env=env)
    script = []
    for process in before["processes"]:
        if process["role"] not in ("rollout", "trainer"):
            continue
        wanted = [
            k
            for k in process["env"]
            if k
            in ("CUDA_VISIBLE_DEVICES", "NPROC_PER_NODE", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
            or (keys.lookup(k) is not None and keys.lookup(k).kind == "env")
        ]
        prefix = " ".join(f"{k}={shlex.quote(process['env'][k])}" for k in wanted if process["env"][k])
        argv = process[
            "argv"
        ]  # `swift rlhf ...`, or for one process the worker file itself (python .../rlhf.py)
        script.append(
            f"{prefix} {shlex.join(['swift', *argv[1:]] if argv[1] in ('rlhf', 'rollout') else argv)}"
        )
    source = tmp_path / "planned.sh"
    source.write_text("\n".join(script) + "\n")
    out = tmp_path / "again.env"
    proc = run_cli(
        "import",
        str(source),
        "-o",
        str(out),
        f"INVENTORY={INVENTORIES / (inventory + '.json')}",
        *words,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    after = plan_json(out, inventory, *words, env=env)
    for role in ("rollout", "trainer"):
        a = [swift_args(p["argv"]) for p in before["processes"] if p["role"] == role]
        b = [swift_args(p["argv"]) for p in after["processes"] if p["role"] == role]
        assert a == b, role


def read(text: str) -> dict[str, str]:
    """KEY=VALUE lines of a recipe text (comments skipped)."""
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize("flag", ["--lora_target_modules", "--target_modules"])
def test_ms_swift_2_s_all_target_modules_become_all_linear(flag):
    """Users' trial: `--lora_target_modules ALL` became TARGET_MODULES=ALL, which PEFT refuses after the model
    loaded; ms-swift 3.6.4 spells every linear layer all-linear (swift/llm/train/tuner.py:97)."""
    base = "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --dataset d.jsonl"
    recipe = importer.to_recipe(f"{base} {flag} ALL")
    # all-linear is the defaults' value, so the line is left out
    assert (
        read(recipe).get("TARGET_MODULES", "all-linear") == "all-linear"
        and "\nTARGET_MODULES=ALL" not in recipe
    )
    assert (
        "TARGET_MODULES=all-linear: translated from" in recipe
        and "left out, as recipes/defaults.env has it" in recipe
    )
    assert (
        read(importer.to_recipe(f"{base} {flag} q_proj v_proj"))["TARGET_MODULES"].strip('"')
        == "q_proj v_proj"
    )


def test_max_new_tokens_becomes_the_completion_length_the_plan_reads():
    base = "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --dataset d.jsonl"
    recipe = importer.to_recipe(f"{base} --max_new_tokens 512")
    assert read(recipe)["MAX_COMPLETION_LENGTH"] == "512" and "MAX_NEW_TOKENS" not in read(recipe)
    assert "translated from --max_new_tokens 512" in recipe
    # ms-swift's order, not the line's: --max_new_tokens wins over --max_completion_length,
    # --response_length first
    both = read(importer.to_recipe(f"{base} --max_new_tokens 512 --max_completion_length 1024"))
    assert both["MAX_COMPLETION_LENGTH"] == "512"
    assert (
        read(importer.to_recipe(f"{base} --response_length 300 --max_new_tokens 512"))[
            "MAX_COMPLETION_LENGTH"
        ]
        == "300"
    )


def test_the_server_timeout_becomes_the_entrypoints_startup_budget():
    """--vllm_server_timeout: in server mode the entrypoint's own health wait (ROLLOUT_STARTUP_TIMEOUT, passed
    on to the trainer); in colocate nothing waits for a server. The key itself is refused in recipes, since
    the plan composes the flag (it used to be replaced without a word)."""
    base = "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --dataset d.jsonl --use_vllm true"
    server = read(
        importer.to_recipe(
            f"{base} --vllm_mode server --vllm_server_host 127.0.0.1 --vllm_server_timeout 600"
        )
    )
    assert server["ROLLOUT_STARTUP_TIMEOUT"] == "600" and "VLLM_SERVER_TIMEOUT" not in server
    colocate = importer.to_recipe(f"{base} --vllm_mode colocate --vllm_server_timeout 600")
    assert "VLLM_SERVER_TIMEOUT" not in read(colocate) and "--vllm_server_timeout 600: dropped" in colocate
    assert keys.lookup("VLLM_SERVER_TIMEOUT").kind == "managed"
    assert "ROLLOUT_STARTUP_TIMEOUT" in keys.MANAGED["VLLM_SERVER_TIMEOUT"]


def test_a_server_base_url_becomes_the_rollout_host_and_port_without_a_guessed_gpu():
    """Cases re-run: --vllm_server_base_url stayed a refused key and a local rollout GPU was guessed for a
    server on another node."""
    base = "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --dataset d.jsonl --use_vllm true"
    text = importer.to_recipe(
        f"CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 {base} --vllm_mode server --vllm_server_base_url http://10.0.0.5:8000"
    )
    values = read(text)
    assert values["ROLLOUT_HOST"] == "10.0.0.5" and values["ROLLOUT_PORT"] == "8000"
    assert "ROLLOUT_GPUS" not in values and "guessed" not in text and "VLLM_SERVER_BASE_URL" not in values
    assert values["TRAIN_GPUS"] == "0,1"


def test_a_local_server_without_gpus_named_gets_its_own_gpu_beside_the_trainer(tmp_path):
    """Cases re-run: a local --vllm_server_base_url with no CUDA_VISIBLE_DEVICES or NPROC_PER_NODE was written
    as TRAIN_GPUS=0 and ROLLOUT_GPUS=0, which validate then refused as an overlap."""
    base = "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --dataset d.jsonl --use_vllm true"
    text = importer.to_recipe(
        f"{base} --reward_funcs accuracy --vllm_mode server --vllm_server_base_url http://127.0.0.1:8000"
    )
    values = read(text)
    assert (values["TRAIN_GPUS"], values["ROLLOUT_GPUS"], values["ROLLOUT_PORT"]) == ("0", "1", "8000")
    assert "ROLLOUT_HOST" not in values and "guessed 1, the one after the trainers' (0)" in text
    assert "or ROLLOUT_GPUS for a server on this node" in text
    out = tmp_path / "server.env"
    out.write_text(text.replace("d.jsonl", "AI-MO/NuminaMath-TIR"))
    proc = run_cli(
        "validate",
        f"recipe={out}",
        f"INVENTORY={INVENTORIES / '2x4090-driver535.json'}",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert proc.returncode == 0 and "listed for both training and the rollout server" not in proc.stderr, (
        proc.stderr
    )


def test_vllm_device_auto_on_two_visible_gpus_becomes_one_trainer_and_a_rollout_server(tmp_path):
    """ms-swift <= 3.5's --vllm_device auto put vLLM on the GPU after the training processes: with
    CUDA_VISIBLE_DEVICES=0,1 and NPROC_PER_NODE unset, GPU 1, the trainer on GPU 0. The import promised a
    rollout server on its own GPU but wrote TRAIN_GPUS=0,1; where no GPU is left beside the
    trainers, the comment says vLLM is colocated."""
    base = "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --use_vllm true --vllm_device auto"
    two = importer.to_recipe(f"CUDA_VISIBLE_DEVICES=0,1 {base}")
    assert read(two)["TRAIN_GPUS"] == "0" and read(two)["ROLLOUT_GPUS"] == "1"
    assert "a `swift rollout` server on GPU 1, beside the trainers on GPU 0" in two
    four = read(importer.to_recipe(f"CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=2 {base}"))
    assert (four["TRAIN_GPUS"], four["ROLLOUT_GPUS"]) == ("0,1", "2,3")
    for crowded in (f"CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 {base}", f"CUDA_VISIBLE_DEVICES=0 {base}"):
        text = importer.to_recipe(crowded)
        assert "ROLLOUT_GPUS" not in read(text) and "vLLM runs colocated on the training GPUs" in text
        assert "on its own GPU" not in text


def test_a_two_gpu_import_gets_the_rollout_share_that_fits_its_card(tmp_path):
    """Left at ms-swift's 0.9, the rollout GPU's share drew the memory check's own warning, "lower
    ROLLOUT_GPU_MEMORY_UTILIZATION to 0.82": the planner chooses 0.82 on a 24 GiB card."""
    script = tmp_path / "two.sh"
    script.write_text(
        "CUDA_VISIBLE_DEVICES=0,1 swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct "
        "--dataset examples/tcm/sample.jsonl --reward_funcs format --use_vllm true --vllm_device auto\n"
    )
    proc, out = import_to(tmp_path, script, f"INVENTORY={INVENTORIES / '2x4090-driver535.json'}")
    assert proc.returncode == 0, proc.stderr
    assert "ROLLOUT_GPU_MEMORY_UTILIZATION" not in proc.stderr and "memory:" not in proc.stderr
    plan = plan_json(out, "2x4090-driver535")
    rollout = next(p for p in plan["processes"] if p["role"] == "rollout")
    assert swift_args(rollout["argv"])["gpu_memory_utilization"] == ["0.82"]
    assert any(c["key"] == "ROLLOUT_GPU_MEMORY_UTILIZATION" for c in plan["shape"])
    # a share the script sets is the user's: kept, and the warning names the value that fits
    script.write_text(
        script.read_text().replace(
            "--vllm_device auto", "--vllm_device auto --vllm_gpu_memory_utilization 0.9"
        )
    )
    proc, _ = import_to(tmp_path, script, f"INVENTORY={INVENTORIES / '2x4090-driver535.json'}")
    assert "lower ROLLOUT_GPU_MEMORY_UTILIZATION to 0.82 or less" in proc.stderr


def test_without_an_inventory_every_problem_comes_at_once(tmp_path):
    """`import` without INVENTORY on a machine with no GPU reported only the missing GPU, hiding a key typo
    and a missing dataset that `validate` showed once the machine was described."""
    script = tmp_path / "typo.sh"
    script.write_text(
        f"CUDA_VISIBLE_DEVICES=0 swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct "
        f"--dataset {tmp_path / 'missing.jsonl'} --reward_funcs format --use_vllm true "
        "--max_completion_lenght 256\n"
    )
    # this machine as NVML sees it without a GPU, so the test does not depend on the machine it runs on
    no_gpu = inventory_file(
        tmp_path,
        "1x4090-driver535",
        gpus=[],
        p2p=[],
        driver_version=None,
        nvml_error="NVML Shared Library Not Found",
    )
    proc, _ = import_to(tmp_path, script, f"INVENTORY={no_gpu}")
    assert proc.returncode == 2
    for problem in (
        "error: GPU: No GPU is visible",
        "error: MAX_COMPLETION_LENGHT",
        "did you mean MAX_COMPLETION_LENGTH",
        f"error: DATASET {tmp_path / 'missing.jsonl'}: file not found",
    ):
        assert problem in proc.stderr, proc.stderr
    assert "memory:" not in proc.stderr and "NCCL" not in proc.stderr  # nothing that needs the missing layout


def test_ms_swift_s_own_worker_lines_import_like_swift_rlhf():
    """The line ms-swift's CLI prints before starting its worker (`run sh: ...`), with or without torchrun,
    and the one-process command `plan` shows (plan._worker_directly), are `swift rlhf` commands."""
    rlhf = "/opt/venv/lib/python3.10/site-packages/swift/cli/rlhf.py"
    args = "--rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --dataset d.jsonl --lora_rank 16"
    direct = read(importer.to_recipe(f"CUDA_VISIBLE_DEVICES=0 /opt/venv/bin/python3 {rlhf} {args}"))
    launched = read(
        importer.to_recipe(
            f"CUDA_VISIBLE_DEVICES=0,1 /usr/bin/python3.10 -m torch.distributed.run --nproc_per_node 2 "
            f"--master_port 29501 {rlhf} {args}"
        )
    )
    assert (
        direct["LORA_RANK"] == launched["LORA_RANK"] == "16"
        and direct["MODEL"] == "Qwen/Qwen2.5-0.5B-Instruct"
    )
    assert direct["TRAIN_GPUS"] == "0" and launched["TRAIN_GPUS"] == "0,1"
    with pytest.raises(ValueError, match="no `swift rlhf` command"):  # not an interpreter's name
        importer.to_recipe(f"/opt/venv/bin/pythonista {rlhf} {args}")


def test_an_import_without_o_names_the_printed_recipe_not_its_temporary_file():
    """New-user trial: without -o, the problems pointed into a temporary file already deleted
    (/tmp/tmpXXXX/imported.env:15)."""
    proc = run_cli(
        "import",
        "--",
        "swift",
        "rlhf",
        "--rlhf_type",
        "grpo",
        "--model",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "--reward_funcs",
        "format",
        "--num_generatoins",
        "4",
        env=clean_env(),
    )
    assert proc.returncode == 2 and "NUM_GENERATOINS (the recipe above:" in proc.stderr, proc.stderr
    assert "imported.env" not in proc.stderr and "save it with -o FILE" in proc.stderr


def test_a_system_prompt_longer_than_a_file_name_imports_and_validates(tmp_path, capsys):
    """--system takes a prompt or a prompt file; a 399-character prompt ended import's validation in
    `OSError: File name too long` (the value was asked about as a path)."""
    import argparse

    from entrypoint.commands import import_
    from tests.plan.test_plan import R1_SYSTEM

    script = tmp_path / "run.sh"
    script.write_text(
        "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --dataset /data/x.jsonl "
        f"--reward_funcs accuracy --system {shlex.quote(R1_SYSTEM)}\n"
    )
    out = tmp_path / "imported.env"
    inventory = f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}"
    args = argparse.Namespace(words=[str(script), inventory], output=str(out))
    rc = import_.main(args, {})
    err = capsys.readouterr().err
    assert rc == 2 and "the imported recipe is not valid yet (1 error" in err, err
    assert "/data/x.jsonl" in err and "SYSTEM" not in err  # the dataset is not here; the prompt is no problem
    assert read_env_file(out, "imported.env")[0]["SYSTEM"].value == R1_SYSTEM


# Shell as bash reads it (recipe/shell.py) ------------------------------------------------------------------

BASE = "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --reward_funcs accuracy"


def test_a_comment_line_inside_a_continued_command_ends_it_as_bash_does():
    """`# --quant_method bnb \\` after the last `\\` is a comment: bash ends the command at that line, so
    QLoRA stays off; the lines after it are other commands, and the recipe says so. A `#` inside a word is
    not a comment (`#1000` samples the dataset)."""
    script = (
        "CUDA_VISIBLE_DEVICES=0 \\\nswift rlhf \\\n    --rlhf_type grpo \\\n"
        "    --model Qwen/Qwen2.5-0.5B-Instruct \\\n"
        "    --dataset AI-MO/NuminaMath-TIR#1000 \\\n    # --quant_method bnb \\\n    --quant_bits 4 \\\n"
        "    --lora_rank 32\n"
    )
    text = importer.to_recipe(script, defaults={})
    values = read(text)
    assert "QUANT_METHOD" not in values and "QUANT_BITS" not in values and "LORA_RANK" not in values
    assert values["DATASET"] == '"AI-MO/NuminaMath-TIR#1000"'
    assert "line 6: the comment '# --quant_method bnb \\\\' ends the `swift rlhf` command there" in text
    # a trailing comment on the command's last line is just a comment
    same = importer.to_recipe(f"{BASE} \\\n  --lora_rank 32  # more later\n", defaults={})
    assert read(same)["LORA_RANK"] == "32" and "ends the `swift rlhf` command" not in same


@pytest.mark.parametrize(
    "assignment",
    [
        "SYSTEM_PROMPT='\nYou are a calculator.\nUse the format: \"2*(3+4)\", \\(\\boxed{10}\\)\n'",
        'SYSTEM_PROMPT="\nYou are a calculator.\nUse the format: \\"2*(3+4)\\", \\(\\boxed{10}\\)\n"',
        'export SYSTEM_PROMPT="\nYou are a calculator.\nUse the format: \\"2*(3+4)\\", \\(\\boxed{10}\\)\n"',
    ],
    ids=["single-quoted", "double-quoted", "export"],
)
def test_a_prompt_quoted_over_several_lines_is_one_value(assignment, tmp_path):
    """ms-swift's examples (run_external_scheduler, chord, qlora) keep their system prompt in a variable
    quoted over several lines; the line-by-line reader failed with "No closing quotation"."""
    text = importer.to_recipe(
        f'{assignment}\n{BASE} \\\n    --system "$SYSTEM_PROMPT" \\\n    --lora_rank 32\n', defaults={}
    )
    values, problems = read_env_file_text(text, tmp_path)
    assert not problems and values["LORA_RANK"] == "32"
    assert values["SYSTEM"] == '\nYou are a calculator.\nUse the format: "2*(3+4)", \\(\\boxed{10}\\)\n'


def test_a_quoted_line_that_looks_like_a_comment_is_part_of_the_value(tmp_path):
    """qlora.sh's prompt ends with a line `#### 42"`: inside the quotes, not a comment."""
    script = f'SYSTEM_PROMPT="Answer after ####.\nFor example:\n#### 42"\n{BASE} --system "$SYSTEM_PROMPT"\n'
    values, _ = read_env_file_text(importer.to_recipe(script, defaults={}), tmp_path)
    assert values["SYSTEM"] == "Answer after ####.\nFor example:\n#### 42"


def test_single_quotes_keep_dollars_and_redirections_are_not_values():
    script = f"{BASE} --system 'costs $5' --lora_rank 16 > train.log 2>&1 &\nnohup {BASE} 2> err.log\n"
    values = read(importer.to_recipe(script, defaults={}))
    assert values["SYSTEM"] == '"costs $5"' and values["LORA_RANK"] == "16"
    assert "train.log" not in str(values) and "2>&1" not in str(values)


def test_an_unclosed_quote_names_its_line():
    with pytest.raises(ValueError, match=r"line 2: cannot read .*no closing quotation"):
        importer.to_recipe(f"X=1\n{BASE} --system 'never closed\n --lora_rank 8\n")


def test_ckpt_dir_is_the_model_as_ms_swift_3_6_4_takes_it():
    """v3.6.4:swift/llm/argument/base_args/base_args.py:33-43: --ckpt_dir becomes the model (over --model);
    as a recipe key it would reach ms-swift while the plan planned MODEL, so it is refused naming MODEL."""
    text = importer.to_recipe(f"{BASE} --ckpt_dir /data/ckpt/checkpoint-100", defaults={})
    assert read(text)["MODEL"] == "/data/ckpt/checkpoint-100" and "CKPT_DIR" not in read(text)
    assert "translated from --ckpt_dir /data/ckpt/checkpoint-100" in text and "ADAPTERS" in text
    found = keys.lookup("CKPT_DIR")
    assert found.kind == "renamed" and "MODEL=<the folder>" in found.renamed.fix


def test_the_rollout_s_own_plugins_are_kept_when_the_trainer_loads_none():
    """ms-swift's run_external_scheduler.sh loads its plugin (the multi-turn scheduler) only in the
    commented `swift rollout` command; the plan gives EXTERNAL_PLUGINS to both processes."""
    script = (
        "# CUDA_VISIBLE_DEVICES=0 \\\n# swift rollout \\\n#     --model Qwen/Qwen2.5-7B-Instruct \\\n"
        "#     --external_plugins examples/train/grpo/plugin/plugin.py \\\n"
        "#     --multi_turn_scheduler tool_call_scheduler \\\n#     --vllm_max_model_len 8192\n\n"
        "CUDA_VISIBLE_DEVICES=1,2 NPROC_PER_NODE=2 swift rlhf --rlhf_type grpo "
        "--model Qwen/Qwen2.5-7B-Instruct "
        "--reward_funcs accuracy --use_vllm true --vllm_mode server --vllm_server_host 127.0.0.1\n"
    )
    values = read(importer.to_recipe(script, defaults={}))
    assert values["EXTERNAL_PLUGINS"] == "examples/train/grpo/plugin/plugin.py"
    assert values["ROLLOUT_MULTI_TURN_SCHEDULER"] == "tool_call_scheduler"
    assert values["ROLLOUT_MAX_MODEL_LEN"] == "8192"  # the 3.7+ spelling, translated
    both = read(
        importer.to_recipe(
            script.replace("--reward_funcs", "--external_plugins mine.py --reward_funcs"), defaults={}
        )
    )
    assert both["EXTERNAL_PLUGINS"] == '"mine.py examples/train/grpo/plugin/plugin.py"'


def test_a_multi_node_command_imports_with_one_run_name_for_every_node():
    """ms-swift trains a multi-node command as written; its import was refused until RUN_NAME was set (each
    node would name the run by its own clock). The recipe gets its file's name, said in a note."""
    script = (
        "NNODES=2 NODE_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 NPROC_PER_NODE=4 \\\n"
        "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --dataset /data/x.jsonl "
        "--reward_funcs accuracy\n"
    )
    text = importer.to_recipe(script, defaults={}, target="recipes/grpo-2nodes.env")
    assert read(text)["RUN_NAME"] == "grpo-2nodes" and "the same name on every node" in text
    single = importer.to_recipe(script.replace("NNODES=2 ", ""), defaults={}, target="recipes/one.env")
    assert "RUN_NAME" not in read(single)
