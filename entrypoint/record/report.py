"""Human-facing files in the run directory: README.md (how to load the adapter), training curves and
GPU memory plots (PNG) drawn from ms-swift's logging.jsonl and the monitor's gpu.jsonl."""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from entrypoint.record.export import atomic_path, sha256_file
from entrypoint.record.status import Status

if TYPE_CHECKING:
    from entrypoint.plan.build import Plan

README = """# GRPO run `{run}`

Recipe `{recipe}`, base model `{model}`. Status and inputs: `manifest.json`; training log:
`logging.jsonl` (curves: `training_curves.png`); each process's output: `logs/`; ms-swift's
checkpoints: `train/`.

## Load the adapter

With PEFT:

```python
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

base = AutoModelForCausalLM.from_pretrained("{base_path}")
tokenizer = AutoTokenizer.from_pretrained("{base_path}")
model = PeftModel.from_pretrained(base, "adapter")
```

With ms-swift: `swift infer --model {base_path}{swift_extra} --adapters adapter`

With vLLM: `vllm serve {base_path} --enable-lora --lora-modules {run}=adapter`
(vLLM's `--max-lora-rank` must be at least the adapter's rank.)
"""

README_NOTHING_EXPORTED = """# GRPO run `{run}`

No checkpoint was complete, so nothing was exported. Status and the failure: `manifest.json`; each
process's output: `logs/`.
"""

CURVES = [
    ("reward", "reward (mean)"),
    ("reward_std", "reward std within groups"),
    ("loss", "loss"),
    ("kl", "KL to the reference"),
    ("completions/mean_length", "completion length (tokens)"),
    ("grad_norm", "gradient norm"),
]


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _step(row: dict) -> int | None:
    value = row.get("global_step/max_steps")
    return int(str(value).split("/")[0]) if value else None


# ms-swift logs each reward as rewards/<class name>/mean; the recipe names them by their orms key
# (v3.6.4:swift/plugin/orm.py:398-407 for the built-ins; entrypoint/rewards/grpo_rig_rewards.py for ours).
BUILTIN_REWARD_CLASSES = {
    "ReactORM": "toolbench",
    "MathORM": "math",
    "MathAccuracy": "accuracy",
    "Format": "format",
    "ReActFormat": "react_format",
    "CosineReward": "cosine",
    "RepetitionPenalty": "repetition",
    "SoftOverlong": "soft_overlong",
}


def reward_names(plugins: dict | None, reward_funcs: Collection[str]) -> dict[str, str]:
    """{class name as logged: the name the recipe used}, from the plugin probe's answer (facts.plugins)."""
    names = dict(BUILTIN_REWARD_CLASSES)
    for name, info in ((plugins or {}).get("registered") or {}).items():
        cls = info.get("class", "")
        if cls and not cls.startswith("ms-swift built-in"):
            names[cls] = name
    return {cls: name for cls, name in names.items() if name in reward_funcs} or names


def unfinished(rows: list[dict], status: Status) -> str:
    """The curves' warning for a run that did not complete ("" when it did): its status and the last step it
    logged of the planned ones, so a failed run's curves do not read as a finished run's."""
    if status == Status.COMPLETED:
        return ""
    last = rows[-1].get("global_step/max_steps", "?") if rows else "?"
    done, _, planned = str(last).partition("/")
    return (
        f"{status.upper()} after step {done}" + (f" of {planned}" if planned else "") + ": not a finished run"
    )


