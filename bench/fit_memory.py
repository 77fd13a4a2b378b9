"""Fit the memory planner's coefficients to measured GRPO peaks.

    python bench/fit_memory.py [docs/benchmarks/memory-calibration.json]

Reads the measurements (bench/calibrate_memory.py), fits activations, logits, overhead and constant to
minimise the largest relative error (the planner's promise is a bound on each configuration, and
allocator caching makes single measurements noisy), writes entrypoint/data/memory_coefficients.json and prints each
configuration's prediction against its measurement.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares, minimize

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from entrypoint import hardware, memory, plan, recipe  # noqa: E402
from entrypoint.preflight import memory_check  # noqa: E402

RECIPE = ROOT / "bench" / "recipes" / "random-qwen-hf.env"

# Fitted: what the measurements can tell apart (six points). act_inter and gc_layer_input keep their
# physical defaults (DEFAULT_COEFFICIENTS in entrypoint/memory.py).
FITTED = ("act_hidden", "logit_bytes", "overhead", "constant_gib")
BOUNDS = ([0, 2, 1.0, 0.0], [80, 40, 1.6, 3.0])


def workload(m: dict) -> memory.Workload:
    """The planner's own Workload for a measured configuration: the benchmark recipe with the
    measurement's values, planned on H200s (the same path `plan` takes)."""
    world = m.get("world", 1)
    pairs = [
        f"recipe={RECIPE}",
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
    r = recipe.load(pairs, {})
    h200 = [
        hardware.GPU(
            index=i,
            uuid=f"GPU-{i}",
            name="NVIDIA H200",
            pci_bus_id=str(i),
            memory_total_gib=140.4,
            memory_free_gib=139.8,
            compute_capability=(9, 0),
        )
        for i in range(world)
    ]
    inventory = hardware.Inventory(source="calibration", driver_version="580.159.04", gpus=h200)
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

    start = least_squares(residuals, [base[k] for k in FITTED], bounds=BOUNDS).x
    # a high p-norm of the relative errors: smooth, and close to minimising the largest one
    bounds = list(zip(*BOUNDS, strict=True))
    x = minimize(
        lambda x: sum((r / 0.1) ** 8 for r in residuals(x)), start, method="L-BFGS-B", bounds=bounds
    ).x
    coef = {k: round(float(v), 4) for k, v in zip(FITTED, x, strict=True)}
    errors = residuals([coef[k] for k in FITTED])
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
