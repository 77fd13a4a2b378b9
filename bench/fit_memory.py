"""Fit the memory planner's coefficients to measured GRPO peaks.

    python bench/fit_memory.py [docs/benchmarks/memory-calibration.json]

Reads the measurements (bench/calibrate_memory.py), fits activations, logits, overhead and constant by
least squares on the relative error, writes entrypoint/data/memory_coefficients.json and prints each
configuration's prediction against its measurement.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from entrypoint import hardware, memory, plan, recipe  # noqa: E402
from entrypoint.preflight import memory_check  # noqa: E402

RECIPE = ROOT / "bench" / "recipes" / "random-qwen-hf.env"

FITTED = ("act_hidden", "act_inter", "gc_layer_input", "logit_bytes", "overhead", "constant_gib")
BOUNDS = ([0, 0, 0.5, 2, 1.0, 0.0], [60, 20, 4, 24, 1.5, 2.0])


def workload(m: dict) -> memory.Workload:
    """The planner's own Workload for a measured configuration: the benchmark recipe with the
    measurement's values, planned for one GPU (the same path `plan` takes)."""
    pairs = [
        f"recipe={RECIPE}",
        f"MODEL={m['model']}",
        f"TRAIN_TYPE={m['train_type']}",
        f"NUM_GENERATIONS={m['num_generations']}",
        f"PER_DEVICE_TRAIN_BATCH_SIZE={m['per_device_train_batch_size']}",
        "GRADIENT_ACCUMULATION_STEPS=1",
        f"MAX_COMPLETION_LENGTH={m['max_completion_length']}",
        f"GRADIENT_CHECKPOINTING={str(m['gradient_checkpointing']).lower()}",
        "TRAIN_GPUS=0",
    ]
    r = recipe.load(pairs, {})
    inventory = hardware.Inventory(
        source="calibration",
        driver_version="580.00",
        gpus=[
            hardware.GPU(
                index=0,
                uuid="GPU-0",
                name="H200",
                pci_bus_id="0",
                memory_total_gib=139.8,
                memory_free_gib=139.0,
                compute_capability=(9, 0),
            )
        ],
    )
    planned = plan.build(r, inventory, {}, choose_port=lambda s, h: 8000, ephemeral_port=lambda: 29500)
    w, _ = memory_check.workload(planned, {})
    return w


def main() -> None:
    path = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "benchmarks" / "memory-calibration.json"
    )
    data = json.loads(path.read_text())
    points = [(m, workload(m)) for m in data["measurements"] if m.get("measured_reserved_gib")]
    base = dict(memory.DEFAULT_COEFFICIENTS)

    def residuals(x):
        coef = {**base, **dict(zip(FITTED, x, strict=True))}
        return [memory.estimate_training(w, coef).peak / m["measured_reserved_gib"] - 1 for m, w in points]

    fit = least_squares(residuals, [base[k] for k in FITTED], bounds=BOUNDS)
    coef = {k: round(float(v), 4) for k, v in zip(FITTED, fit.x, strict=True)}
    errors = residuals(fit.x)
    for (m, _), e in zip(points, errors, strict=True):
        print(f"{m['name']:28s} measured {m['measured_reserved_gib']:6.2f} GiB  error {e:+.1%}")
    print(f"max |error| {max(abs(e) for e in errors):.1%}")
    out = ROOT / "entrypoint" / "data" / "memory_coefficients.json"
    out.write_text(
        json.dumps(
            {
                "source": str(path.relative_to(ROOT)),
                "max_abs_error": round(float(np.max(np.abs(errors))), 4),
                "coefficients": coef,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
