"""Single-card countdown GRPO throughput: seed 001, countdown-1x4090 before and after the planner chose its
shape, and the levers beyond it, one after another on the same GPU.

    python bench/countdown_throughput.py --models DIR --out DIR [--steps 6] [--warmup 2] [--only NAME,...]

Every configuration runs through the entrypoint on the same random-weight Qwen2.5-0.5B architecture
(`--models`/q05: bench/make_random_model.py with the real Qwen2.5 tokenizer, bench/qwen_tokenizer.py)
and the same generated countdown tasks, capped at a 24 GiB card (EMULATE_VRAM_GB=24), alone on the GPU.
Reported over the steps after the warm-up: completion tokens/s, completions/s, s/step, the share of each
step spent generating (weight sync included), scoring and preparing (rewards, log-probs), training
(forward + backward of the micro-batches) and the rest (optimizer step, logging), from the trainer's phase
events (entrypoint/child/hooks/events.py); torch's peak reserved memory (ms-swift's memory(GiB)) and NVML's
peak for the run's processes; and the start-up marks from the command to the first logged step
(entrypoint/supervise/startup.py, from the trainer's events) with vLLM's own account of its engine.
Configurations in COLD start with empty compile caches (VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR,
TRITON_CACHE_DIR under --out), the others reuse what the runs before them compiled (warm).
Writes countdown-throughput.json, .md and .png under --out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

from common import ROOT, environment, events, manifest, start_train, step_rows

sys.path.insert(0, str(ROOT))
from entrypoint.supervise import startup  # noqa: E402

# Seed 001's single-card values (its command: tests/fixtures/seed-001-countdown.sh); it never set
# USE_VLLM=true, so HF generation.
SEED = {
    "PER_DEVICE_TRAIN_BATCH_SIZE": "1", "GRADIENT_ACCUMULATION_STEPS": "8", "NUM_GENERATIONS": "2",
    "MAX_COMPLETION_LENGTH": "256", "MAX_LENGTH": "2048", "LEARNING_RATE": "5e-7", "BETA": "0.001",
    "USE_VLLM": "false",
}  # fmt: skip
# recipes/countdown-1x4090.env as shipped before the planner chose the shape (git 75ce9ea).
BEFORE = {
    "PER_DEVICE_TRAIN_BATCH_SIZE": "1", "GRADIENT_ACCUMULATION_STEPS": "32", "GENERATION_BATCH_SIZE": "",
    "VLLM_GPU_MEMORY_UTILIZATION": "0.4", "SLEEP_LEVEL": "1",
}  # fmt: skip
# The levers' fixed baseline: the shape the planner chose for the shipped recipe on the emulated 24 GiB card
# on 2026-12-02 (V1 engine, plan-shipped.txt of that day). The planner ships another shape since (vLLM's V0
# engine, 16 x 2, no checkpointing): `lever(...)` rows compare with each other, not with the shipped row.
SHIPPED_SHAPE = {
    "PER_DEVICE_TRAIN_BATCH_SIZE": "8", "GRADIENT_ACCUMULATION_STEPS": "4",
    "VLLM_GPU_MEMORY_UTILIZATION": "0.25", "SLEEP_LEVEL": "0", "MEMORY_CHECK": "warn",
}  # fmt: skip
# name: (recipe, overrides); the shipped recipe as it is has no overrides.
CONFIGS = {
    "seed 001 settings": ("bench/recipes/random-qwen-hf.env", SEED),
    "countdown-1x4090 before": ("countdown-1x4090", BEFORE),
    "countdown-1x4090 (shipped) cold caches": ("countdown-1x4090", {}),
    "countdown-1x4090 (shipped)": ("countdown-1x4090", {}),
    "lever: shipped + SLEEP_LEVEL=1": ("countdown-1x4090", {"SLEEP_LEVEL": "1"}),
    # the engine lever undone: the planner chooses the rest for ms-swift's V1 engine
    "lever: shipped on vLLM's V1 engine": ("countdown-1x4090", {"VLLM_SCHEDULER_STEPS": "1"}),
    # the V0 engine's memory term at a second share (the shipped one is the planner's smallest)
    "lever: shipped at vLLM share 0.25": ("countdown-1x4090", {"VLLM_GPU_MEMORY_UTILIZATION": "0.25"}),
}


def lever(**values: str) -> tuple[str, dict[str, str]]:
    """The throughput levers at the shipped card shape (vLLM 0.25, no sleep, 32 sequences per generation
    round), each fixed so that only the named values change: the planner is told to warn, not to pick another
    shape."""
    return "countdown-1x4090", {**SHIPPED_SHAPE, **{k.upper(): v for k, v in values.items()}}


def micro(n: int) -> dict[str, str]:
    return {"per_device_train_batch_size": str(n), "gradient_accumulation_steps": str(32 // n)}


CONFIGS.update(
    {
        "lever: shipped without prefix caching": lever(vllm_enable_prefix_caching="false"),
        "lever: vLLM share 0.35": lever(vllm_gpu_memory_utilization="0.35"),
        "lever: micro-batch 4": lever(**micro(4)),
        "lever: micro-batch 16": lever(**micro(16)),
        "lever: gradient checkpointing off": lever(gradient_checkpointing="false"),
        "lever: gradient checkpointing off at micro-batch 4": lever(
            gradient_checkpointing="false", **micro(4)
        ),
        "lever: expandable segments without gradient checkpointing": lever(
            gradient_checkpointing="false", pytorch_cuda_alloc_conf="expandable_segments:True"
        ),
        # the planner's allocator choice undone (budget.allocator leaves a set PYTORCH_CUDA_ALLOC_CONF alone)
        "lever: torch's allocator without gradient checkpointing": lever(
            gradient_checkpointing="false", pytorch_cuda_alloc_conf="expandable_segments:False"
        ),
        "lever: liger fused loss at micro-batch 16": lever(use_liger_kernel="true", **micro(16)),
        "lever: liger fused loss at micro-batch 32": lever(use_liger_kernel="true", **micro(32)),
        "lever: liger at micro-batch 8 without gradient checkpointing": lever(
            use_liger_kernel="true", gradient_checkpointing="false", **micro(8)
        ),
        "lever: liger at micro-batch 16 without gradient checkpointing": lever(
            use_liger_kernel="true", gradient_checkpointing="false", **micro(16)
        ),
    }
)
assert not any("," in name for name in CONFIGS), "--only splits on commas"
SHIPPED, OLD, SEED_NAME = "countdown-1x4090 (shipped)", "countdown-1x4090 before", "seed 001 settings"
# configurations that start with empty compile caches (torch.compile, inductor, Triton): the rest reuse
# what the runs before them compiled, as a user's second run does with the image's /cache volume
COLD = {"countdown-1x4090 (shipped) cold caches"}


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-").replace("--", "-")


def phase_shares(evs: list[dict], warmup: int) -> dict | None:
    """Seconds per step and the share of each phase over the optimizer steps after `warmup`, from the
    trainer's phase events: a step starts with its rollout and ends where the next rollout starts."""
    rollouts = [e for e in evs if e["phase"] == "rollout"]
    if len(rollouts) <= warmup + 1:
        return None
    start = rollouts[warmup]["t"] - rollouts[warmup]["seconds"]
    last_train = max(e["t"] for e in evs if e["phase"] == "train")
    # every event that ends inside the window: the training_step holding the first rollout starts before it
    window = [e for e in evs if e["t"] > start]
    span = last_train - start
    total = {
        p: sum(e["seconds"] for e in window if e["phase"] == p)
        for p in ("sync", "generate", "rollout", "train")
    }
    generates = [e for e in window if e["phase"] == "generate"]
    generate_gc = sum(e.get("gc_seconds", 0.0) for e in generates)
    steps = len(rollouts) - warmup
    # each round's generation seconds: the same work every step (32 sequences run to the length limit), so
    # their spread is the machine's noise (the host's CPU: a decode step is launch-bound)
    rounds = [round(e["seconds"], 2) for e in generates]
    shares = {
        "generating": total["generate"] / span,
        "of which weight sync": total["sync"] / span,
        "of which garbage collection": generate_gc / span,
        "scoring and log-probs": (total["rollout"] - total["generate"]) / span,
        # a round's rollout runs inside its first micro-batch's training_step (HF Trainer -> _prepare_inputs)
        "training": (total["train"] - total["rollout"]) / span,
    }
    shares["other"] = 1 - shares["generating"] - shares["scoring and log-probs"] - shares["training"]
    return {
        "s_per_step": round(span / steps, 2),
        "steps": steps,
        "generate_s": rounds,
        "shares": {k: round(v, 3) for k, v in shares.items()},
    }


