"""Does a GRPO run make the model better? Train a recipe through the entrypoint, then `evaluate` the adapter
against the base model on held-out tasks.

    python bench/learning.py --recipe smoke --steps 24 --prompts 48 --out bench/learning/latest/cpu-smoke
    python bench/learning.py --recipe arithmetic-gpu --steps 300 --prompts 200 \
        --set EMULATE_VRAM_GB=24 --out bench/learning/latest/arithmetic-gpu          (a GPU: vLLM colocated)

`--set KEY=VALUE` goes to `train` (and, for EMULATE_VRAM_GB, to evaluate's vLLM through the same site hook);
`evaluate` runs with the engine it picks (vLLM on a GPU, HF generate on the CPU) unless `--engine` says.
Writes into --out (default bench/learning/latest, git-ignored): the run's logging.jsonl, manifest.json,
training_curves.png, eval.json, eval.md, eval.png, and learning.md with the command, the wall times, the
machine and the verdict. To publish: the report (learning.md, eval.md, eval.json and the two figures) goes to
docs/benchmarks/learning-*/, the raw run (logging.jsonl, manifest.json) into an archive under bench/learning/
(its README says how).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("logging.jsonl", "manifest.json", "training_curves.png", "eval.json", "eval.md", "eval.png")


def run(argv: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, cwd=ROOT, check=True, env=env)  # noqa: S603
    return time.monotonic() - start


def machine() -> str:
    """The GPU by NVML's name, else the CPU cores."""
    try:
        import pynvml

        pynvml.nvmlInit()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        return f"{name if isinstance(name, str) else name.decode()} ({os.cpu_count()} CPU cores)"
    except Exception:
        return f"{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}, no GPU)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="smoke")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--prompts", type=int, default=48, help="held-out prompts for evaluate")
    p.add_argument("--generations", type=int, default=4, help="completions per held-out prompt and model")
    p.add_argument("--rows", type=int, default=512, help="DATASET_ROWS")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a recipe key for train")
    p.add_argument("--engine", default="auto", help="EVAL_ENGINE")
    p.add_argument("--name", default="", help="RUN_NAME (default learning-<unix time>)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "learning" / "latest")
    p.add_argument("--output-dir", default="/tmp/grpo-rig-learning")
    args = p.parse_args()
    name = args.name or f"learning-{int(time.time())}"
    py, env = sys.executable, dict(os.environ)
    sets = dict(kv.split("=", 1) for kv in args.set)
    eval_env = dict(env)
    if sets.get("EMULATE_VRAM_GB"):  # evaluate's vLLM on the same emulated card (entrypoint/child/site)
        site = str(ROOT / "entrypoint" / "child" / "site")
        eval_env |= {
            "GRPO_RIG_EMULATE_VRAM_GB": sets["EMULATE_VRAM_GB"],
            "PYTHONPATH": os.pathsep.join(x for x in (site, env.get("PYTHONPATH", "")) if x),
        }
    train_argv = [
        py,
        "-m",
        "entrypoint",
        "train",
        f"recipe={args.recipe}",
        f"RUN_NAME={name}",
        f"OUTPUT_DIR={args.output_dir}",
        f"MAX_STEPS={args.steps}",
        f"DATASET_ROWS={args.rows}",
        f"SAVE_STEPS={args.steps}",
        "SAVE_TOTAL_LIMIT=1",
        *args.set,
    ]
    eval_argv = [
        py,
        "-m",
        "entrypoint",
        "evaluate",
        f"run={name}",
        f"OUTPUT_DIR={args.output_dir}",
        f"EVAL_PROMPTS={args.prompts}",
        f"EVAL_GENERATIONS={args.generations}",
        f"EVAL_ENGINE={args.engine}",
    ]
    train = run(train_argv, env)
    evaluate = run(eval_argv, eval_env)
    run_dir = Path(args.output_dir) / name
    args.out.mkdir(parents=True, exist_ok=True)
    for f in COPIED:
        if (run_dir / f).exists():
            shutil.copy(run_dir / f, args.out / f)
    result = json.loads((run_dir / "eval.json").read_text())
    m = json.loads((run_dir / "manifest.json").read_text())
    shown = [a.replace(str(ROOT) + "/", "") for a in sys.argv[1:]]
    lines = [
        "# Does GRPO make the model better?",
        "",
        f"`python bench/learning.py {' '.join(shown)}` on {machine()}: recipe `{args.recipe}` for "
        f"{args.steps} GRPO steps (run `{m['status']}`, {m['steps']['completed']} of {m['steps']['planned']} "
        f"steps), then `evaluate` ({result['engine']}) on {result['prompts']['how']}, {args.generations} "
        "completions each from the base model and from the adapter.",
        "",
        f"Wall time: training {train / 60:.1f} min, evaluation {evaluate / 60:.1f} min, total "
        f"{(train + evaluate) / 60:.1f} min.",
        "",
        f"Verdict: {result['verdict']}",
        "",
        "The table (eval.md), the bars (eval.png), the training curves (training_curves.png), the per-step "
        "log (logging.jsonl) and the run's manifest are beside this file as written; published, the last two "
        "are archived under bench/learning/.",
        "",
    ]
    lines += unlearned(result)
    (args.out / "learning.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def unlearned(result: dict) -> list[str]:
    """A sentence for each 0/1 reward that neither model ever earned: what the model cannot learn here."""
    out = []
    for name, s in result["summary"].items():
        p1 = s.get("pass_at_1")
        if p1 and p1["base"] == 0 and p1["adapter"] == 0:
            out += [
                f"`{name}` stayed at 0 for both models: in this budget the model does not solve a single "
                f"held-out task ({result['prompts']['count']} x {result['settings']['generations']} "
                f"completions, up to {result['sampling']['max_new_tokens']} tokens).",
                "",
            ]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
