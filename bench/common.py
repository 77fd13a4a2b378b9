"""Shared by the GPU benchmarks: run `python -m entrypoint train` with overrides and read its results."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "bench" / "recipes" / "random-qwen-hf.env"


def start_train(out: Path, name: str, pairs: dict[str, str], log: Path) -> subprocess.Popen:
    """Start one entrypoint run in the background; its console goes to `log`."""
    argv = [
        sys.executable,
        "-m",
        "entrypoint",
        "train",
        f"recipe={RECIPE}",
        f"OUTPUT_DIR={out}",
        f"RUN_NAME={name}",
    ]
    argv += [f"{k}={v}" for k, v in pairs.items()]
    return subprocess.Popen(argv, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)  # noqa: S603


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "train" / "logging.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def step_rows(run_dir: Path) -> list[dict]:
    return [r for r in rows(run_dir) if "loss" in r and "global_step/max_steps" in r]


def seconds(text: str) -> float:
    """ms-swift's elapsed_time ('1h 2m 3s', '1m 34s', '45s') in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    return float(sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([hms])", text)))


def environment() -> dict:
    """Date, GPU, driver and package versions for the report."""
    info: dict = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
    }
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        )
        info["gpus"] = [line.strip() for line in smi.stdout.splitlines()]
    except (OSError, subprocess.CalledProcessError):
        info["gpus"] = []
    import importlib.metadata as md

    for pkg in ("torch", "transformers", "ms-swift", "trl", "peft", "accelerate", "deepspeed"):
        try:
            info[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            info[pkg] = None
    info["generation"] = "HF generate inside the trainer (vLLM cannot be carried to the benchmark machine)"
    info["host_env"] = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES",) if os.environ.get(k)}
    return info
