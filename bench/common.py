"""Shared by the GPU benchmarks: run `python -m entrypoint train` with overrides and read its results."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "bench" / "recipes" / "random-qwen-hf.env"


@dataclasses.dataclass
class Run:
    """One entrypoint run in the background; its console goes to `log`, each line stamped with the
    wall-clock time it arrived (start-up phases are read from those stamps)."""

    name: str
    run_dir: Path
    log: Path
    proc: subprocess.Popen
    started: float
    _reader: threading.Thread

    def wait(self, timeout: float | None = None) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return rc


def start_train(
    out: Path,
    name: str,
    pairs: dict[str, str],
    log: Path,
    recipe: str | Path = RECIPE,
    env: dict | None = None,
) -> Run:
    """Start `python -m entrypoint train recipe=RECIPE OUTPUT_DIR=out RUN_NAME=name KEY=VALUE...`."""
    argv = [
        sys.executable,
        "-m",
        "entrypoint",
        "train",
        f"recipe={recipe}",
        f"OUTPUT_DIR={out}",
        f"RUN_NAME={name}",
    ]
    argv += [f"{k}={v}" for k, v in pairs.items()]
    started = time.time()
    proc = subprocess.Popen(  # noqa: S603 - argv list
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )

    def pump() -> None:
        with log.open("w", encoding="utf-8") as f:
            f.write(f"{started:.3f} $ {' '.join(argv)}\n")
            for raw in iter(proc.stdout.readline, b""):
                f.write(f"{time.time():.3f} {raw.decode('utf-8', 'replace').rstrip()}\n")
                f.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    return Run(name, out / name, log, proc, started, reader)


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "train" / "logging.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def step_rows(run_dir: Path) -> list[dict]:
    return [r for r in rows(run_dir) if "loss" in r and "global_step/max_steps" in r]


def events(run_dir: Path) -> list[dict]:
    """The trainer's phase timings (entrypoint/child/hooks/events.py, GRPO_RIG_EVENTS): logs/events.jsonl of a
    run directory, or events.jsonl beside the manifest as bench/'s archives keep them."""
    for path in (run_dir / "logs" / "events.jsonl", run_dir / "events.jsonl"):
        if path.exists():
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return []


def manifest(run_dir: Path) -> dict:
    path = run_dir / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else {}


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

    for pkg in ("torch", "vllm", "transformers", "ms-swift", "trl", "peft", "accelerate", "liger-kernel"):
        try:
            info[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            info[pkg] = None
    return info
