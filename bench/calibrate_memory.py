"""Measure the card-level peak of vLLM colocate GRPO runs, for the memory planner.

    python bench/calibrate_memory.py --models DIR --out DIR [--steps 3] [--only NAME,...] [--deadline S]

Each configuration is a real run of the shipped countdown-1x4090 recipe through the entrypoint, with the
batch shape, vLLM share and sleep level given explicitly (the planner chooses nothing), on a
random-weight Qwen2.5 architecture from `--models` (q05/, q15/: bench/make_random_model.py with
bench/qwen_tokenizer.py's tokenizer), generated countdown tasks, every process capped at a 24 GiB card
(EMULATE_VRAM_GB=24). The runs share one GPU at the same time: each is measured by what NVML attributes
to its own processes (the entrypoint's GPU monitor, `run_gib`), and the emulation gives each its own
24 GiB card, vLLM included. Each architecture's first run starts alone with the others of other
architectures; the rest follow once its vLLM engine is up and its torch.compile cache written
(`ready-<model>` marks that moment). Writes colocate-measurements.json; `bench/fit_memory.py --colocate FILE`
merges it into bench/calibration/memory-calibration.json and fits the planner's vLLM coefficients.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, environment, manifest, rows, start_train

sys.path.insert(0, str(ROOT))

MODEL_IDS = {"q05": "Qwen/Qwen2.5-0.5B-Instruct", "q15": "Qwen/Qwen2.5-1.5B-Instruct"}
# name: (model, PER_DEVICE_TRAIN_BATCH_SIZE, GRADIENT_ACCUMULATION_STEPS, VLLM_GPU_MEMORY_UTILIZATION,
# SLEEP_LEVEL). 32 completions per step (NUM_GENERATIONS 8), completions of 256 tokens, as shipped.
CONFIGS = {
    "q05-mb8-u25-s0": ("q05", 8, 4, 0.25, 0),
    "q05-mb8-u25-s1": ("q05", 8, 4, 0.25, 1),
    "q05-mb2-u40-s1": ("q05", 2, 16, 0.40, 1),
    "q05-mb4-u40-s0": ("q05", 4, 8, 0.40, 0),
    # 1.5B: a share under ~0.35 of 24 GiB leaves vLLM no KV cache once both copies of the weights are
    # counted (the planner refuses it; 2026-12-01's q15-mb4-u30 was refused so)
    "q15-mb4-u40-s0": ("q15", 4, 8, 0.40, 0),
    "q15-mb4-u40-s1": ("q15", 4, 8, 0.40, 1),
    "q15-mb2-u45-s0": ("q15", 2, 16, 0.45, 0),
}


def pairs_for(name: str, models: Path, steps: int) -> dict[str, str]:
    model, pd, ga, util, sleep = CONFIGS[name]
    return {
        "MODEL": str(models / model),
        "DATASET_GENERATOR": "countdown",
        "EMULATE_VRAM_GB": "24",
        "PER_DEVICE_TRAIN_BATCH_SIZE": str(pd),
        "GRADIENT_ACCUMULATION_STEPS": str(ga),
        "GENERATION_BATCH_SIZE": "",
        "VLLM_GPU_MEMORY_UTILIZATION": str(util),
        "SLEEP_LEVEL": str(sleep),
        "MAX_STEPS": str(steps),
        "SAVE_STEPS": "1000",
        "LOG_COMPLETIONS": "false",
        "REPORT_TO": "none",
        "MEMORY_CHECK": "warn",
        "GPU_MONITOR_INTERVAL": "0.5",
    }


def kv_cache_line(log: Path) -> str | None:
    """vLLM's own account of its KV cache (V1: 'GPU KV cache size'; V0: 'the rest of the memory')."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    found = re.findall(r"(GPU KV cache size: [\d,]+ tokens|Available KV cache memory: [\d.]+ GiB)", text)
    return "; ".join(dict.fromkeys(found)) or None


