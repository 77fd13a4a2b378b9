"""Shared fixtures: example inventories, a CLI runner, and one real smoke GRPO run per session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from entrypoint import hardware, recipe

ROOT = Path(__file__).resolve().parent.parent
INVENTORIES = ROOT / "examples" / "inventories"


def load_inventory(name: str) -> hardware.Inventory:
    return hardware.load(INVENTORIES / f"{name}.json")


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


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> Path:
    """One real smoke GRPO run (CPU, a few minutes); returns its run directory."""
    out = tmp_path_factory.mktemp("smoke-output")
    proc = run_cli("train", "recipe=smoke", f"OUTPUT_DIR={out}", "RUN_NAME=smoke-test", timeout=1200)
    (out / "console.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out / "smoke-test"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def build_plan(
    *pairs: str, inventory: str = "5x4090-driver535", environ: dict | None = None, shaped: bool = True
):
    """The plan `plan` would print for these KEY=VALUE words on an example inventory, with fixed ports;
    `shaped`: with the batch shape the planner chooses (entrypoint/shape.py)."""
    from entrypoint import plan as plan_mod
    from entrypoint import run

    def planned(r):
        return plan_mod.build(
            r,
            load_inventory(inventory),
            environ or {},
            choose_port=lambda start, host: 8000,
            ephemeral_port=lambda: 29999,
        )

    first = planned(load_recipe(*pairs, environ=environ))
    return run.shaped(first, environ or {}, planned) if shaped else first