def training_curves(
    logging_jsonl: Path,
    out: Path,
    title: str = "",
    names: dict[str, str] | None = None,
    status: Status = Status.COMPLETED,
) -> bool:
    """Reward (and each reward function, by the recipe's names), loss, KL, completion length against the
    step (integer ticks); a run that did not complete (`status`, launch.Outcome's) says so in red above
    them. False: no data."""
    rows = [r for r in _rows(logging_jsonl) if "reward" in r and _step(r) is not None]
    if not rows:
        return False
    warning = unfinished(rows, status)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    per_function = sorted({k for r in rows for k in r if k.startswith("rewards/") and k.endswith("/mean")})
    panels = [(k, t) for k, t in CURVES if any(k in r for r in rows)]
    fig, axes = plt.subplots(len(panels) + 1, 1, figsize=(8, 2.4 * (len(panels) + 1)), sharex=True)
    steps = [_step(r) for r in rows]
    for key in per_function:
        logged = key.split("/")[1]
        axes[0].plot(steps, [r.get(key) for r in rows], marker=".", label=(names or {}).get(logged, logged))
    if per_function:  # an empty legend warns (a log without per-function means: the total only)
        axes[0].set_title("reward per function (mean)")
        axes[0].legend(fontsize=8)
    else:
        axes[0].plot(steps, [r.get("reward") for r in rows], marker=".")
        axes[0].set_title("reward (mean)")
    for ax, (key, panel) in zip(axes[1:], panels, strict=True):
        ax.plot(steps, [r.get(key) for r in rows], marker=".")
        ax.set_title(panel)
    axes[-1].set_xlabel("step")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    if title or warning:
        text = "\n".join(t for t in (title, warning) if t)
        fig.suptitle(text, fontsize=10, color="#c62828" if warning else "black")
    top = 1 - 0.015 * (bool(title) + bool(warning))
    fig.tight_layout(
        rect=(0, 0, 1, top) if title or warning else None
    )  # room for the title above the first panel
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=80, format="png")
    plt.close(fig)
    return True


def gpu_memory_plot(gpu_jsonl: Path, out: Path, predicted: dict[int, float]) -> bool:
    """Memory used per GPU over time, training steps marked, the planner's prediction dashed."""
    rows = _rows(gpu_jsonl)
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for gpu in sorted({r["gpu"] for r in rows}):
        mine = [r for r in rows if r["gpu"] == gpu]
        line = ax.plot([r["t"] for r in mine], [r["memory_gib"] for r in mine], label=f"GPU {gpu}")[0]
        if gpu in predicted:
            ax.axhline(
                predicted[gpu],
                color=line.get_color(),
                linestyle="--",
                linewidth=1,
                label=f"GPU {gpu} planned peak",
            )
    first = [r for r in rows if r["gpu"] == rows[0]["gpu"]]
    for before, after in zip(first, first[1:], strict=False):
        if after["step"] != before["step"]:
            ax.axvline(after["t"], color="grey", linewidth=0.5)
            ax.text(after["t"], ax.get_ylim()[1], str(after["step"]), fontsize=6, va="top")
    ax.set_xlabel("seconds since start (grey lines: training steps)")
    ax.set_ylabel("GiB used (NVML)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=80, format="png")
    plt.close(fig)
    return True


def write(plan: Plan, run_dir: Path, status: Status = Status.COMPLETED) -> dict[str, str]:
    """README.md and the plots of a run whose outcome is `status` (COMPLETED, FAILED or STOPPED);
    returns {relative path: sha256} of what it wrote."""
    trainer = plan.process("trainer")
    swift_extra = "".join(
        f" --{k} {trainer.flag(k)[0]}" for k in ("model_type", "template") if trainer.flag(k)
    )
    if not ((run_dir / "adapter").is_dir() or (run_dir / "model").is_dir()):
        with atomic_path(run_dir / "README.md") as tmp:
            tmp.write_text(README_NOTHING_EXPORTED.format(run=plan.run_name))
        return {"README.md": sha256_file(run_dir / "README.md")}
    with atomic_path(run_dir / "README.md") as tmp:
        tmp.write_text(
            README.format(
                run=plan.run_name,
                recipe=plan.recipe.name,
                model=plan.recipe.trainer_args.model,
                base_path=plan.model_path,
                swift_extra=swift_extra,
            )
        )
    written = ["README.md"]
    names = reward_names(plan.facts.plugins, plan.recipe.trainer_args.reward_funcs)
    title = f"{plan.run_name} ({plan.recipe.name}, {plan.recipe.trainer_args.model})"
    if training_curves(run_dir / "logging.jsonl", run_dir / "training_curves.png", title, names, status):
        written.append("training_curves.png")
    predicted = {e.gpu: e.peak_gib for e in plan.memory}
    if gpu_memory_plot(run_dir / "gpu.jsonl", run_dir / "gpu_memory.png", predicted):
        written.append("gpu_memory.png")
    return {name: sha256_file(run_dir / name) for name in written}
