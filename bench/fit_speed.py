"""Fit the planner's step-time model (entrypoint/plan/speed.py) to the throughput benchmark's lever runs.

    python bench/fit_speed.py RUN_DIR [RUN_DIR ...]

Each RUN_DIR is a bench/countdown_throughput.py run (manifest.json, events.jsonl; the raw copies under
bench/'s archives, extracted, will do). From the trainer's phase events (entrypoint/child/hooks/events.py),
after the first 2 rounds, for runs without sleep mode on one allocator (--allocator): every micro-batch's
training seconds (a round's first micro-batch less the rollout it holds), their median per run. Per lever
(speed.LEVERS) a base and a per-1000-token slope, least squares with the slope >= 0. Writes
bench/calibration/speed-calibration.json (the points, each with the fitted prediction) and
entrypoint/data/speed_coefficients.json; prints each point.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import lsq_linear

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import events  # noqa: E402
from fit_memory import planned_run, run_measurement  # noqa: E402

from entrypoint.plan import speed  # noqa: E402

CALIBRATION = ROOT / "bench" / "calibration" / "speed-calibration.json"
COEFFICIENTS = ROOT / "entrypoint" / "data" / "speed_coefficients.json"
WARMUP_ROUNDS = 2


def micro_batch_seconds(events: list[dict]) -> list[float]:
    """Training seconds of each micro-batch after the warm-up rounds (the first of a round less its
    rollout)."""
    rounds: list[dict] = []
    for e in events:
        if e.get("phase") == "sync":
            rounds.append({"train": []})
        elif rounds and e.get("phase") == "rollout":
            rounds[-1]["rollout"] = e["seconds"]
        elif rounds and e.get("phase") == "train":
            rounds[-1]["train"].append(e["seconds"])
    out = []
    for r in rounds[WARMUP_ROUNDS:]:
        if r["train"] and "rollout" in r:
            out += [r["train"][0] - r["rollout"], *r["train"][1:]]
    return out


def point(run: Path, allocator: str = "") -> dict | None:
    """A run's median micro-batch seconds and what they were measured at; None for a run with sleep mode (it
    adds its own seconds) or another allocator than `allocator` (its PYTORCH_CUDA_ALLOC_CONF, "": torch's)."""
    m = run_measurement(run.resolve(), run.name)
    if m is None or m["sleep_level"] != 0 or m.get("pytorch_cuda_alloc_conf", "") != allocator:
        return None
    seconds = micro_batch_seconds(events(run))
    if len(seconds) < 2:
        return None
    w = planned_run(m).budget.workload
    return {
        "name": m["name"],
        "lever": speed.lever(w),
        "per_device_train_batch_size": w.per_device,
        "tokens_per_micro_batch": w.per_device * (w.prompt_tokens + w.completion_tokens),
        "micro_batches_measured": len(seconds),
        "measured_s": round(statistics.median(seconds), 3),
        "source": m["source"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", type=Path, nargs="+")
    p.add_argument(
        "--allocator",
        default="",
        metavar="CONF",
        help="fit the runs with this PYTORCH_CUDA_ALLOC_CONF (default: none, torch's own allocator)",
    )
    args = p.parse_args()
    points = [
        pt for pt in (point(r, args.allocator) for r in args.runs if (r / "events.jsonl").exists()) if pt
    ]
    coef = {}
    for name in speed.LEVERS:
        mine = [pt for pt in points if pt["lever"] == name]
        if not mine:
            continue
        a = np.array([[1.0, pt["tokens_per_micro_batch"] / 1000] for pt in mine])
        b = np.array([pt["measured_s"] for pt in mine])
        x = lsq_linear(a, b, bounds=([0, 0], [np.inf, np.inf])).x
        coef[name] = [round(float(x[0]), 4), round(float(x[1]), 4)]
    for pt in points:
        base, slope = coef[pt["lever"]]
        pt["fitted_s"] = round(base + slope * pt["tokens_per_micro_batch"] / 1000, 3)
        print(
            f"{pt['name']:62s} {pt['lever']:22s} mb {pt['per_device_train_batch_size']:2d}  "
            f"{pt['measured_s']:.3f} s measured, {pt['fitted_s']:.3f} fitted"
        )
    CALIBRATION.write_text(
        json.dumps(
            {
                "what": "median training seconds of one micro-batch after 2 warm-up rounds, per lever run "
                "(bench/countdown_throughput.py on the lent H200 capped at 24 GiB; bench/fit_speed.py)",
                "points": points,
            },
            indent=2,
        )
        + "\n"
    )
    COEFFICIENTS.write_text(
        json.dumps({"source": str(CALIBRATION.relative_to(ROOT)), "coefficients": coef}, indent=2) + "\n"
    )
    print(json.dumps(coef))


if __name__ == "__main__":
    main()
