"""Time `validate` on the tcm recipe with an inventory file (target: under 5 s on a 2-core machine).

    python bench/validate_time.py [--runs 5]

Prints the wall time of each run and the median, as JSON. `validate` runs every preflight check:
recipe keys and values, the reward plugins (imported in a throwaway process), the dataset (the shipped
invented sample), the memory plan and the environment.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    times = []
    with tempfile.TemporaryDirectory() as out:
        argv = [
            sys.executable,
            "-m",
            "entrypoint",
            "validate",
            "recipe=tcm-4x4090",
            "INVENTORY=examples/inventories/5x4090-driver535.json",
            "DATASET=examples/tcm/sample.jsonl",
            "PER_DEVICE_TRAIN_BATCH_SIZE=1",
            "GRADIENT_ACCUMULATION_STEPS=3",
            f"OUTPUT_DIR={out}",
        ]
        for _ in range(args.runs):
            start = time.perf_counter()
            proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)  # noqa: S603
            times.append(round(time.perf_counter() - start, 3))
            if proc.returncode != 0:
                sys.exit(f"validate failed:\n{proc.stdout}\n{proc.stderr}")
    print(
        json.dumps(
            {
                "command": "validate recipe=tcm-4x4090 (5 x 4090 inventory)",
                "seconds": times,
                "median_s": statistics.median(times),
                "target_s": 5.0,
            }
        )
    )


if __name__ == "__main__":
    main()
