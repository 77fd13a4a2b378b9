"""The figures docs/benchmarks/one-card-*.json reports for a run directory, read from what the run wrote.

    python bench/one_card_summary.py RUN_DIR [RUN_DIR ...]

Per run, one JSON object: status and steps (manifest.json), the NVML peak of the run's processes against the
plan's prediction (manifest `gpu_memory_peak`, the run monitor's), seconds per step after the first (the
interval between step events, the first step's start-up left out) and the median seconds of each phase per
step (logs/events.jsonl, entrypoint/child/hooks/events.py: rollout, generate, sync; train summed over the
step's micro-batches, the first of which runs the rollout inside it, so train_outside_rollout is
train less rollout), and the start-up (manifest `startup_s`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common  # noqa: E402


def summary(run_dir: Path) -> dict:
    """What the one-card reports give of one run; keys are absent where the run wrote nothing of them."""
    m = common.manifest(run_dir)
    steps_done = (m.get("steps") or {}).get("completed")
    out: dict = {"run": run_dir.name, "status": m.get("status"), "steps": steps_done}
    peaks = m.get("gpu_memory_peak") or {}
    if peaks:
        gpu = peaks[sorted(peaks)[0]]
        out["peak_nvml_run_processes_gib"] = gpu.get("measured_gib")
        out["predicted_gib"] = gpu.get("predicted_gib")
        if gpu.get("measured_gib") and gpu.get("predicted_gib"):
            error = (gpu["predicted_gib"] - gpu["measured_gib"]) / gpu["measured_gib"] * 100
            out["prediction_error_pct"] = round(error, 1)
    per_step: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    ends: dict[int, float] = {}
    for e in common.events(run_dir):
        if e.get("phase") in ("rollout", "generate", "sync", "train") and "step" in e:
            per_step[e["step"]][e["phase"]] += e.get("seconds", 0.0)
            ends[e["step"]] = max(ends.get(e["step"], 0.0), e["t"])
    steps = sorted(ends)
    intervals = [ends[b] - ends[a] for a, b in zip(steps, steps[1:], strict=False)]
    if intervals:
        out["s_per_step"] = round(statistics.median(intervals), 1)
    if per_step:
        phases = {p for s in per_step.values() for p in s}
        out["s_per_step_phases"] = {
            p: round(statistics.median(s.get(p, 0.0) for s in per_step.values()), 2) for p in sorted(phases)
        }
        # a step's first micro-batch runs its generation round inside it (ms-swift's _prepare_inputs)
        if {"train", "rollout"} <= phases:
            out["s_per_step_phases"]["train_outside_rollout"] = round(
                statistics.median(s["train"] - s.get("rollout", 0.0) for s in per_step.values()), 2
            )
    startup = m.get("startup_s") or {}
    if "first step logged" in startup:
        out["command_to_first_step_s"] = startup["first step logged"]
    if startup:
        out["startup_s"] = startup
    if m.get("failure"):
        out["failure"] = m["failure"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for run in args.runs:
        print(json.dumps(summary(run), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
