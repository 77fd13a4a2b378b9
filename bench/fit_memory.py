"""Fit the memory planner's coefficients to measured GRPO peaks.

    python bench/fit_memory.py [--colocate colocate-measurements.json] [docs/benchmarks/memory-calibration.json]

Two fits, each minimising the largest relative error (the planner's promise is a bound on every
configuration, and allocator caching makes single measurements noisy):
- the training side (activations, logits, overhead, constant) to the `measurements` (torch's max reserved,
  HF generation: bench/calibrate_memory.py of 2026-11-29);
- the vLLM colocate side (vllm_util_scale, vllm_train_scale, vllm_constant_gib, vllm_sleep_gib) to the
  `colocate_measurements` (NVML's per-process peak of vLLM colocate runs), with the training side fixed.
`--colocate FILE` first replaces the colocate measurements with those of FILE (bench/calibrate_memory.py's
output, plus any other colocate runs in it). Writes entrypoint/data/memory_coefficients.json and prints each
configuration's prediction against its measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares, minimize

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from entrypoint import (  # noqa: E402
    budget,  # noqa: E402
    host,
    inventory,
    memory,
    plan,
    recipe,
)

RECIPE = ROOT / "bench" / "recipes" / "random-qwen-hf.env"
CALIBRATION = ROOT / "docs" / "benchmarks" / "memory-calibration.json"
COEFFICIENTS = ROOT / "entrypoint" / "data" / "memory_coefficients.json"

# Fitted: what the measurements can tell apart. act_inter and gc_layer_input keep their physical defaults
# (DEFAULT_COEFFICIENTS in entrypoint/memory.py).
FITTED = ("act_hidden", "logit_bytes", "overhead", "constant_gib")
BOUNDS = ([0, 2, 1.0, 0.0], [80, 40, 1.6, 3.0])
COLOCATE_FITTED = ("vllm_util_scale", "vllm_train_scale", "vllm_constant_gib", "vllm_sleep_gib")
COLOCATE_BOUNDS = ([0.8, 0.5, -8.0, -3.0], [1.5, 3.0, 8.0, 3.0])


def h200s(world: int) -> inventory.Inventory:
    gpus = [
        inventory.GPU(
            index=i,
            uuid=f"GPU-{i}",
            name="NVIDIA H200",
            pci_bus_id=str(i),
            memory_total_gib=140.4,
            memory_free_gib=139.8,
            compute_capability=(9, 0),
        )  # fmt: skip
        for i in range(world)
    ]
    return inventory.Inventory(source="calibration", driver_version="580.159.04", gpus=gpus)


def _planned(recipe_name: str | Path, pairs: list[str], world: int) -> plan.Plan:
    r = recipe.load([f"recipe={recipe_name}", *pairs], {})
    return plan.build(r, h200s(world), host.gather(r, {}, probe_plugins=False))


def workload(m: dict) -> memory.Workload:
    """The planner's own Workload for a measured HF-generation configuration: the benchmark recipe with
    the measurement's values, planned on H200s (the same path `plan` takes)."""
    world = m.get("world", 1)
    pairs = [
        f"MODEL={m['model']}",
        f"TRAIN_TYPE={m['train_type']}",
        f"NUM_GENERATIONS={m['num_generations']}",
        f"PER_DEVICE_TRAIN_BATCH_SIZE={m['per_device_train_batch_size']}",
        f"GRADIENT_ACCUMULATION_STEPS={m.get('gradient_accumulation_steps', 1)}",
        f"MAX_COMPLETION_LENGTH={m['max_completion_length']}",
        f"GRADIENT_CHECKPOINTING={str(m['gradient_checkpointing']).lower()}",
        f"DEEPSPEED={m.get('deepspeed', '')}",
        f"TRAIN_GPUS={','.join(str(i) for i in range(world))}",
    ]
    planned = _planned(RECIPE, pairs, world)
    return planned.budget.workload


