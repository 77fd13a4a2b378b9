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
template renders: tests/world/test_prompts.py). Per reward: the mean over prompts of each prompt's mean, with
a 95 % confidence interval (Student's t over prompts), the paired difference adapter - base with its
interval, and pass@1 where the reward is a 0/1 correctness. Written to eval.json, eval.md, eval.png in
the run directory and summarised in manifest.json under "evaluation".

Engine (EVAL_ENGINE): `auto` uses vLLM when torch sees a GPU and vLLM is installed (the image has both),
one engine for both models with the adapter as a LoRA request; else HF `generate` on the CPU. `hf` forces
HF `generate` (on the GPU when there is one); `vllm` without a GPU is refused. vLLM takes
EVAL_GPU_MEMORY_UTILIZATION of the card (default 0.5: evaluate runs alone on it).
"""

from __future__ import annotations

import argparse
import difflib
import json
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from entrypoint.errors import BadInput, Problem
from entrypoint.evaluation import generation, heldout, report, scoring, summary
from entrypoint.facts.facts import MANIFEST
from entrypoint.recipe import load as recipe_mod
from entrypoint.recipe.args import TrainerArgs
from entrypoint.recipe.settings import Settings
from entrypoint.record import manifest as manifest_mod
from entrypoint.record import runlock
from entrypoint.rewards import PLUGIN_FILE
from entrypoint.supervise.console import Progress
from entrypoint.supervise.signals import Interrupted, interruptible

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


# the keys `evaluate` reads (settings.py owns them), beside run=NAME
KEYS = frozenset({"OUTPUT_DIR", *(k for k in Settings.model_fields if k.startswith("EVAL_"))})


class Asked(NamedTuple):
    """What `evaluate run=NAME KEY=VALUE ...` asks for."""

    run: str  # a RUN_NAME under OUTPUT_DIR, `latest`, or a run directory's path
    settings: Settings  # OUTPUT_DIR and the EVAL_* keys, typed


def parse_pairs(pairs: Sequence[str], environ: Mapping[str, str] | None = None) -> Asked:
    """The run and the settings from `run=NAME KEY=VALUE ...` over the same keys in `environ` (the image sets
    OUTPUT_DIR=/output; `make eval RUN=x EVAL_PROMPTS=4` passes them as environment), parsed and typed as
    `train` parses its keys (recipe.parse_cli_pairs, settings.Settings). Raises BadInput with every
    problem."""
    cli, problems = recipe_mod.parse_cli_pairs(list(pairs))
    run = cli.pop("RUN", None)
    env = {k: v for k, v in recipe_mod.environment_layer(environ or {}).items() if k in KEYS}
    values = {**env, **cli}
    for key in sorted(set(cli) - KEYS):
        close = difflib.get_close_matches(key, sorted(KEYS), n=1)
        problems.append(
            Problem(
                key,
                "is not a key of `evaluate`",
                f"did you mean {close[0]}?" if close else f"use run=NAME and {', '.join(sorted(KEYS))}",
            )
        )
    if run is None or not run.value:
        problems.append(
            Problem("RUN", "no run named", "add run=<RUN_NAME> (a directory under OUTPUT_DIR), or run=latest")
        )
    settings = recipe_mod.settings_of({k: v.value for k, v in values.items() if k in KEYS}, values, problems)
    if problems:
        raise BadInput(problems)
    return Asked(run.value, settings)


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
        except (Interrupted, KeyboardInterrupt) as exc:  # KeyboardInterrupt: a library imported meanwhile
            signum = (
                exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            )  # put Python's handler back
            printer(f"evaluate stopped by {signal.Signals(signum).name}: no eval.* written in {run_dir}")
            raise Interrupted(signum) from None


def _adapter_config(adapter: Path) -> dict[str, Any]:
    """The adapter's adapter_config.json, which PEFT and vLLM read (raises BadInput, before a model loads,
    for one that is not a JSON object: cut short by a full disk, edited by hand)."""
    path = adapter / "adapter_config.json"
    try:
        config = json.loads(path.read_text())
        why = "" if isinstance(config, dict) else f"holds {json.dumps(config)[:40]}, not a JSON object"
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        config, why = None, f"cannot be read as JSON ({getattr(exc, 'strerror', None) or exc})"
    if why:
        raise BadInput(
            [
                Problem(
                    f"run {adapter.parent.name}",
                    f"{path} {why}",
                    "restore it from a copy; adapter/ is the newest checkpoint's adapter "
                    "(train/checkpoint-N/, base_model_name_or_path set to the run's MODEL)",
                )
            ]
        )
    return config


def _evaluate(run_dir: Path, settings: Settings, environ: Mapping[str, str], printer) -> int:
    """`evaluate` once the run directory is held: generate, score, write."""
    try:
        data, why = manifest_mod.read(run_dir), ""
    except manifest_mod.Unreadable as exc:  # edited by hand: a value of another type than train writes
        why = str(exc)
    except ValueError as exc:  # cut short (a full disk, a copy that stopped): not JSON
        why = f"is not readable JSON ({exc})"
    except OSError as exc:
        why = f"cannot be read ({exc.strerror or exc})"
    if why:
        raise BadInput(
            [
                Problem(
                    f"run {run_dir.name}",
                    f"{run_dir / MANIFEST} {why}: "
                    "evaluate reads the run's plan (its trainer's arguments, rewards and dataset) from it",
                    "restore manifest.json from a copy; or start the run again with the same RUN_NAME "
                    "(it resumes from its newest checkpoint and writes a new manifest)",
                )
            ]
        ) from None
    data = data or {}
    adapter = run_dir / "adapter"
    if not (adapter / "adapter_config.json").is_file():
        raise BadInput(
            [
                Problem(
                    f"run {run_dir.name}",
                    f"has no adapter yet (status {data.get('status', 'unknown')}; {adapter} is missing)",
                    "finish the run first: start it again with the same RUN_NAME to resume",
                )
            ]
        )
    _adapter_config(adapter)
    note = report.unfinished(data)
    if note:
        printer(f"note: {note}")
    here = generation.gpu_and_vllm(environ)
    args = heldout.trainer_args(data)
    trained = TrainerArgs.of(args)
    quantized = generation.Quantized.of(trained.bnb_bits, trained.bnb_4bit_quant_type)
    engine = generation.engine_for(
        generation.choose_engine(settings.EVAL_ENGINE, here.gpu, here.vllm), quantized, here.gpu
    )
    rows, how = heldout.held_out(data, args, settings)
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
    system = trained.system
    prompts = [heldout.prompt_messages(r, system) for r in rows]
    plugins = [p for p in args.get("external_plugins", []) if recipe_mod.is_file(p)] or [str(PLUGIN_FILE)]
    rewards = scoring.load_rewards(args.get("reward_funcs", []), plugins)
    scoring.probe_rewards(rewards, rows, prompts, how)
    model_path = data.get("model", {}).get("path") or (args.get("model") or [""])[0]
    printer(
        f"evaluating {run_dir.name}: {len(prompts)} held-out prompts x {settings.EVAL_GENERATIONS} "
        f"completions, base then adapter ({'vLLM' if engine == 'vllm' else 'HF generate'}"
        + (f", the base in bitsandbytes {quantized.bits}-bit as trained" if quantized else "")
        + ")"
    )
    sample = heldout.sampling(args)
    progress = Progress(2 * len(prompts))  # both models answer every prompt
    with generation.heartbeat(progress, printer):
        if engine == "vllm":
            base_text, tuned_text = generation.generate_vllm(
                model_path, adapter, prompts, sample, settings, progress, printer, quantized
            )
        else:
            base_text = generation.generate(
                model_path, None, prompts, sample, settings, printer, progress, quantized
            )
            tuned_text = generation.generate(
                model_path, adapter, prompts, sample, settings, printer, progress, quantized
            )
    base = scoring.score(rewards, rows, prompts, base_text)
    tuned = scoring.score(rewards, rows, prompts, tuned_text)
    stats = summary.summarize(base, tuned)
    result = {
        "run": run_dir.name,
        "model": model_path,
        "adapter": str(adapter),
        "prompts": {"how": how, "count": len(prompts)},
        "engine": engine,
        "quantized": quantized._asdict() if quantized else None,  # the base as the trainer loaded it
        "settings": {
            "prompts": settings.EVAL_PROMPTS,
            "generations": settings.EVAL_GENERATIONS,
            "seed": settings.EVAL_SEED,
            "dataset": settings.EVAL_DATASET,
            "engine": settings.EVAL_ENGINE,
            "gpu_memory_utilization": settings.EVAL_GPU_MEMORY_UTILIZATION,
        },
        "sampling": sample,
        "summary": stats,
        "verdict": summary.verdict(stats),
        "run_status": data.get("status"),
        "checkpoint": data.get("checkpoint"),
        "unfinished": note,
    }
    if (run_dir / "eval.json").is_file():
        printer(
            f"replacing the earlier evaluation in {run_dir} ({', '.join(report.EVAL_FILES)}, the manifest's "
            "summary)"
        )
    report.write(run_dir, result)
    report.write_completions(
        run_dir / report.COMPLETIONS_FILE,
        prompts,
        {"base": (base_text, base), "adapter": (tuned_text, tuned)},
    )
    printer(f"before/after: {result['verdict']}")
    printer(f"evaluation: {run_dir / 'eval.md'}")
    return 0