def summarize(run_dir: Path, warmup: int, log: Path) -> dict:
    """Throughput over the steps after `warmup`, from ms-swift's logging.jsonl, the phase events and the
    manifest. Completion tokens per step: completions x their mean length as ms-swift logs it."""
    m = manifest(run_dir)
    if not m:
        return {"status": "not started", "error": "no manifest (refused or killed before the run began)"}
    steps = step_rows(run_dir)
    trainer_log = run_dir / "logs" / "trainer.log"
    out: dict = {
        "status": m["status"],
        "startup_s": startup.marks(events(run_dir), command_start=float(log.read_text().split(" ", 1)[0])),
        "vllm_startup_s": startup.vllm_parts(trainer_log.read_text(errors="replace"))
        if trainer_log.exists()
        else {},
        "trainer_exit": m.get("trainer_exit"),
    }
    out["shape"] = {
        k: v["value"]
        for k, v in m.get("resolved_recipe", {}).items()
        if k
        in (
            "PER_DEVICE_TRAIN_BATCH_SIZE",
            "GRADIENT_ACCUMULATION_STEPS",
            "GENERATION_BATCH_SIZE",
            "NUM_GENERATIONS",
            "VLLM_GPU_MEMORY_UTILIZATION",
            "SLEEP_LEVEL",
            "USE_VLLM",
            "USE_LIGER_KERNEL",
            "GRADIENT_CHECKPOINTING",
            "PYTORCH_CUDA_ALLOC_CONF",
            "VLLM_SCHEDULER_STEPS",
        )
    }
    trainer = next((p for p in m.get("processes", []) if p.get("role") == "trainer"), {})
    if trainer.get("env", {}).get("PYTORCH_CUDA_ALLOC_CONF"):
        out["shape"]["PYTORCH_CUDA_ALLOC_CONF"] = trainer["env"]["PYTORCH_CUDA_ALLOC_CONF"]
    timing = phase_shares(events(run_dir), warmup)
    measured = steps[warmup:]
    if timing is None or len(measured) < 2:
        return {**out, "error": f"too few steps logged ({len(steps)})"}
    resolved = {k: v["value"] for k, v in m["resolved_recipe"].items()}
    per_step = int(resolved["PER_DEVICE_TRAIN_BATCH_SIZE"]) * int(resolved["GRADIENT_ACCUMULATION_STEPS"])
    tokens_per_step = sum(per_step * r["completions/mean_length"] for r in measured) / len(measured)
    peak = next(iter((m.get("gpu_memory_peak") or {}).values()), {})
    reserved = max(r.get("memory(GiB)", 0.0) for r in steps)
    return {
        **out,
        "completions_per_step": per_step,
        "steps_measured": timing["steps"],
        "s_per_step": timing["s_per_step"],
        "completion_tokens_per_s": round(tokens_per_step / timing["s_per_step"], 1),
        "completions_per_s": round(per_step / timing["s_per_step"], 3),
        "phase_shares": timing["shares"],
        "generation_round_s": timing["generate_s"],
        "peak_reserved_gib": reserved,
        "peak_nvml_gib": peak.get("measured_gib"),
        "peak_measured_by": peak.get("measured_by"),
        "predicted_gib": peak.get("predicted_gib"),
        "mean_reward": round(sum(r["reward"] for r in measured if "reward" in r) / len(measured), 4),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, required=True, help="folder with q05/")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--only", default="", help="comma-separated configuration names, run in that order (default: all)"
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=V", help="override for every configuration"
    )
    p.add_argument(
        "--from-runs",
        action="store_true",
        help="rebuild the report from the runs already under --out (their recorded environment), running "
        "nothing",
    )
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.only.split(",") if args.only else list(CONFIGS)  # in the order given
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        p.error(f"unknown configurations {unknown}; known: {list(CONFIGS)}")
    report_path = args.out / "countdown-throughput.json"
    if args.from_runs:
        old = json.loads(report_path.read_text())
        results = {
            n: {**r, **summarize(args.out / "runs" / slug(n), args.warmup, args.out / f"{slug(n)}.log")}
            for n, r in old["results"].items()
        }
        write_report(results, args, report_path, old["environment"])
        return
    common = {
        "MODEL": str(args.models / "q05"),
        "DATASET_GENERATOR": "countdown",
        "EMULATE_VRAM_GB": "24",
        "MAX_STEPS": str(args.steps),
        **dict(item.split("=", 1) for item in args.set),
    }
    # compile caches, empty at the first vLLM run (cold start), reused by the later ones (warm)
    cache = {
        "VLLM_CACHE_ROOT": str(args.out / "vllm-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(args.out / "inductor-cache"),
        "TRITON_CACHE_DIR": str(args.out / "triton-cache"),
    }
    results: dict = {}
    for name in names:
        if name in COLD:
            for path in cache.values():
                shutil.rmtree(path, ignore_errors=True)
        recipe, pairs = CONFIGS[name]
        run = start_train(
            args.out / "runs",
            slug(name),
            {**common, **pairs},
            args.out / f"{slug(name)}.log",
            recipe=ROOT / recipe if recipe.endswith(".env") else recipe,
            env=cache,
        )
        rc = run.wait()
        results[name] = {"overrides": pairs, "returncode": rc, **summarize(run.run_dir, args.warmup, run.log)}
        print(name, json.dumps(results[name]), flush=True)
        write_report(results, args, report_path)  # after every run: a cut-short benchmark keeps what ran


def write_report(results: dict, args, path: Path, env: dict | None = None) -> None:
    report = {
        "environment": env or environment(),
        "emulate_vram_gib": 24,
        "model": "Qwen2.5-0.5B architecture, random weights, real Qwen2.5 tokenizer "
        "(bench/qwen_tokenizer.py)",
        "workload": "recipes/countdown-1x4090.env (seed: bench/recipes/random-qwen-hf.env) with MODEL, "
        "DATASET_GENERATOR=countdown, EMULATE_VRAM_GB=24, MAX_STEPS, SEED=42; one configuration at a time on "
        "one GPU",
        "steps": args.steps,
        "warmup_steps": args.warmup,
        "results": results,
    }
    ours, old, seed = (results.get(n, {}).get("completion_tokens_per_s") for n in (SHIPPED, OLD, SEED_NAME))
    if ours and old:
        report["speedup_vs_before"] = round(ours / old, 2)
    if ours and seed:
        report["speedup_vs_seed"] = round(ours / seed, 2)
    path.write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(report, path.with_suffix(".md"))
    write_plot(report, path.with_suffix(".png"))


def _error(r: dict) -> str:
    """The planner's predicted peak against NVML's, as `+4.2%` (over) or `-3.1%` (under the measurement)."""
    if not r.get("peak_nvml_gib") or not r.get("predicted_gib"):
        return "-"
    return f"{r['predicted_gib'] / r['peak_nvml_gib'] - 1:+.1%}"


def write_markdown(report: dict, path: Path) -> None:
    env = report["environment"]
    lines = [
        "# Countdown GRPO throughput on one emulated 24 GiB card",
        "",
        f"{env['date']}, {', '.join(env['gpus']) or 'GPU unknown'} (name, driver, memory); Python "
        f"{env['python']}, torch {env['torch']}, vLLM {env['vllm']}, transformers {env['transformers']}, "
        f"ms-swift {env['ms-swift']}, trl {env['trl']}, peft {env['peft']}, liger-kernel "
        f"{env['liger-kernel']}. {report['model']}; each run capped at {report['emulate_vram_gib']} GiB "
        f"(EMULATE_VRAM_GB), alone on the GPU; {report['steps']} steps, the first {report['warmup_steps']} "
        f"not measured. Workload: {report['workload']}.",
        "",
        "| configuration | shape (micro-batch x accumulation, vLLM share, sleep) | s/step | completion "
        "tokens/s | completions/s | generating | scoring + log-probs | training | other | peak reserved GiB "
        "| peak NVML GiB | planned GiB | planned vs NVML | exit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in report["results"].items():
        s = r.get("shape", {})
        shape = f"{s.get('PER_DEVICE_TRAIN_BATCH_SIZE')} x {s.get('GRADIENT_ACCUMULATION_STEPS')}, " + (
            f"{s.get('VLLM_GPU_MEMORY_UTILIZATION', '-')}, {s.get('SLEEP_LEVEL', '0')}"
            if s.get("USE_VLLM") == "true"
            else "HF generate"
        )
        shape += "".join(
            text
            for key, value, text in (
                ("GRADIENT_CHECKPOINTING", "false", ", no checkpointing"),
                ("USE_LIGER_KERNEL", "true", ", liger"),
            )
            if s.get(key) == value
        )
        if "expandable_segments:True" in s.get("PYTORCH_CUDA_ALLOC_CONF", ""):
            shape += ", expandable segments"
        if int(s.get("VLLM_SCHEDULER_STEPS") or 0) > 1:
            shape += f", vLLM V0 x {s['VLLM_SCHEDULER_STEPS']} steps"
        exit_text = r["status"] + (
            f" ({r['trainer_exit']['signal']} after training, accepted)" if r.get("trainer_exit") else ""
        )
        if "s_per_step" not in r:
            lines.append(
                f"| {name} | {shape} | failed: {r.get('error', r.get('returncode'))} | | | | | | | | | | | "
                f"{exit_text} |"
            )
            continue
        sh = r["phase_shares"]
        lines.append(
            f"| {name} | {shape} | {r['s_per_step']} | {r['completion_tokens_per_s']} | "
            f"{r['completions_per_s']} | {sh['generating']:.0%} | {sh['scoring and log-probs']:.0%} | "
            f"{sh['training']:.0%} | {sh['other']:.0%} | {r['peak_reserved_gib']} | {r['peak_nvml_gib']} | "
            f"{r['predicted_gib']} | {_error(r)} | {exit_text} |"
        )
    if "speedup_vs_before" in report or "speedup_vs_seed" in report:
        lines += [
            "",
            f"Shipped recipe: {report.get('speedup_vs_before')}x the completion tokens/s of the recipe as "
            f"shipped before, {report.get('speedup_vs_seed')}x the seed's.",
        ]
        shipped = report["results"].get(SHIPPED, {})
        errors = [
            abs(r["predicted_gib"] / r["peak_nvml_gib"] - 1)
            for r in report["results"].values()
            if r.get("peak_nvml_gib") and r.get("predicted_gib")
        ]
        lines += [
            "",
            "The targets, of the shipped recipe: >= 25x the seed (seed 001 settings: the countdown source "
            "document's command line), >= 6x the old shape (countdown-1x4090 before) and an NVML peak <= 22 "
            "GiB, and of every configuration a prediction within 10 %: here "
            f"{report.get('speedup_vs_seed')}x, {report.get('speedup_vs_before')}x, "
            f"{shipped.get('peak_nvml_gib')} GiB ({22 - (shipped.get('peak_nvml_gib') or 22):.2f} GiB left "
            f"to 22), the largest error {max(errors, default=0):.1%}.",
        ]
    rounds = {n: r["generation_round_s"] for n, r in report["results"].items() if r.get("generation_round_s")}
    if rounds:
        lines += [
            "",
            "Seconds of each measured step's generation round (the same work every step: its spread is the "
            "machine's, a decode step being bound by the host's CPU):",
            "",
        ]
        lines += [
            f"- {n}: {min(v)} / {round(statistics.median(v), 2)} / {max(v)} (min / median / max of {v})"
            for n, v in rounds.items()
        ]
    lines += [
        "",
        "Start-up, seconds from the command to each mark (entrypoint/supervise/startup.py; configurations in "
        f"{sorted(COLD)} start with empty compile caches, the others reuse the runs' before them):",
        "",
        "| configuration | "
        + " | ".join(STARTUP_COLUMNS)
        + " | vLLM: torch.compile / CUDA graphs / whole engine |",
        "|---|" + "---|" * (len(STARTUP_COLUMNS) + 1),
    ]
    for name, r in report["results"].items():
        st, v = r.get("startup_s", {}), r.get("vllm_startup_s", {})
        engine = " / ".join(str(v.get(k, "-")) for k in ("torch.compile", "CUDA graphs", "whole engine"))
        lines.append(
            f"| {name} | " + " | ".join(str(st.get(c, "-")) for c in STARTUP_COLUMNS) + f" | {engine} |"
        )
    lines += ["", "Overrides on top of the recipe:", ""] + [
        f"- {n}: `{' '.join(f'{k}={v}' for k, v in r['overrides'].items()) or '(none)'}`"
        for n, r in report["results"].items()
    ]
    path.write_text("\n".join(lines) + "\n")


STARTUP_COLUMNS = tuple(mark for mark, _ in startup.MARKS)


def write_plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = {n: r for n, r in report["results"].items() if "completion_tokens_per_s" in r}
    if not done:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 0.6 * len(done) + 2))
    names = list(done)[::-1]
    a.barh(names, [done[n]["completion_tokens_per_s"] for n in names])
    a.set_xlabel("completion tokens/s (higher is better)")
    b.barh(names, [done[n]["peak_nvml_gib"] or 0 for n in names], label="NVML (run's processes)")
    b.axvline(24, color="red", linestyle="--", label="24 GiB card")
    b.set_xlabel("peak GiB")
    b.set_yticks([])
    b.legend(loc="lower right", fontsize=8)
    gpu = report["environment"]["gpus"][0].split(",")[0] if report["environment"]["gpus"] else ""
    fig.suptitle(f"countdown GRPO on {gpu} capped at 24 GiB, {report['environment']['date'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
