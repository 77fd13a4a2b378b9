"""Fit the generation-round model (entrypoint/plan/speed.py, "generation round") to measured colocated runs.

    python bench/fit_generation.py RUN_DIR [RUN_DIR ...] [--warmup 2]

Each RUN_DIR is a bench/countdown_throughput.py run (its manifest.json and events.jsonl, under logs/ or
beside the manifest as bench/'s archives keep them) with vLLM colocated and without sleep mode. A point
is one run: its engine (speed.engine: the trainer's VLLM_USE_V1 and GRPO_RIG_VLLM_SCHEDULER_STEPS), its
measured rounds after the warm-up (countdown_throughput.phase_shares: the trainer's "generate" events, weight
sync included), and their median
over MAX_COMPLETION_LENGTH decode steps. An engine's coefficient is the median of its points' seconds per
decode step. Writes bench/calibration/generation-calibration.json (the points) and
entrypoint/data/generation_coefficients.json (the coefficients); tests/plan/test_speed.py checks every point.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from common import events  # noqa: E402
from countdown_throughput import phase_shares  # noqa: E402

from entrypoint.plan import speed  # noqa: E402

CALIBRATION = ROOT / "bench" / "calibration" / "generation-calibration.json"
COEFFICIENTS = ROOT / "entrypoint" / "data" / "generation_coefficients.json"


def point(run: Path, warmup: int = 2) -> dict | None:
    """One run's generation rounds and engine; None for a run without a colocated vLLM awake between rounds,
    or with fewer than two measured rounds."""
    manifest = json.loads((run / "manifest.json").read_text())
    values = {k: v["value"] for k, v in manifest.get("resolved_recipe", {}).items()}
    if (
        values.get("USE_VLLM") != "true"
        or values.get("ROLLOUT_GPUS")
        or values.get("SLEEP_LEVEL", "0") != "0"
    ):
        return None
    env = next((p.get("env", {}) for p in manifest.get("processes", []) if p.get("role") == "trainer"), {})
    steps = int(env.get("GRPO_RIG_VLLM_SCHEDULER_STEPS") or 1)
    name = speed.engine(steps, env.get("VLLM_USE_V1", "").strip() == "0")
    timing = phase_shares(events(run), warmup)  # the rounds the throughput report lists
    if timing is None or len(timing["generate_s"]) < 2:
        return None
    rounds = timing["generate_s"]
    decode_steps = int(values["MAX_COMPLETION_LENGTH"])
    median = statistics.median(rounds)
    return {
        "run": str(run.relative_to(ROOT)) if run.is_relative_to(ROOT) else str(run),
        "engine": name,
        "sequences": int(values.get("GENERATION_BATCH_SIZE") or 0)
        or int(values["PER_DEVICE_TRAIN_BATCH_SIZE"]) * int(values["GRADIENT_ACCUMULATION_STEPS"]),
        "decode_steps": decode_steps,
        "rounds_s": rounds,
        "round_s": round(median, 3),
        "per_decode_step_s": round(median / decode_steps, 5),
    }


def fit(points: list[dict]) -> dict[str, float]:
    """{engine: median seconds per decode step of its points}."""
    engines = sorted({p["engine"] for p in points})
    return {
        e: round(statistics.median(p["per_decode_step_s"] for p in points if p["engine"] == e), 5)
        for e in engines
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", type=Path, nargs="+")
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args()
    points = [pt for run in args.runs if (pt := point(run.resolve(), args.warmup))]
    coefficients = fit(points)
    CALIBRATION.write_text(
        json.dumps(
            {
                "what": "Generation rounds (weight sync included) of colocated ms-swift 3.6.4 GRPO runs on "
                "the lent H200 capped at 24 GiB, by vLLM engine, for entrypoint/plan/speed.py's "
                "generation_time",
                "workload": "bench/countdown_throughput.py: recipes/countdown-1x4090.env, random-weight "
                "Qwen2.5-0.5B with the real tokenizer, generated countdown tasks; every completion runs to "
                "MAX_COMPLETION_LENGTH",
                "points": points,
            },
            indent=2,
        )
        + "\n"
    )
    COEFFICIENTS.write_text(
        json.dumps({"source": str(CALIBRATION.relative_to(ROOT)), "coefficients": coefficients}, indent=2)
        + "\n"
    )
    for pt in points:
        print(
            f"{pt['engine']:>14}  {pt['round_s']:.3f} s  {pt['per_decode_step_s'] * 1000:.2f} ms/step  "
            f"{pt['run']}"
        )
    print("coefficients (s per decode step):", coefficients)


if __name__ == "__main__":
    main()