def engine_ready(log: Path) -> bool:
    """vLLM's engine in this run has finished start-up (its compile cache is written)."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return (
        re.search(
            r"init engine \(profile, create kv cache, warmup model\) took|Graph capturing finished", text
        )
        is not None
    )


def measure(name: str, run_dir: Path, rc: int, steps: int) -> dict:
    model, pd, ga, util, sleep = CONFIGS[name]
    m = manifest(run_dir)
    peak = next(iter((m.get("gpu_memory_peak") or {}).values()), {})
    logged = [r["memory(GiB)"] for r in rows(run_dir) if "memory(GiB)" in r]
    return {
        "name": name,
        "kind": "colocate",
        "model": MODEL_IDS[model],
        "train_type": "lora",
        "num_generations": 8,
        "per_device_train_batch_size": pd,
        "gradient_accumulation_steps": ga,
        "max_completion_length": 256,
        "vllm_gpu_memory_utilization": util,
        "sleep_level": sleep,
        "emulate_vram_gib": 24,
        "steps": steps,
        "returncode": rc,
        "status": m.get("status"),
        "trainer_exit": m.get("trainer_exit"),
        "measured_nvml_gib": peak.get("measured_gib")
        if peak.get("measured_by", "").startswith("run")
        else None,
        "device_nvml_gib": peak.get("device_gib"),
        "measured_reserved_gib": max(logged) if logged else None,
        "predicted_at_run_gib": peak.get("predicted_gib"),
        "vllm_kv_cache": kv_cache_line(run_dir / "logs" / "trainer.log"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated configuration names")
    p.add_argument("--stagger", type=float, default=5.0, help="seconds between the followers' starts")
    p.add_argument(
        "--lead-timeout", type=float, default=300, help="seconds to wait for a model's first engine"
    )
    p.add_argument("--deadline", type=float, default=0, help="seconds; then stop what still runs")
    args = p.parse_args()
    names = [n for n in CONFIGS if not args.only or n in args.only.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    runs_dir = args.out / "runs"
    started = {}

    def launch(name: str) -> None:
        # One torch.compile cache per architecture, filled by that model's first run before the others
        # start: compiling seven engines at once on 16 cores would take longer than the runs.
        env = {"VLLM_CACHE_ROOT": str(args.out / "vllm-cache" / CONFIGS[name][0])}
        started[name] = start_train(
            runs_dir,
            name,
            pairs_for(name, args.models, args.steps),
            args.out / f"{name}.log",
            recipe="countdown-1x4090",
            env=env,
        )

    leads = {}
    for name in names:
        leads.setdefault(CONFIGS[name][0], name)
    for name in leads.values():
        launch(name)
    waiting = {model: time.monotonic() + args.lead_timeout for model in leads}
    while waiting:
        for model, until in list(waiting.items()):
            lead = started[leads[model]]
            if engine_ready(lead.log) or lead.proc.poll() is not None or time.monotonic() > until:
                (args.out / f"ready-{model}").write_text(leads[model] + "\n")
                for name in names:
                    if CONFIGS[name][0] == model and name not in started:
                        launch(name)
                        time.sleep(args.stagger)
                del waiting[model]
        time.sleep(2)
    end = time.monotonic() + args.deadline if args.deadline else None
    results = []
    for name, run in started.items():
        try:
            rc = run.wait(timeout=max(1.0, end - time.monotonic()) if end else None)
        except subprocess.TimeoutExpired:
            run.proc.terminate()  # the entrypoint stops its children and writes a `stopped` manifest
            rc = run.wait()
        results.append(measure(name, run.run_dir, rc, args.steps))
        print(json.dumps(results[-1]), flush=True)
    data = {
        "environment": environment(),
        "workload": "recipes/countdown-1x4090.env with explicit shapes (bench/calibrate_memory.py), "
        "random-weight Qwen2.5 architectures with the real Qwen2.5 tokenizer, generated countdown tasks, "
        "EMULATE_VRAM_GB=24, runs sharing one GPU, each measured by NVML's per-process figures",
        "measurements": results,
    }
    (args.out / "colocate-measurements.json").write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
