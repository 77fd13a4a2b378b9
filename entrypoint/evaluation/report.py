"""What `evaluate` leaves in the run directory: eval.json, eval.md (with a note when the run did not finish),
eval.png, every scored completion in eval_completions.jsonl, and the summary in manifest.json under
"evaluation"."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from entrypoint.record import manifest as manifest_mod
from entrypoint.record.status import Status

COMPLETIONS_FILE = "eval_completions.jsonl"
EVAL_FILES = ("eval.json", "eval.md", "eval.png", COMPLETIONS_FILE)


def set_aside(run_dir: Path, attempt: int) -> tuple[Path, list[str]]:
    """Move an earlier evaluation's files (EVAL_FILES present in `run_dir`) into
    logs/evaluation-before-attempt-`attempt`/ of the run: a new training attempt changes the adapter they
    judged, and a stale eval.md beside the new adapter would read as its verdict. Returns (that folder, the
    names moved); nothing is deleted."""
    dest = run_dir / "logs" / f"evaluation-before-attempt-{attempt}"
    present = [name for name in EVAL_FILES if (run_dir / name).is_file()]
    if present:
        dest.mkdir(parents=True, exist_ok=True)
        for name in present:
            (run_dir / name).replace(dest / name)
    return dest, present


def unfinished(data: Mapping[str, Any]) -> str:
    """'' for a completed run, else what a reader of its evaluation must know: the run did not finish, and
    which checkpoint (the newest complete one, exported to adapter/ when it ended) is evaluated."""
    status = data.get("status", "unknown")
    if status == Status.COMPLETED:
        return ""
    steps = data.get("steps") or {}
    of = f" of {steps['planned']}" if steps.get("planned") else ""
    step = f", step {steps['completed']}{of}" if steps.get("completed") is not None else ""
    how = "its last attempt ended without recording how" if status == Status.RUNNING else f"status {status}"
    why = (data.get("failure") or {}).get("summary", "") if isinstance(data.get("failure"), dict) else ""
    return (
        f"the run did not finish ({how}{': ' + why if why else ''}); this evaluates its adapter from "
        f"{data.get('checkpoint') or 'its newest complete checkpoint'}{step}"
    )


def write(run_dir: Path, result: dict) -> None:
    """eval.json, eval.md, eval.png; the summary in manifest.json."""
    (run_dir / "eval.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    lines = [
        f"# Evaluation of {result['run']}",
        "",
        f"Prompts: {result['prompts']['how']}; "
        f"{result['settings']['generations']} completions each, sampled alike for both models "
        f"(temperature {result['sampling']['temperature']}, top_p {result['sampling']['top_p']}, top_k "
        f"{result['sampling']['top_k']}, up to {result['sampling']['max_new_tokens']} tokens, seed "
        f"{result['settings']['seed']}; {'vLLM' if result.get('engine') == 'vllm' else 'HF generate'}).",
        "",
        "| reward | base | adapter | adapter - base (95% CI) | pass@1 base / adapter |",
        "|---|---|---|---|---|",
    ]
    for name, s in result["summary"].items():
        fmt = lambda x: f"{x['mean']:.3f} [{x['low']:.3f}, {x['high']:.3f}]"  # noqa: E731
        p1 = s["pass_at_1"]
        lines.append(
            f"| {name} | {fmt(s['base'])} | {fmt(s['adapter'])} | {s['difference']['mean']:+.3f} "
            f"[{s['difference']['low']:+.3f}, {s['difference']['high']:+.3f}] | "
            + (f"{p1['base']:.3f} / {p1['adapter']:.3f} |" if p1 else "- |")
        )
    lines += ["", f"Verdict: {result['verdict']}", ""]
    if result.get("unfinished"):
        lines += [f"Note: {result['unfinished']}.", ""]
    (run_dir / "eval.md").write_text("\n".join(lines))
    _plot(run_dir / "eval.png", result)
    data = manifest_mod.read(run_dir) or {}
    data["evaluation"] = {
        "summary": result["summary"],
        "verdict": result["verdict"],
        "prompts": result["prompts"],
        "settings": result["settings"],
        "engine": result["engine"],  # the one EVAL_ENGINE (settings.engine, often "auto") resolved to
        "quantized": result.get("quantized"),
        "checkpoint": result.get("checkpoint"),  # the adapter judged (a later attempt moves these files)
        "files": list(EVAL_FILES),
    }
    manifest_mod.write(run_dir, data)


def write_completions(
    path: Path,
    prompts: list[list[dict]],
    by_model: Mapping[str, tuple[list[list[str]], Mapping[str, list[list[float]]]]],
) -> None:
    """One JSON line per scored completion: the model ("base" or "adapter"), the prompt's index and messages,
    the completion's text and each reward's value; what the summary was computed from."""
    with path.open("w", encoding="utf-8") as f:
        for model, (texts, scores) in by_model.items():
            for i, group in enumerate(texts):
                for j, text in enumerate(group):
                    rewards = {name: values[i][j] for name, values in scores.items()}
                    f.write(
                        json.dumps(
                            {
                                "model": model,
                                "prompt": i,
                                "messages": prompts[i],
                                "completion": text,
                                "rewards": rewards,
                            },
                            ensure_ascii=False,
                        )
                        + "\n"
                    )


def _plot(path: Path, result: dict) -> None:
    import matplotlib.pyplot as plt

    fig = figure(result)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(result: dict):
    """eval.png's figure: per reward, base and adapter means with their 95 % intervals, each bar labelled
    with its value (a mean of 0 has no bar to see: the countdown reward of the embedded model)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["summary"])
    fig, ax = plt.subplots(figsize=(max(4, 1.8 * len(names) + 1), 3.2))
    for offset, model, color in ((-0.18, "base", "#999999"), (0.18, "adapter", "#1f77b4")):
        means = [result["summary"][n][model]["mean"] for n in names]
        errs = [
            [m - result["summary"][n][model]["low"] for n, m in zip(names, means, strict=True)],
            [result["summary"][n][model]["high"] - m for n, m in zip(names, means, strict=True)],
        ]
        bars = ax.bar(
            [i + offset for i in range(len(names))],
            means,
            0.34,
            yerr=errs,
            capsize=4,
            label=model,
            color=color,
        )
        ax.bar_label(bars, labels=[f"{m:.3f}" for m in means], fontsize=7, padding=2)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.margins(y=0.15)  # room for the labels above the highest interval
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("mean reward (95% CI)")
    ax.set_title(
        f"{result['run']}\nbase vs adapter on {result['prompts']['count']} held-out prompts", fontsize=9
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