def colocate_prediction(m: dict, coef: dict | None = None) -> float:
    """The planner's card-level peak (GiB) for a measured colocate configuration: countdown-1x4090 with
    the measurement's explicit shape, on an H200 capped at the measurement's card size."""
    pairs = [
        f"MODEL={m['model']}",
        "DATASET_GENERATOR=countdown",
        f"EMULATE_VRAM_GB={m['emulate_vram_gib']}",
        f"PER_DEVICE_TRAIN_BATCH_SIZE={m['per_device_train_batch_size']}",
        f"GRADIENT_ACCUMULATION_STEPS={m['gradient_accumulation_steps']}",
        "GENERATION_BATCH_SIZE=",
        f"NUM_GENERATIONS={m['num_generations']}",
        f"MAX_COMPLETION_LENGTH={m['max_completion_length']}",
        f"VLLM_GPU_MEMORY_UTILIZATION={m['vllm_gpu_memory_utilization']}",
        f"SLEEP_LEVEL={m['sleep_level']}",
    ]
    planned = _planned("countdown-1x4090", pairs, 1)
    b = planned.budget
    (gpu0,) = budget.per_gpu(planned.layout, b.card, b.workload, b.colocate, 0.9, coef=coef)
    return gpu0.peak_gib


def _fit(residuals, start, bounds) -> np.ndarray:
    x = least_squares(residuals, start, bounds=bounds).x
    # a high p-norm of the relative errors: smooth, and close to minimising the largest one
    return minimize(
        lambda x: sum((r / 0.1) ** 8 for r in residuals(x)),
        x,
        method="L-BFGS-B",
        bounds=list(zip(*bounds, strict=True)),
    ).x


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("calibration", nargs="?", type=Path, default=CALIBRATION)
    p.add_argument("--colocate", type=Path, help="colocate-measurements.json to merge in first")
    args = p.parse_args()
    data = json.loads(args.calibration.read_text())
    if args.colocate:
        new = json.loads(args.colocate.read_text())
        data["colocate_environment"] = new["environment"]
        data["colocate_workload"] = new["workload"]
        data["colocate_measurements"] = new["measurements"]
        args.calibration.write_text(json.dumps(data, indent=2) + "\n")
    base = dict(memory.DEFAULT_COEFFICIENTS)

    points = [(m, workload(m)) for m in data["measurements"] if m.get("measured_reserved_gib")]

    def residuals(x):
        coef = {**base, **dict(zip(FITTED, x, strict=True))}
        return [memory.estimate_training(w, coef).peak / m["measured_reserved_gib"] - 1 for m, w in points]

    x = _fit(residuals, [base[k] for k in FITTED], BOUNDS)
    coef = {**base, **{k: round(float(v), 4) for k, v in zip(FITTED, x, strict=True)}}
    errors = residuals([coef[k] for k in FITTED])
    for (m, _), e in zip(points, errors, strict=True):
        print(f"{m['name']:44s} reserved {m['measured_reserved_gib']:6.2f} GiB  error {e:+.1%}")
    out = {
        "source": str(args.calibration.relative_to(ROOT)),
        "max_abs_error": round(float(np.max(np.abs(errors))), 4),
    }

    colocated = [m for m in data.get("colocate_measurements", []) if m.get("measured_nvml_gib")]
    if len(colocated) >= len(COLOCATE_FITTED):

        def colocate_residuals(x):
            c = {**coef, **dict(zip(COLOCATE_FITTED, x, strict=True))}
            return [colocate_prediction(m, c) / m["measured_nvml_gib"] - 1 for m in colocated]

        x = _fit(colocate_residuals, [coef[k] for k in COLOCATE_FITTED], COLOCATE_BOUNDS)
        coef.update({k: round(float(v), 4) for k, v in zip(COLOCATE_FITTED, x, strict=True)})
        errors = colocate_residuals([coef[k] for k in COLOCATE_FITTED])
        for m, e in zip(colocated, errors, strict=True):
            print(f"{m['name']:44s} NVML {m['measured_nvml_gib']:6.2f} GiB  error {e:+.1%}")
        out["colocate_max_abs_error"] = round(float(np.max(np.abs(errors))), 4)
    else:
        print(
            f"colocate: {len(colocated)} measurements, fewer than the {len(COLOCATE_FITTED)} needed; kept the defaults"
        )
    out["coefficients"] = {k: coef[k] for k in (*FITTED, *COLOCATE_FITTED)}
    COEFFICIENTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))
    print(f"wrote {COEFFICIENTS}")


if __name__ == "__main__":
    main()
