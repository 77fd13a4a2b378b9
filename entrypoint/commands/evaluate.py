"""`evaluate run=NAME`: did training help? The base model and the run's adapter answer the same held-out
prompts with the same sampling, and the run's own reward functions score both. `run=` is a RUN_NAME under
OUTPUT_DIR, `latest`, or the path of a run directory (one holding manifest.json, wherever it is: a run
copied off a GPU box is evaluated where it lies; eval.* are written beside its manifest).

    python -m entrypoint evaluate run=smoke-20261201-120000 [EVAL_PROMPTS=32] [EVAL_GENERATIONS=4]
                                  [EVAL_SEED=1234] [EVAL_DATASET=/data/heldout.jsonl] [OUTPUT_DIR=output]

Held-out prompts: fresh tasks from the run's generator with another seed (training tasks removed), or
EVAL_DATASET, or the run's VAL_DATASET. A run trained on a file with no held-out split is refused: its
rows were all seen in training. Each prompt gets EVAL_GENERATIONS completions from each model (HF
`generate`, the run's TEMPERATURE / TOP_P / TOP_K / MAX_COMPLETION_LENGTH, the same torch seed for both),
rendered with the tokenizer's chat template (for the embedded and Qwen models, the same text ms-swift's
template renders: tests/test_prompts.py). Per reward: the mean over prompts of each prompt's mean, with a
95 % confidence interval (Student's t over prompts), the paired difference adapter - base with its
interval, and pass@1 where the reward is a 0/1 correctness. Written to eval.json, eval.md, eval.png in
the run directory and summarised in manifest.json under "evaluation".

Engine (EVAL_ENGINE): `auto` uses vLLM when torch sees a GPU and vLLM is installed (the image has both),
one engine for both models with the adapter as a LoRA request; else HF `generate` on the CPU. `hf` forces
HF `generate` (on the GPU when there is one); `vllm` without a GPU is refused. vLLM takes
EVAL_GPU_MEMORY_UTILIZATION of the card (default 0.5: evaluate runs alone on it).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import json
import math
import signal
import statistics
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from entrypoint.errors import BadInput, Problem
from entrypoint.facts import datasets
from entrypoint.facts.facts import MANIFEST
from entrypoint.recipe import load as recipe_mod
from entrypoint.recipe.args import TrainerArgs
from entrypoint.recipe.settings import Settings
from entrypoint.record import manifest as manifest_mod
from entrypoint.record import runlock
from entrypoint.record.status import Status
from entrypoint.rewards import PLUGIN_FILE, tasks
from entrypoint.supervise.console import Progress
from entrypoint.supervise.supervisor import Interrupted, interruptible
from entrypoint.world import dataset_files

COMPLETIONS_FILE = "eval_completions.jsonl"
EVAL_FILES = ("eval.json", "eval.md", "eval.png", COMPLETIONS_FILE)
NAME = "evaluate"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`evaluate run=NAME [KEY=VALUE ...]`: KEY=VALUE words only (argparse refuses a --flag)."""
    parser = subparsers.add_parser(
        NAME,
        description="Did training help? The base model and the run's adapter on held-out prompts, scored by "
        "the run's own rewards; writes eval.json, eval.md and eval.png in the run directory.",
    )
    parser.add_argument(
        "pairs", nargs="*", metavar="KEY=VALUE", help="run=NAME [EVAL_PROMPTS=32 EVAL_GENERATIONS=4 ...]"
    )
    return parser


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `evaluate` command (cli.py quiets the libraries' notices before anything imports them)."""
    return evaluate(args.pairs, environ)


@dataclasses.dataclass(frozen=True)
class Summary:
    """One reward, one model: over prompts (each prompt's mean over its completions)."""

    mean: float
    low: float  # 95 % confidence interval
    high: float
    prompts: int


def confidence(values: Sequence[float]) -> Summary:
    """Mean and 95 % Student-t interval of per-prompt values."""
    from scipy import stats

    n = len(values)
    mean = statistics.fmean(values) if n else math.nan
    if n < 2:
        return Summary(mean, mean, mean, n)
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Summary(mean, mean - half, mean + half, n)


# the keys `evaluate` reads (settings.py owns them), beside run=NAME
KEYS = frozenset({"OUTPUT_DIR", *(k for k in Settings.model_fields if k.startswith("EVAL_"))})


class Asked(NamedTuple):
    """What `evaluate run=NAME KEY=VALUE ...` asks for."""

    run: str  # a RUN_NAME under OUTPUT_DIR, `latest`, or a run directory's path
    settings: Settings  # OUTPUT_DIR and the EVAL_* keys, typed


def parse_pairs(pairs: Sequence[str], environ: Mapping[str, str] | None = None) -> Asked:
    """The run and the settings from `run=NAME KEY=VALUE ...` over the same keys in `environ` (the image sets
    OUTPUT_DIR=/output; `make eval RUN=x EVAL_PROMPTS=4` passes them as environment), parsed and typed as
    `train` parses its keys (recipe.parse_cli_pairs, settings.Settings). Raises BadInput with every problem."""
    cli, problems = recipe_mod.parse_cli_pairs(list(pairs))
    run = cli.pop("RUN", None)
    env = {k: v for k, v in recipe_mod.environment_layer(environ or {}).items() if k in KEYS}
    values = {**env, **cli}
    for key in sorted(set(cli) - KEYS):
        close = difflib.get_close_matches(key, sorted(KEYS), n=1)
        problems.append(Problem(key, "is not a key of `evaluate`",
                                f"did you mean {close[0]}?" if close else f"use run=NAME and {', '.join(sorted(KEYS))}"))  # fmt: skip
    if run is None or not run.value:
        problems.append(
            Problem("RUN", "no run named", "add run=<RUN_NAME> (a directory under OUTPUT_DIR), or run=latest")
        )
    settings = recipe_mod.settings_of({k: v.value for k, v in values.items() if k in KEYS}, values, problems)
    if problems:
        raise BadInput(problems)
    return Asked(run.value, settings)


def trainer_args(data: Mapping[str, Any]) -> dict[str, list[str]]:
    """The trainer's `swift rlhf` arguments as the run planned them (manifest processes)."""
    trainer = next((p for p in data.get("processes", []) if p.get("role") == "trainer"), None)
    out: dict[str, list[str]] = {}
    name = None
    for token in (trainer or {}).get("argv", [])[2:]:
        if token.startswith("--"):
            name = token[2:]
            out[name] = []
        elif name is not None:
            out[name].append(token)
    return out


class HeldOut(NamedTuple):
    """The prompts `evaluate` asks, and how they were chosen (eval.md says it)."""

    rows: list[dict]  # rows the trainer never saw
    how: str


def held_out(data: Mapping[str, Any], args: Mapping[str, list[str]], settings: Settings) -> HeldOut:
    """The rows the trainer never saw, and how they were chosen. Raises BadInput when there are none."""
    recipe = {k: v["value"] for k, v in data.get("resolved_recipe", {}).items()}
    if settings.EVAL_DATASET:
        rows = _read_rows(Path(settings.EVAL_DATASET), settings.EVAL_PROMPTS, "EVAL_DATASET")
        return HeldOut(rows, f"EVAL_DATASET {settings.EVAL_DATASET}")
    if recipe.get("DATASET_GENERATOR") in tasks.TASKS:
        name = recipe["DATASET_GENERATOR"]
        seen_rows = int(recipe.get("DATASET_ROWS", 256))
        fresh = tasks.held_out(
            tasks.TASKS[name], settings.EVAL_PROMPTS, settings.EVAL_SEED, seen_rows, int(data.get("seed", 42))
        )
        return HeldOut(
            fresh, f"{len(fresh)} fresh {name} tasks (seed {settings.EVAL_SEED}; training tasks removed)"
        )
    if recipe.get("VAL_DATASET"):
        rows = _read_rows(Path(recipe["VAL_DATASET"]), settings.EVAL_PROMPTS, "VAL_DATASET")
        return HeldOut(rows, f"the run's VAL_DATASET {recipe['VAL_DATASET']}")
    raise BadInput([Problem("EVAL_DATASET", f"the run trained on {', '.join(data.get('dataset', [])) or 'its dataset'} with no held-out "
                            "split, so every row was seen in training", "give EVAL_DATASET=<a JSONL of held-out rows in the same format>")])  # fmt: skip


def _read_rows(path: Path, limit: int, key: str) -> list[dict]:
    """The first `limit` rows of a held-out JSONL (or JSON list, CSV) file, read as training data is
    (dataset_files.read_rows: a byte-order mark, a JSON array; the line of a row that is not JSON). Raises
    BadInput naming `key` for a file that is missing, a directory, binary, or holds a broken line."""
    text, why = recipe_mod.read_user_file(path)
    fix = "give a JSONL file (one JSON object per line, as the training data)"
    if text is None:
        raise BadInput([Problem(f"{key} {path}", why, fix)])
    numbered, _, problems = dataset_files.read_rows(path)
    if any(p.fatal for p in problems):
        raise BadInput(
            [dataclasses.replace(p, where=p.where.replace("dataset ", f"{key} ", 1)) for p in problems]
        )
    # conversations as ms-swift reads them (text, `from`/`value`, human/gpt: datasets.standard_messages)
    rows = [
        {**row, "messages": datasets.standard_messages(row.get(datasets.message_column(row)))}
        for _, row in numbered
    ][:limit]
    if not rows or not all(_prompt_ready(r["messages"]) for r in rows):
        raise BadInput(
            [
                Problem(
                    f"{key} {path}",
                    "needs rows with `messages` (and the columns the rewards read)",
                    "use the training data's format",
                )
            ]
        )
    return rows


def _prompt_ready(messages: Any) -> bool:
    return (
        isinstance(messages, list)
        and bool(messages)
        and all(isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages)
    )


def prompt_messages(row: Mapping[str, Any], system: str | None) -> list[dict]:
    """The row's messages as the trainer prompted: SYSTEM first when the row has none."""
    messages = [m for m in row["messages"] if not (m["role"] == "assistant" and m is row["messages"][-1])]
    if system and messages[0]["role"] != "system":
        text, why = recipe_mod.read_user_file(Path(system)) if system.endswith(".txt") else (system, "")
        if text is None:
            raise BadInput([Problem(f"SYSTEM {system}", f"the run's system prompt file {why}",
                                    "evaluate where the run's SYSTEM file is (inside the container)")])  # fmt: skip
        messages = [{"role": "system", "content": text}, *messages]
    return messages


def sampling(args: Mapping[str, list[str]]) -> dict[str, Any]:
    """The run's sampling settings (its argv, typed with ms-swift's defaults: args.TrainerArgs), the same
    for both models."""
    a = TrainerArgs.of(args)
    return {
        "temperature": a.temperature,
        "top_p": a.top_p,
        "top_k": a.top_k,
        "max_new_tokens": a.max_completion_length,
    }


def choose_engine(requested: str, gpu: bool, vllm_installed: bool) -> str:
    """ "hf" or "vllm" for EVAL_ENGINE `requested`, given whether torch sees a GPU and vLLM imports.
    Raises BadInput for `vllm` where it cannot run."""
    if requested == "vllm" and not (gpu and vllm_installed):
        why = "torch sees no GPU" if not gpu else "vLLM is not installed here"
        raise BadInput([Problem("EVAL_ENGINE", f"vllm was asked for, but {why}",
                                "leave EVAL_ENGINE=auto (HF generate), or evaluate inside the GPU image")])  # fmt: skip
    if requested == "hf":
        return "hf"
    return "vllm" if gpu and vllm_installed else "hf"


def _render(tokenizer, prompts: list[list[dict]]) -> list[str]:
    # the chat template's text, tokenized without extra special tokens: what ms-swift's template feeds
    return [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in prompts]


class Answers(NamedTuple):
    """Both models' completions: per prompt, EVAL_GENERATIONS texts each."""

    base: list[list[str]]
    tuned: list[list[str]]  # the adapter's


def generate_vllm(
    model_path: str,
    adapter: Path,
    prompts: list[list[dict]],
    sample: Mapping[str, Any],
    settings: Settings,
    progress: Progress | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> Answers:
    """Base and adapter completions, `settings.EVAL_GENERATIONS` per prompt from one vLLM engine, the
    adapter served as a LoRA request; the same per-request seeds for both. `say` gets a line per model."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    progress = progress or Progress(2 * len(prompts))
    progress.now("starting vLLM (the model's weights, the KV cache)")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in _render(tokenizer, prompts)]
    rank = int(json.loads((adapter / "adapter_config.json").read_text()).get("r", 8))
    max_new = sample["max_new_tokens"]
    llm = LLM(
        model=model_path, enable_lora=True, max_lora_rank=_vllm_lora_rank(rank), max_loras=1, seed=settings.EVAL_SEED,
        gpu_memory_utilization=settings.EVAL_GPU_MEMORY_UTILIZATION, max_model_len=max(len(i) for i in ids) + max_new,
        enforce_eager=True,  # a one-off job: CUDA graph capture costs more than it saves
    )  # fmt: skip
    params = [
        SamplingParams(n=settings.EVAL_GENERATIONS, temperature=sample["temperature"], top_p=sample["top_p"],
                       top_k=sample["top_k"] if sample["top_k"] > 0 else -1, max_tokens=max_new, seed=settings.EVAL_SEED + i)
        for i in range(len(ids))
    ]  # fmt: skip
    requests = [{"prompt_token_ids": i} for i in ids]

    def texts(outputs) -> list[list[str]]:
        return [[c.text for c in o.outputs] for o in outputs]

    n = len(requests)
    try:
        progress.now(f"base model: answering {n} prompts", timed=True)
        base = texts(llm.generate(requests, params, use_tqdm=False))
        say(progress.advance(n, f"base model: {n} of {n} prompts answered"))
        lora = LoRARequest("adapter", 1, str(adapter))
        progress.now(f"adapter: answering {n} prompts", timed=True)
        tuned = texts(llm.generate(requests, params, use_tqdm=False, lora_request=lora))
        say(progress.advance(n, f"adapter: {n} of {n} prompts answered"))
    finally:
        # Without this the V1 engine's core process outlives the answer and the command never exits
        # (seen on the lent H200 with vLLM 0.8.5.post1).
        core = getattr(llm.llm_engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
    return Answers(base, tuned)


def _vllm_lora_rank(rank: int) -> int:
    # vLLM 0.8.5 accepts only these max_lora_rank values (vllm/config.py LoRAConfig.possible_max_ranks)
    return next((r for r in (8, 16, 32, 64, 128, 256, 320, 512) if r >= rank), rank)


def generate(
    model_path: str,
    adapter: Path | None,
    prompts: list[list[dict]],
    sample: Mapping[str, Any],
    settings: Settings,
    say: Callable[[str], None] = lambda line: None,
    progress: Progress | None = None,
) -> list[list[str]]:
    """`settings.EVAL_GENERATIONS` sampled completions per prompt from the base model (adapter None) or base +
    adapter. Same seed, so both models draw the same random numbers. `say` gets a progress line per batch,
    with the ETA of `progress` (both models' prompts, evaluate's)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    label = "adapter" if adapter is not None else "base model"
    progress = progress or Progress(len(prompts))
    progress.now(f"{label}: loading the model")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(
        model_path, torch_dtype=torch.float32 if device == "cpu" else torch.bfloat16
    )
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    model.to(device).eval()
    torch.manual_seed(settings.EVAL_SEED)
    out: list[list[str]] = []
    texts = _render(tokenizer, prompts)
    for start in range(0, len(texts), 8):
        progress.now(
            f"{label}: answering prompts {start + 1}-{min(start + 8, len(texts))} of {len(texts)}", timed=True
        )
        batch = tokenizer(
            texts[start : start + 8], return_tensors="pt", padding=True, add_special_tokens=False
        ).to(device)
        with torch.no_grad():
            ids = model.generate(
                **batch, do_sample=True, num_return_sequences=settings.EVAL_GENERATIONS, **sample,
                pad_token_id=tokenizer.pad_token_id,
            )  # fmt: skip
        decoded = tokenizer.batch_decode(ids[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        out += [
            decoded[i : i + settings.EVAL_GENERATIONS]
            for i in range(0, len(decoded), settings.EVAL_GENERATIONS)
        ]
        say(
            progress.advance(
                len(decoded) // settings.EVAL_GENERATIONS,
                f"{label}: {len(out)} of {len(texts)} prompts answered",
            )
        )
    return out


def load_rewards(names: Sequence[str], plugins: Sequence[str]) -> dict[str, Any]:
    """The run's reward functions as ms-swift would build them: its plugins imported, then orms[name]()."""
    import importlib
    import sys

    for file in plugins:
        path = Path(file)
        if path.is_file():
            sys.path.insert(0, str(path.parent))
            importlib.import_module(path.stem)
    from swift.plugin import orms

    missing = [n for n in names if n not in orms]
    if missing:
        raise BadInput([Problem("REWARD_FUNCS", f"{', '.join(missing)} not registered by the run's plugins {list(plugins)}",
                                "evaluate where the run's EXTERNAL_PLUGINS files are (inside the container)")])  # fmt: skip
    return {n: orms[n]() for n in names}


def probe_rewards(rewards: Mapping[str, Any], rows: list[dict], prompts: list[list[dict]], how: str) -> None:
    """Each reward function on the held-out rows with an empty completion, before any model loads:
    rows without the columns a reward needs (a countdown reward's nums and target) fail here in seconds,
    not after the generation (8 min 44 s in a users' trial, then a raw TypeError). Raises BadInput naming
    the reward, its error and the rows' columns."""
    columns = {k for r in rows for k in r}
    short = [(i, sorted(columns - set(r))) for i, r in enumerate(rows) if columns - set(r)]
    if short and rewards:
        shown = "; ".join(f"row {i + 1} lacks {', '.join(m)}" for i, m in short[:3])
        raise BadInput([Problem("EVAL_DATASET" if how.startswith("EVAL_DATASET") else "held-out rows",
                                f"{len(short)} of the {len(rows)} rows of {how} lack columns the others have ({shown}): "
                                "a reward would get None there and may score it 0 without a word",
                                "give every row the same columns (the training dataset's)")])  # fmt: skip
    sample_rows, sample_prompts = rows, prompts
    for name, func in rewards.items():
        try:
            score({name: func}, sample_rows, sample_prompts, [[""] for _ in sample_rows])
        except Exception as exc:  # a user's reward may raise anything on rows it cannot read
            columns = sorted({k for r in sample_rows for k in r})
            raise BadInput([Problem("EVAL_DATASET" if how.startswith("EVAL_DATASET") else "held-out rows",
                                    f"the run's reward {name} cannot score the rows of {how} ({type(exc).__name__}: "
                                    f"{exc}); their columns: {', '.join(columns)}",
                                    "give rows in the training dataset's format, with the columns the run's rewards "
                                    "read (docs/rewards.md)")]) from None  # fmt: skip


def score(
    rewards: Mapping[str, Any], rows: list[dict], prompts: list[list[dict]], completions: list[list[str]]
) -> dict[str, list[list[float]]]:
    """{reward: per prompt, the reward of each completion} (None scores as 0, as ms-swift's nansum does)."""
    from types import SimpleNamespace

    flat = [c for group in completions for c in group]
    owners = [i for i, group in enumerate(completions) for _ in group]
    columns: dict[str, list] = {}
    for key in {k for r in rows for k in r if k != "messages"}:
        columns[key] = [rows[i].get(key) for i in owners]
    messages = [[*prompts[i], {"role": "assistant", "content": c}] for i, c in zip(owners, flat, strict=True)]
    state = SimpleNamespace(global_step=0, max_steps=1, epoch=0.0)
    out: dict[str, list[list[float]]] = {}
    for name, func in rewards.items():
        values = [
            0.0 if v is None else float(v)
            for v in func(flat, messages=messages, trainer_state=state, **columns)
        ]
        per_prompt: list[list[float]] = [[] for _ in completions]
        for i, v in zip(owners, values, strict=True):
            per_prompt[i].append(v)
        out[name] = per_prompt
    return out


def summarize(
    base: Mapping[str, list[list[float]]], tuned: Mapping[str, list[list[float]]]
) -> dict[str, dict]:
    """Per reward: base, adapter and the paired difference (each a Summary), and pass@1 where 0/1."""
    result = {}
    for name in base:
        b = [statistics.fmean(v) for v in base[name]]
        t = [statistics.fmean(v) for v in tuned[name]]
        binary = all(x in (0.0, 1.0) for group in (*base[name], *tuned[name]) for x in group)
        result[name] = {
            "base": dataclasses.asdict(confidence(b)),
            "adapter": dataclasses.asdict(confidence(t)),
            "difference": dataclasses.asdict(confidence([y - x for x, y in zip(b, t, strict=True)])),
            "pass_at_1": {"base": statistics.fmean(b), "adapter": statistics.fmean(t)} if binary else None,
        }
    return result


def verdict(summary: Mapping[str, dict]) -> str:
    """One line per reward: base -> adapter, and whether the difference's interval excludes 0."""
    parts = []
    for name, s in summary.items():
        d = s["difference"]
        sign = "better" if d["low"] > 0 else "worse" if d["high"] < 0 else "no clear change"
        parts.append(f"{name} {s['base']['mean']:.3f} -> {s['adapter']['mean']:.3f} ({sign}: {d['mean']:+.3f}, 95% CI "
                     f"{d['low']:+.3f}..{d['high']:+.3f})")  # fmt: skip
    return "; ".join(parts)


def write(run_dir: Path, result: dict) -> None:
    """eval.json, eval.md, eval.png; the summary in manifest.json."""
    (run_dir / "eval.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    lines = [f"# Evaluation of {result['run']}", "", f"Prompts: {result['prompts']['how']}; "
             f"{result['settings']['generations']} completions each, sampled alike for both models "
             f"(temperature {result['sampling']['temperature']}, top_p {result['sampling']['top_p']}, top_k "
             f"{result['sampling']['top_k']}, up to {result['sampling']['max_new_tokens']} tokens, seed {result['settings']['seed']}; "
             f"{'vLLM' if result.get('engine') == 'vllm' else 'HF generate'}).", "",
             "| reward | base | adapter | adapter - base (95% CI) | pass@1 base / adapter |", "|---|---|---|---|---|"]  # fmt: skip
    for name, s in result["summary"].items():
        fmt = lambda x: f"{x['mean']:.3f} [{x['low']:.3f}, {x['high']:.3f}]"  # noqa: E731
        p1 = s["pass_at_1"]
        lines.append(f"| {name} | {fmt(s['base'])} | {fmt(s['adapter'])} | {s['difference']['mean']:+.3f} "
                     f"[{s['difference']['low']:+.3f}, {s['difference']['high']:+.3f}] | "
                     + (f"{p1['base']:.3f} / {p1['adapter']:.3f} |" if p1 else "- |"))  # fmt: skip
    lines += ["", f"Verdict: {result['verdict']}", ""]
    if result.get("unfinished"):
        lines += [f"Note: {result['unfinished']}.", ""]
    (run_dir / "eval.md").write_text("\n".join(lines))
    _plot(run_dir / "eval.png", result)
    data = manifest_mod.read(run_dir) or {}
    data["evaluation"] = {"summary": result["summary"], "verdict": result["verdict"], "prompts": result["prompts"],
                          "settings": result["settings"], "files": list(EVAL_FILES)}  # fmt: skip
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
                    f.write(json.dumps({"model": model, "prompt": i, "messages": prompts[i], "completion": text,
                                        "rewards": rewards}, ensure_ascii=False) + "\n")  # fmt: skip


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
        errs = [[m - result["summary"][n][model]["low"] for n, m in zip(names, means, strict=True)],
                [result["summary"][n][model]["high"] - m for n, m in zip(names, means, strict=True)]]  # fmt: skip
        bars = ax.bar([i + offset for i in range(len(names))], means, 0.34, yerr=errs, capsize=4, label=model,
                      color=color)  # fmt: skip
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


@contextlib.contextmanager
def heartbeat(progress: Progress, say: Callable[[str], None], every: float = 1.0) -> Iterator[None]:
    """While the block runs, `say` the progress's heartbeat whenever it is due (console.HEARTBEAT_SECONDS
    of quiet, checked every `every` seconds): on 2 loaded cores a batch of 8 prompts took minutes (once 16
    minutes, with four lines printed in all)."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every):
            line = progress.due()
            if line:
                say(line)

    thread = threading.Thread(target=tick, name="evaluate-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class Engines(NamedTuple):
    """What `evaluate` may generate with here."""

    gpu: bool  # NVML sees a GPU
    vllm: bool  # vLLM is installed


def _gpu_and_vllm(environ: Mapping[str, str]) -> Engines:
    """Whether a GPU is visible and vLLM is installed, a GPU asked of NVML: torch.cuda.is_available() would initialise CUDA
    here, and vLLM's engine process, forked from this one, then fails ("Cannot re-initialize CUDA in
    forked subprocess"; seen on the lent H200)."""
    import importlib.util

    from entrypoint.world import hardware

    return Engines(hardware.gpu_visible(environ), importlib.util.find_spec("vllm") is not None)


def evaluate(pairs: Sequence[str], environ: Mapping[str, str], printer=print) -> int:
    """The `evaluate` command (`environ`: the process environment, read by cli.py); returns the exit status.
    Raises BadInput for bad input (exit 2)."""
    run, settings = parse_pairs(pairs, environ)
    run_dir = manifest_mod.find_run(run, settings.OUTPUT_DIR)
    # Ctrl-C or SIGTERM at any moment: one line and 128 + the signal (cli.py), not a KeyboardInterrupt
    # traceback from inside torch or vLLM; eval.* are written only at the end, so nothing half-written stays
    with interruptible(), runlock.RunLock() as lock:  # a training of this run writes the same manifest
        lock.take(run_dir, required=False)
        try:
            return _evaluate(run_dir, settings, environ, printer)
        except Interrupted as exc:
            printer(f"evaluate stopped by {signal.Signals(exc.signum).name}: no eval.* written in {run_dir}")
            raise


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
    return (f"the run did not finish ({how}{': ' + why if why else ''}); this evaluates its adapter from "
            f"{data.get('checkpoint') or 'its newest complete checkpoint'}{step}")  # fmt: skip


def _evaluate(run_dir: Path, settings: Settings, environ: Mapping[str, str], printer) -> int:
    """`evaluate` once the run directory is held: generate, score, write."""
    try:
        data = manifest_mod.read(run_dir) or {}
    except ValueError as exc:  # cut short (a full disk, a copy that stopped): not JSON
        raise BadInput([Problem(f"run {run_dir.name}", f"{run_dir / MANIFEST} is not readable JSON ({exc}): "
                                "evaluate reads the run's plan (its trainer's arguments, rewards and dataset) from it",
                                "restore manifest.json from a copy; or start the run again with the same RUN_NAME "
                                "(it resumes from its newest checkpoint and writes a new manifest)")]) from None  # fmt: skip
    adapter = run_dir / "adapter"
    if not (adapter / "adapter_config.json").is_file():
        raise BadInput([Problem(f"run {run_dir.name}", f"has no adapter yet (status {data.get('status', 'unknown')}; "
                                f"{adapter} is missing)", "finish the run first: start it again with the same RUN_NAME to resume")])  # fmt: skip
    note = unfinished(data)
    if note:
        printer(f"note: {note}")
    here = _gpu_and_vllm(environ)
    engine = choose_engine(settings.EVAL_ENGINE, here.gpu, here.vllm)
    args = trainer_args(data)
    rows, how = held_out(data, args, settings)
    if len(rows) < 2:
        raise BadInput(
            [
                Problem(
                    "EVAL_PROMPTS",
                    f"only {len(rows)} held-out prompt(s)",
                    "give more rows, or raise EVAL_PROMPTS",
                )
            ]
        )
    system = TrainerArgs.of(args).system
    prompts = [prompt_messages(r, system) for r in rows]
    plugins = [p for p in args.get("external_plugins", []) if Path(p).is_file()] or [str(PLUGIN_FILE)]
    rewards = load_rewards(args.get("reward_funcs", []), plugins)
    probe_rewards(rewards, rows, prompts, how)
    model_path = data.get("model", {}).get("path") or (args.get("model") or [""])[0]
    printer(
        f"evaluating {run_dir.name}: {len(prompts)} held-out prompts x {settings.EVAL_GENERATIONS} completions, "
        f"base then adapter ({'vLLM' if engine == 'vllm' else 'HF generate'})"
    )
    sample = sampling(args)
    progress = Progress(2 * len(prompts))  # both models answer every prompt
    with heartbeat(progress, printer):
        if engine == "vllm":
            base_text, tuned_text = generate_vllm(
                model_path, adapter, prompts, sample, settings, progress, printer
            )
        else:
            base_text = generate(model_path, None, prompts, sample, settings, printer, progress)
            tuned_text = generate(model_path, adapter, prompts, sample, settings, printer, progress)
    base = score(rewards, rows, prompts, base_text)
    tuned = score(rewards, rows, prompts, tuned_text)
    summary = summarize(base, tuned)
    result = {
        "run": run_dir.name, "model": model_path, "adapter": str(adapter),
        "prompts": {"how": how, "count": len(prompts)}, "engine": engine,
        "settings": {"prompts": settings.EVAL_PROMPTS, "generations": settings.EVAL_GENERATIONS,
                     "seed": settings.EVAL_SEED, "dataset": settings.EVAL_DATASET, "engine": settings.EVAL_ENGINE,
                     "gpu_memory_utilization": settings.EVAL_GPU_MEMORY_UTILIZATION},
        "sampling": sample,
        "summary": summary, "verdict": verdict(summary),
        "run_status": data.get("status"), "checkpoint": data.get("checkpoint"), "unfinished": note,
    }  # fmt: skip
    if (run_dir / "eval.json").is_file():
        printer(
            f"replacing the earlier evaluation in {run_dir} ({', '.join(EVAL_FILES)}, the manifest's summary)"
        )
    write(run_dir, result)
    write_completions(
        run_dir / COMPLETIONS_FILE, prompts, {"base": (base_text, base), "adapter": (tuned_text, tuned)}
    )
    printer(f"before/after: {result['verdict']}")
    printer(f"evaluation: {run_dir / 'eval.md'}")
    return 0
