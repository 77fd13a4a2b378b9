"""Measure GRPO peak memory for Qwen2.5-0.5B/1.5B configurations, for the memory planner.

    python bench/calibrate_memory.py --models DIR --out DIR [--gpus 0,1] [--steps 2]

Each configuration is a real ms-swift 3.6.4 GRPO run through the entrypoint (random weights, HF
generation, generated countdown tasks, every completion at full length). Runs share the GPUs at the same
time: torch's max reserved memory (ms-swift's `memory(GiB)`) is per process, so sharing does not change
it. Writes memory-calibration.json: each configuration with its measured peak; bench/fit_memory.py fits
the planner's coefficients to it and tests/test_memory.py checks the planner against it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, environment, rows, start_train

sys.path.insert(0, str(ROOT))

# name: (model, TRAIN_TYPE, NUM_GENERATIONS = PER_DEVICE_TRAIN_BATCH_SIZE, MAX_COMPLETION_LENGTH, GRADIENT_CHECKPOINTING)
CONFIGS = {
    "q05-lora-g2-c256": ("q05", "lora", 2, 256, True),
    "q05-lora-g8-c256": ("q05", "lora", 8, 256, True),
    "q05-lora-g8-c1024": ("q05", "lora", 8, 1024, True),
    "q05-full-g8-c256": ("q05", "full", 8, 256, True),
    "q05-full-g2-c1024": ("q05", "full", 2, 1024, True),
    "q05-lora-g8-c256-nogc": ("q05", "lora", 8, 256, False),
    "q15-lora-g8-c256": ("q15", "lora", 8, 256, True),
    "q15-lora-g2-c1024": ("q15", "lora", 2, 1024, True),
    "q15-full-g2-c256": ("q15", "full", 2, 256, True),
    "q15-full-g8-c1024": ("q15", "full", 8, 1024, True),
    "q15-lora-g8-c1024-nogc": ("q15", "lora", 8, 1024, False),
}
MODEL_IDS = {"q05": "Qwen/Qwen2.5-0.5B-Instruct", "q15": "Qwen/Qwen2.5-1.5B-Instruct"}


def pairs_for(
    model: str, train_type: str, g: int, completion: int, gc: bool, models: Path, steps: int
) -> dict[str, str]:
    return {
        "MODEL": str(models / model),
        "TRAIN_TYPE": train_type,
        "NUM_GENERATIONS": str(g),
        "PER_DEVICE_TRAIN_BATCH_SIZE": str(g),
        "GRADIENT_ACCUMULATION_STEPS": "1",
        "MAX_COMPLETION_LENGTH": str(completion),
        "GRADIENT_CHECKPOINTING": "true" if gc else "false",
        "MAX_STEPS": str(steps),
        "LEARNING_RATE": "1e-6",
        "MEMORY_CHECK": "off",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gpus", default="0,1")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--only", default="", help="comma-separated configuration names")
    p.add_argument(
        "--deadline",
        type=float,
        default=0,
        help="seconds; then stop what still runs and keep the steps logged so far",
    )
    args = p.parse_args()
    gpus = args.gpus.split(",")
    names = [n for n in CONFIGS if not args.only or n in args.only.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    runs = args.out / "runs"
    procs = {}
    for i, name in enumerate(names):
        pairs = pairs_for(*CONFIGS[name], args.models, args.steps)
        procs[name] = start_train(
            runs, name, {**pairs, "TRAIN_GPUS": gpus[i % len(gpus)]}, args.out / f"{name}.log"
        )
        time.sleep(2)  # stagger model loads
    results = []
    end = time.monotonic() + args.deadline if args.deadline else None
    for name, proc in procs.items():
        try:
            rc = proc.wait(timeout=max(1.0, end - time.monotonic()) if end else None)
        except subprocess.TimeoutExpired:
            proc.terminate()  # the entrypoint stops its children; logged steps stay
            rc = proc.wait()
        model, train_type, g, completion, gc = CONFIGS[name]
        logged = [r["memory(GiB)"] for r in rows(runs / name) if "memory(GiB)" in r]
        plan = (
            json.loads((runs / name / "manifest.json").read_text())
            if (runs / name / "manifest.json").exists()
            else {}
        )
        results.append(
            {
                "name": name,
                "model": MODEL_IDS[model],
                "train_type": train_type,
                "num_generations": g,
                "per_device_train_batch_size": g,
                "max_completion_length": completion,
                "gradient_checkpointing": gc,
                "steps": args.steps,
                "returncode": rc,
                "measured_reserved_gib": max(logged) if logged else None,
                "status": plan.get("status"),
            }
        )
        print(json.dumps(results[-1]), flush=True)
    data = {
        "environment": environment(),
        "workload": "bench/recipes/random-qwen-hf.env (generated countdown tasks, HF generation)",
        "measurements": results,
    }
    (args.out / "memory-calibration.json").write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
