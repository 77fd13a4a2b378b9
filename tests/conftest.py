"""Shared fixtures: example inventories, a CLI runner, and one real smoke GRPO run per session."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from entrypoint.facts import facts as facts_mod
from entrypoint.facts import inventory
from entrypoint.recipe import load as recipe
from entrypoint.world import hardware, hubcache

ROOT = Path(__file__).resolve().parent.parent
INVENTORIES = ROOT / "examples" / "inventories"
FAKES = ROOT / "tests" / "fakes"
FAKE_SWIFT = FAKES / "swift"  # a stand-in for ms-swift's CLI that records every start (tests/fakes/swift)


def load_inventory(name: str) -> inventory.Inventory:
    return hardware.load(INVENTORIES / f"{name}.json")


# Tests open connections only to loopback: no command reads a hub model's config.json over the network
# (world/hubconfig.py; its own tests point HF_ENDPOINT at a loopback server and clear the switch).
os.environ["GRPO_RIG_HUB_CONFIG"] = "off"

# Under `pytest -n N` two real trainings can overlap; each torch would start one thread per core, and
# oversubscribed OpenMP threads slowed a CPU GRPO step from ~30 s to ~5 min (seen with -n 2 on 2 cores).
# The cores are shared out instead; a value the user exported wins.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT") and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = str(
        max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    )


def clean_env(**extra: str) -> dict[str, str]:
    """The process environment minus anything that is a recipe key (tests choose their own)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if recipe.classify(k) is None and not k.startswith(("NCCL_", "ROLLOUT_"))
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(extra)
    return env


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 900, cwd: Path = ROOT
) -> subprocess.CompletedProcess:
    """`python -m entrypoint ARGS` in a subprocess; returns the completed process (text output)."""
    return subprocess.run(
        [sys.executable, "-m", "entrypoint", *args],
        cwd=cwd,
        env=env if env is not None else clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def load_recipe(*pairs: str, environ: dict[str, str] | None = None) -> recipe.Recipe:
    return recipe.load(list(pairs), environ or {})


# The suite's one real CPU training (the smoke recipe, a checkpoint every step, shorter completions),
# shared by the smoke, lifecycle and evaluate tests: started, stopped by SIGTERM after its first complete
# checkpoint, then started again to completion with the merged export. Each real training costs minutes
# on CI's 2 cores, so the tests that need one share it.
SMOKE_STEPS = 3
SMOKE = [
    "recipe=smoke",
    f"MAX_STEPS={SMOKE_STEPS}",
    "SAVE_STEPS=1",
    "SAVE_TOTAL_LIMIT=1",
    "MAX_COMPLETION_LENGTH=32",
    "STOP_GRACE_SECONDS=10",
]
# Planted in the environment. (Not MODELSCOPE_API_TOKEN: ms-swift logs in to ModelScope with it while
# parsing its arguments, which needs the network.)
SECRETS = {
    "HF_TOKEN": "hf_plantedSECRETvalue123",
    "MY_SERVICE_API_KEY": "svcPLANTEDkey456789",
    "MY_DB_PASSWORD": "pw-PLANTED-789xyz",
}
CLI_SECRET = "cliPLANTEDsecret000"  # also given as a recipe key on the command line (REPORT_TO=none: unused)


def snapshot(root: Path) -> dict[str, tuple[str, float]]:
    """Every file's sha256 and mtime, but run.lock's: it names the last command that held the directory
    (runlock.py), which a rerun is."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "run.lock"
    }


@pytest.fixture(scope="session")
def lifecycle(tmp_path_factory):
    """Start a run, SIGTERM it after its first complete checkpoint, then start it again."""
    out = tmp_path_factory.mktemp("lifecycle")
    env = clean_env(**SECRETS)
    argv = [
        sys.executable,
        "-m",
        "entrypoint",
        "train",
        *SMOKE,
        f"OUTPUT_DIR={out}",
        "RUN_NAME=life",
        "WANDB_PROJECT=grpo-rig-test",
        f"WANDB_API_KEY={CLI_SECRET}",
    ]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )  # noqa: S603
    run_dir = out / "life"
    deadline = time.monotonic() + 600
    while not (run_dir / "train" / "checkpoint-1" / "trainer_state.json").exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.5)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    first_output, _ = proc.communicate(timeout=120)
    stopped = json.loads((run_dir / "manifest.json").read_text())
    orphans = [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    second = run_cli(
        "train", *SMOKE, f"OUTPUT_DIR={out}", "RUN_NAME=life", "EXPORT_MERGED=true", env=env, timeout=900
    )
    return {
        "out": out,
        "run_dir": run_dir,
        "first_rc": proc.returncode,
        "first_output": first_output,
        "stopped": stopped,
        "orphans": orphans,
        "second": second,
    }


@pytest.fixture(scope="session")
def smoke_run(lifecycle) -> Path:
    """The shared real smoke run, completed (see `lifecycle`); returns its run directory."""
    second = lifecycle["second"]
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    return lifecycle["run_dir"]


@contextlib.contextmanager
def tmpfs(path: Path, size: str, *options: str):
    """A small tmpfs mounted at `path` (CI runs as root), unmounted afterwards; skips where mounting is not
    allowed. `options`: more mount options (`ro`: a volume even root cannot write)."""
    path.mkdir(parents=True, exist_ok=True)
    opts = ",".join([f"size={size}", *options])
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def facts_for(r: recipe.Recipe, environ: dict | None = None, **changes):
    """host.gather's facts for recipe `r` (without the plugin probe, the slow part), with fixed ports and
    any field replaced by `changes`."""
    import dataclasses

    from entrypoint.world import host

    facts = host.gather(r, environ or {}, probe_plugins=False)
    return dataclasses.replace(
        facts, ports=facts_mod.Ports(rollout_first_free=8000, ephemeral=29999), **changes
    )


def build_plan(*pairs: str, inventory: str = "5x4090-driver535", environ: dict | None = None, **changes):
    """The plan `plan` would print for these KEY=VALUE words on an example inventory, with fixed ports
    (plan.build, the batch shape included)."""
    from entrypoint.plan import build as plan_mod

    r = load_recipe(*pairs, environ=environ)
    return plan_mod.build(r, load_inventory(inventory), facts_for(r, environ, **changes))


def draft_plan(*pairs: str, inventory: str = "5x4090-driver535"):
    """The plan's stages before the batch shape: what shape.choose sees (and its facts)."""
    from entrypoint.plan import build as plan_mod

    r = load_recipe(*pairs)
    facts = facts_for(r)
    return plan_mod.draft(r, load_inventory(inventory), facts), facts


def flag(argv: list[str], name: str) -> list[str]:
    """The tokens after --name in an argv, up to the next flag ([] when absent)."""
    if f"--{name}" not in argv:
        return []
    tokens = argv[argv.index(f"--{name}") + 1 :]
    return tokens[: next((i for i, t in enumerate(tokens) if t.startswith("--")), len(tokens))]


def refused(tmp_path: Path, *pairs: str, command: str = "train", extra_env: dict | None = None) -> str:
    """Run a command that must be refused as bad input: exit status 2 within seconds, no swift process
    started (the fake records every start), no manifest written. Returns its stderr."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir(exist_ok=True)
    env = clean_env(GRPO_RIG_SWIFT=str(FAKE_SWIFT), FAKE_PID_DIR=str(pid_dir), **(extra_env or {}))
    start = time.monotonic()
    defaults = [] if any(p.startswith("OUTPUT_DIR=") for p in pairs) else [f"OUTPUT_DIR={tmp_path}/out"]
    proc = run_cli(command, *defaults, *pairs, "RUN_NAME=r", env=env, timeout=60)
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert list(pid_dir.iterdir()) == [], "a swift process was started"
    assert not (tmp_path / "out" / "r" / "manifest.json").exists()
    assert elapsed < 15, f"refusal took {elapsed:.1f} s"
    assert "refused before any heavy work" in proc.stderr
    return proc.stderr


def refused_dataset(tmp_path: Path, dataset: Path | str, rewards: str, *pairs: str, **kw) -> str:
    """`refused` for the smoke recipe reading `dataset` instead of generating tasks."""
    return refused(
        tmp_path,
        "recipe=smoke",
        "DATASET_GENERATOR=",
        f"DATASET={dataset}",
        f"REWARD_FUNCS={rewards}",
        *pairs,
        **kw,
    )


def inventory_file(tmp_path: Path, name: str, **changes) -> Path:
    """An example inventory with some fields changed, written to tmp_path."""
    data = json.loads((INVENTORIES / f"{name}.json").read_text())
    data.update(changes)
    path = tmp_path / f"{name}-changed.json"
    path.write_text(json.dumps(data))
    return path


# Qwen/Qwen2.5-0.5B-Instruct's config.json as far as the planner reads it: a model directory or hub snapshot
# a test makes (tests/preflight/test_model_check.py, tests/world/test_hubcache.py)
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


# The corpus of maintainer-written configurations (tests/recipe/test_corpus.py, tests/recipe/test_import.py)
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
    # ms-swift's example asks for flash-attn, which the image's lock does not hold (preflight/packages.py)
    "internal-vllm-lora-qwenvl72b": ("8xA100-nvlink-ib", ("ATTN_IMPL=sdpa",)),
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


# Corpus recipes the lock cannot run at all, and the refusal that says why.
LOCK_CANNOT_RUN = {
    # ms-swift 3.6.4 loads it with transformers' Qwen2_5OmniForConditionalGeneration (swift/llm/model/model/
    # qwen.py:746), which transformers 4.51.3 does not have (it came in 4.52)
    "qwen2-5-omni-grpo": "model_type 'qwen2_5_omni', which transformers 4.51.3 does not know",
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
