"""Single-card countdown GRPO throughput: the seed's settings against the shipped countdown-1x4090.

    python bench/countdown_throughput.py --models DIR --out DIR [--gpus 0,1] [--steps 6] [--warmup 2]

Both run through the entrypoint on the same random-weight Qwen2.5-0.5B architecture and the same
generated countdown tasks, each process capped at a 24 GiB card (EMULATE_VRAM_GB=24), with HF
generation (the benchmark machine cannot run vLLM; with vLLM both sides generate faster). Reported
after the warm-up steps: completion tokens/s, completions/s, s/step, and peak memory (torch max
reserved as ms-swift logs it, and NVML's peak for the GPU).
Writes countdown-throughput.json, .md and .png under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from common import ROOT, environment, seconds, start_train, step_rows

sys.path.insert(0, str(ROOT))
from entrypoint import recipe as recipe_mod  # noqa: E402

# Seed 001's single-card values (../shared/seeds/NOTES.md), minus vLLM: it never set USE_VLLM=true.
SEED = {
    "PER_DEVICE_TRAIN_BATCH_SIZE": "1", "GRADIENT_ACCUMULATION_STEPS": "8", "NUM_GENERATIONS": "2",
    "MAX_COMPLETION_LENGTH": "256", "MAX_LENGTH": "2048", "LEARNING_RATE": "5e-7", "BETA": "0.001",
}  # fmt: skip
BATCH_KEYS = ("PER_DEVICE_TRAIN_BATCH_SIZE", "GRADIENT_ACCUMULATION_STEPS", "NUM_GENERATIONS", "MAX_COMPLETION_LENGTH",
              "MAX_LENGTH", "LEARNING_RATE", "BETA", "GENERATION_BATCH_SIZE", "STEPS_PER_GENERATION", "GRADIENT_CHECKPOINTING")  # fmt: skip


def shipped() -> dict[str, str]:
    """The batch-shaping values of recipes/countdown-1x4090.env (read, not copied)."""
    r = recipe_mod.load(["recipe=countdown-1x4090"], {})
    return {k: r.raw(k) for k in BATCH_KEYS if r.raw(k)}


def summarize(run_dir: Path, pairs: dict[str, str], warmup: int) -> dict:
    """Throughput over the steps after `warmup`, from ms-swift's logging.jsonl and the manifest.

    Generated tokens per completion: a completion cut at MAX_COMPLETION_LENGTH (`clipped_ratio`, all of
    them with random weights) has exactly that many; the others count `mean_length`.
    """
    steps = step_rows(run_dir)
    if not (run_dir / "manifest.json").exists():
        return {"status": "not started", "error": "no manifest (refused or killed before the run began)"}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    measured = steps[warmup:]
    if len(measured) < 2:
        return {"status": manifest["status"], "error": "too few steps logged"}
    per_step = int(pairs["PER_DEVICE_TRAIN_BATCH_SIZE"]) * int(pairs["GRADIENT_ACCUMULATION_STEPS"])
    per_round = int(pairs.get("GENERATION_BATCH_SIZE") or per_step)
    limit = int(pairs["MAX_COMPLETION_LENGTH"])
    start = seconds(steps[warmup - 1]["elapsed_time"]) if warmup else 0.0
    span = seconds(measured[-1]["elapsed_time"]) - start
    tokens = completions = 0.0
    for r in measured:
        if "completions/mean_length" in r:  # a step that generated
            clipped = r.get("completions/clipped_ratio", 0.0)
            tokens += per_round * (clipped * limit + (1 - clipped) * r["completions/mean_length"])
            completions += per_round
    n = len(measured)
    peaks = manifest.get("gpu_memory_peak", {})
    reserved = max(r.get("memory(GiB)", 0.0) for r in steps)
    nvml = max((v["measured_gib"] for v in peaks.values()), default=None)
    return {
        "status": manifest["status"],
        "completions_per_step": per_step,
        "steps_measured": n,
        "s_per_step": round(span / n, 2),
        "completion_tokens_per_s": round(tokens / span, 1),
        "completions_per_s": round(completions / span, 3),
        "peak_reserved_gib": reserved,
        "peak_nvml_gib": nvml,
        "non_torch_gib": round(nvml - reserved, 2) if nvml is not None else None,
        "predicted_gib": next((v["predicted_gib"] for v in peaks.values()), None),
        "mean_reward": round(sum(r["reward"] for r in measured if "reward" in r) / n, 4),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=Path, required=True, help="folder with q05/ (bench/make_random_model.py)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--gpus", default="0,1", help="two GPUs run the configurations side by side; one runs them in turn"
    )
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--extra", action="append", default=[], help="NAME:KEY=V,KEY=V extra configuration to compare"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=V",
        help="override for every configuration (CPU checks)",
    )
    args = p.parse_args()
    overrides = dict(item.split("=", 1) for item in args.set)
    args.out.mkdir(parents=True, exist_ok=True)
    configs = {"seed 001 settings": SEED, "countdown-1x4090 (shipped)": shipped()}
    for spec in args.extra:
        name, _, kv = spec.partition(":")
        configs[name] = dict(item.split("=", 1) for item in kv.split(","))
    gpus = args.gpus.split(",")
    common = {
        "MODEL": str(args.models / "q05"),
        "EMULATE_VRAM_GB": "24",
        "MAX_STEPS": str(args.steps),
        "SEED": "42",
    }
    results, pending = {}, list(configs.items())
    runs = args.out / "runs"
    while pending:
        batch, pending = pending[: len(gpus)], pending[len(gpus) :]
        procs = []
        for gpu, (name, pairs) in zip(gpus, batch, strict=False):
            slug = name.split()[0]
            procs.append(
                (
                    name,
                    pairs,
                    slug,
                    start_train(
                        runs,
                        slug,
                        {**common, **pairs, **overrides, "TRAIN_GPUS": gpu},
                        args.out / f"{slug}.log",
                    ),
                )
            )
        for name, pairs, slug, proc in procs:
            start = time.monotonic()
            rc = proc.wait()
            results[name] = {"config": pairs, "returncode": rc, **summarize(runs / slug, pairs, args.warmup)}
            print(name, json.dumps(results[name]), f"({time.monotonic() - start:.0f} s)", flush=True)
    report = {"environment": environment(), "emulate_vram_gib": 24, "model": "Qwen2.5-0.5B architecture, random weights",
              "steps": args.steps, "warmup_steps": args.warmup, "results": results}  # fmt: skip
    seed, ours = results["seed 001 settings"], results["countdown-1x4090 (shipped)"]
    if "completion_tokens_per_s" in seed and "completion_tokens_per_s" in ours:
        report["speedup_tokens_per_s"] = round(
            ours["completion_tokens_per_s"] / seed["completion_tokens_per_s"], 2
        )
        report["peak_reserved_ratio"] = round(ours["peak_reserved_gib"] / seed["peak_reserved_gib"], 3)
    (args.out / "countdown-throughput.json").write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(report, args.out / "countdown-throughput.md")
    write_plot(report, args.out / "countdown-throughput.png")


def write_markdown(report: dict, path: Path) -> None:
    env = report["environment"]
    lines = [
        "# Countdown GRPO throughput on one emulated 24 GiB card",
        "",
        f"{env['date']}, {', '.join(env['gpus']) or 'GPU unknown'}; torch {env['torch']}, transformers {env['transformers']}, "
        f"ms-swift {env['ms-swift']}, trl {env['trl']}. {report['model']}, {env['generation']}; each process capped at "
        f"{report['emulate_vram_gib']} GiB (EMULATE_VRAM_GB); {report['steps']} steps, the first {report['warmup_steps']} not measured.",
        "",
        "| configuration | completions/step | s/step | completion tokens/s | completions/s | peak reserved GiB | peak NVML GiB | planned GiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in report["results"].items():
        if "s_per_step" not in r:
            lines.append(f"| {name} | failed: {r.get('error', r.get('returncode'))} | | | | | | |")
            continue
        lines.append(
            f"| {name} | {r['completions_per_step']} | {r['s_per_step']} | {r['completion_tokens_per_s']} | {r['completions_per_s']} | "
            f"{r['peak_reserved_gib']} | {r['peak_nvml_gib']} | {r['predicted_gib']} |"
        )
    if "speedup_tokens_per_s" in report:
        lines += ["", f"Shipped recipe vs seed: {report['speedup_tokens_per_s']}x completion tokens/s at "
                      f"{report['peak_reserved_ratio']}x the peak reserved memory."]  # fmt: skip
    if report.get("provenance"):
        lines += ["", f"Provenance: {report['provenance']}"]
    lines += ["", "Configurations:", ""] + [
        f"- {n}: `{' '.join(f'{k}={v}' for k, v in r['config'].items())}`"
        for n, r in report["results"].items()
    ]
    path.write_text("\n".join(lines) + "\n")


def write_plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = {n: r for n, r in report["results"].items() if "completion_tokens_per_s" in r}
    if not done:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    names = list(done)
    a.barh(names, [done[n]["completion_tokens_per_s"] for n in names])
    a.set_xlabel("completion tokens/s")
    b.barh(names, [done[n]["peak_reserved_gib"] for n in names])
    b.set_xlabel("peak reserved GiB")
    fig.suptitle(
        f"countdown GRPO, {report['environment']['gpus'][0] if report['environment']['gpus'] else ''}, 24 GiB cap"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
