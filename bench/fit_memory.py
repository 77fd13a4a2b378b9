"""Fit the memory planner's coefficients to measured GRPO peaks.

    python bench/fit_memory.py [--colocate colocate-measurements.json]
        [bench/calibration/memory-calibration.json]

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
import gzip
import json
import re
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares, minimize

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from entrypoint.facts import inventory  # noqa: E402
from entrypoint.plan import budget, memory  # noqa: E402
from entrypoint.plan import build as plan  # noqa: E402
from entrypoint.recipe import load as recipe  # noqa: E402
from entrypoint.world import host  # noqa: E402

RECIPE = ROOT / "bench" / "recipes" / "random-qwen-hf.env"
CALIBRATION = ROOT / "bench" / "calibration" / "memory-calibration.json"
COEFFICIENTS = ROOT / "entrypoint" / "data" / "memory_coefficients.json"

# Fitted: what the measurements can tell apart. act_inter and gc_layer_input keep their physical defaults
# (DEFAULT_COEFFICIENTS in entrypoint/plan/memory.py).
FITTED = ("act_hidden", "logit_bytes", "overhead", "constant_gib")
BOUNDS = ([0, 2, 1.0, 0.0], [80, 40, 1.6, 3.0])
# Two allocators, two sets of colocate coefficients, each fitted to its own runs (memory.py, "vLLM side"):
# expandable segments (the planner's choice without sleep mode) and torch's default allocator (sleep mode,
# or a recipe's own PYTORCH_CUDA_ALLOC_CONF), with the sleep-mode term; on torch's allocator the sleep-mode
# runs, which the planner itself may choose, weigh twice the sleep-0 ones, a user's opt-out whose peaks
# jump by whole working sets at steps that vary from run to run.
EXPANDABLE_FITTED = (
    "colocate_logit_bytes",
    "colocate_liger_logit_bytes",
    "colocate_activation_factor",
    "colocate_constant_gib",
    "colocate_v0_before_gib",
)
TORCH_FITTED = (
    "colocate_torch_logit_bytes",
    "colocate_torch_liger_logit_bytes",
    "colocate_torch_activation_factor",
    "colocate_torch_constant_gib",
    "colocate_sleep_gib",
)
REGIME_BOUNDS = ([1.0, 1.0, 0.5, -2.0], [80.0, 80.0, 5.0, 8.0])
V0_BOUNDS = (0.5, 3.0)  # the CUDA context and workspaces: 1.13-1.93 GiB measured (memory.CUDA_CONTEXT_GIB)
SLEEP_BOUNDS = (-3.0, 6.0)
SLEEP_WEIGHT = 2.0
# what a lever run's manifest says, and its value when the recipe leaves it to ms-swift
RUN_KEYS = {
    "PER_DEVICE_TRAIN_BATCH_SIZE": ("per_device_train_batch_size", int, 1),
    "GRADIENT_ACCUMULATION_STEPS": ("gradient_accumulation_steps", int, 1),
    "NUM_GENERATIONS": ("num_generations", int, 8),
    "MAX_COMPLETION_LENGTH": ("max_completion_length", int, 512),
    "VLLM_GPU_MEMORY_UTILIZATION": ("vllm_gpu_memory_utilization", float, 0.9),
    "SLEEP_LEVEL": ("sleep_level", int, 0),
    "GRADIENT_CHECKPOINTING": ("gradient_checkpointing", lambda v: v == "true", True),
    "USE_LIGER_KERNEL": ("use_liger_kernel", lambda v: v == "true", False),
    "VLLM_ENABLE_PREFIX_CACHING": ("vllm_enable_prefix_caching", lambda v: v == "true", True),
    "EMULATE_VRAM_GB": ("emulate_vram_gib", float, 0),
    "VLLM_SCHEDULER_STEPS": ("vllm_scheduler_steps", int, 1),
}


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
        )
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


def run_measurement(run: Path, name: str, model: str = "Qwen/Qwen2.5-0.5B-Instruct") -> dict | None:
    """A colocate measurement from a bench/countdown_throughput.py run directory (its manifest.json and
    logging.jsonl): the resolved shape and levers, NVML's peak of the run's processes and torch's peak
    reserved memory (ms-swift's memory(GiB)). None for a run without vLLM colocated or without a peak."""
    manifest = json.loads((run / "manifest.json").read_text())
    values = {k: v["value"] for k, v in manifest.get("resolved_recipe", {}).items()}
    peak = next(iter((manifest.get("gpu_memory_peak") or {}).values()), {})
    if values.get("USE_VLLM") == "false" or not peak.get("measured_gib"):
        return None
    m = {"name": name, "kind": "colocate", "model": model, "train_type": "lora"}
    for key, (field, kind, default) in RUN_KEYS.items():
        m[field] = kind(values[key]) if values.get(key) not in (None, "") else default
    trainer = next((p for p in manifest.get("processes", []) if p.get("role") == "trainer"), {})
    m["pytorch_cuda_alloc_conf"] = trainer.get("env", {}).get(
        "PYTORCH_CUDA_ALLOC_CONF", ""
    )  # "": torch's default
    m["vllm_use_v1"] = trainer.get("env", {}).get("VLLM_USE_V1", "")  # "": vLLM's choice, V1 here
    if (run / "logging.jsonl").exists():
        rows = [
            json.loads(line) for line in (run / "logging.jsonl").read_text().splitlines() if '"loss"' in line
        ]
        reserved = [r.get("memory(GiB)", 0.0) for r in rows]
    else:  # raw files kept only the trainer's log: ms-swift prints the same rows there
        with gzip.open(run / "trainer.log.gz", "rt", errors="replace") as f:
            log = f.read()
        reserved = [float(v) for v in re.findall(r"'memory\(GiB\)': ([0-9.]+)", log)]
    m.update(
        {
            "steps": len(reserved),
            "status": manifest["status"],
            "measured_nvml_gib": peak["measured_gib"],
            "measured_reserved_gib": max(reserved, default=None),
            "predicted_at_run_gib": peak.get("predicted_gib"),
            "source": str(run.relative_to(ROOT)) if run.is_relative_to(ROOT) else str(run),
        }
    )
    return m


def expandable(m: dict) -> bool:
    """Whether a measured run's trainer had expandable segments."""
    return "expandable_segments:True" in (m.get("pytorch_cuda_alloc_conf") or "")


def planned_run(m: dict) -> plan.Plan:
    """The planner's plan of a measured colocate configuration: countdown-1x4090 with the measurement's
    explicit shape and levers, on an H200 capped at the measurement's card size."""
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
        f"GRADIENT_CHECKPOINTING={str(m.get('gradient_checkpointing', True)).lower()}",
        f"USE_LIGER_KERNEL={str(m.get('use_liger_kernel', False)).lower()}",
        f"PYTORCH_CUDA_ALLOC_CONF={m.get('pytorch_cuda_alloc_conf') or 'expandable_segments:False'}",
        f"VLLM_SCHEDULER_STEPS={m.get('vllm_scheduler_steps') or 1}",
    ] + ([f"VLLM_USE_V1={m['vllm_use_v1']}"] if m.get("vllm_use_v1") else [])
    return _planned("countdown-1x4090", pairs, 1)


def colocate_prediction(m: dict, coef: dict | None = None) -> float:
    """The planner's card-level peak (GiB) for a measured colocate configuration (planned_run)."""
    planned = planned_run(m)
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
    p.add_argument(
        "--runs",
        type=Path,
        nargs="+",
        default=[],
        help="bench run directories (bench/countdown_throughput.py) whose manifests replace the colocate "
        "measurements",
    )
    args = p.parse_args()
    data = json.loads(args.calibration.read_text())
    if args.runs:
        found = [run_measurement(d.resolve(), d.name) for d in args.runs if (d / "manifest.json").exists()]
        data["colocate_measurements"] = [m for m in found if m]
        data["colocate_workload"] = (
            "bench/countdown_throughput.py lever runs (recipes/countdown-1x4090.env with the shape and "
            "levers named, random-weight Qwen2.5-0.5B with the real tokenizer, generated countdown tasks, "
            "EMULATE_VRAM_GB=24, 5 steps alone on the GPU, NVML every 0.25 s)"
        )
        args.calibration.write_text(json.dumps(data, indent=2) + "\n")
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
    out["colocate_max_abs_error"] = {}
    for regime, names, bounds in (
        (
            "expandable segments",
            EXPANDABLE_FITTED,
            ([*REGIME_BOUNDS[0], V0_BOUNDS[0]], [*REGIME_BOUNDS[1], V0_BOUNDS[1]]),
        ),
        (
            "torch's allocator",
            TORCH_FITTED,
            ([*REGIME_BOUNDS[0], SLEEP_BOUNDS[0]], [*REGIME_BOUNDS[1], SLEEP_BOUNDS[1]]),
        ),
    ):
        runs = [m for m in colocated if expandable(m) == (regime == "expandable segments")]
        if len(runs) < len(names):
            print(
                f"{regime}: {len(runs)} measurements, fewer than the {len(names)} needed; kept the defaults"
            )
            continue
        weights = [SLEEP_WEIGHT if m["sleep_level"] >= 1 else 1.0 for m in runs]

        def colocate_residuals(x, runs=runs, names=names):
            c = {**coef, **dict(zip(names, x, strict=True))}
            return [colocate_prediction(m, c) / m["measured_nvml_gib"] - 1 for m in runs]

        def weighted(x, weights=weights, residuals=colocate_residuals):
            return [w * r for w, r in zip(weights, residuals(x), strict=True)]

        x = _fit(weighted, [coef[k] for k in names], bounds)
        coef.update({k: round(float(v), 4) for k, v in zip(names, x, strict=True)})
        errors = colocate_residuals([coef[k] for k in names])
        for m, e in zip(runs, errors, strict=True):
            print(
                f"{regime:20s} {m.get('source', m['name']).removeprefix('bench/'):72s} NVML "
                f"{m['measured_nvml_gib']:6.2f} GiB  error {e:+.1%}"
            )
        out["colocate_max_abs_error"][regime] = round(float(np.max(np.abs(errors))), 4)
    out["coefficients"] = {k: coef[k] for k in (*FITTED, *EXPANDABLE_FITTED, *TORCH_FITTED)}
    COEFFICIENTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))
    print(f"wrote {COEFFICIENTS}")


if __name__ == "__main__":
    main()
