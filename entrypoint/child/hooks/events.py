"""GRPO_RIG_EVENTS=PATH: rank 0 of the trainer appends one JSON line per GRPO phase to PATH:
{"t": unix seconds, "phase": "sync" | "generate" | "rollout" | "train" | "save", "seconds": ..., ...},
where `rollout` is generation plus scoring and log-probs (ms-swift 3.6.4
GRPOTrainer._generate_and_score_completions), `generate` the generation inside it
(_generate_completions), `sync` the weight push to vLLM (_move_model_to_vllm) and `train` one
micro-batch's training_step, which holds the round's rollout on the round's first micro-batch (HF
Trainer.training_step -> ms-swift _prepare_inputs), `save` a checkpoint written (SwiftMixin._save_checkpoint).
The console heartbeat and the throughput benchmark read them; ms-swift's own logs stay as they are. Each phase
event records the garbage collector's seconds inside it (`gc_seconds`).

Start-up is recorded in the same file, so a reader can name the cause of each second before the first
step: {"phase": "start", "process": "swift" | "launcher" | "worker"} when each process of the trainer's
tree starts, {"phase": "import", "module": ..., "seconds": ...} for the heavy imports of the worker,
and {"phase": "startup", "mark": ..., "seconds": ...} for "arguments parsed", "model loaded", "dataset ready",
"vLLM engine starting", "vLLM engine ready", "trainer ready" and "first step logged" (ms-swift 3.6.4
SwiftPipeline._parse_args, SwiftRLHF._prepare_model_tokenizer, SwiftSft._encode_dataset, GRPOTrainer.__init__,
prepare_vllm and log). entrypoint/supervise/startup.py turns them into the start-up table. The names of
the phases, processes and marks, which the readers import too: entrypoint/child/wire.py.
"""

from __future__ import annotations

import faulthandler
import functools
import os
import signal
import time

from entrypoint.child import runtime, wire
from entrypoint.child.hooks.base import After, Hook, Target
from entrypoint.child.runtime import Events, timed

# the worker's imports whose seconds are recorded: the libraries, ms-swift's training code, its GRPO trainer
WORKER_IMPORTS = (
    "torch",
    "transformers",
    "swift.llm.train",
    "peft",
    "trl",
    "deepspeed",
    "vllm",
    "swift.trainers.rlhf_trainer.grpo_trainer",
)
GRPO_TRAINER = "swift.trainers.rlhf_trainer.grpo_trainer"


def _phase(phase, count=None):
    def make_row(self, args, seconds):
        state = getattr(self, "state", None)
        row = {"phase": phase, "seconds": seconds, "step": getattr(state, "global_step", None)}
        if count is not None and args:
            row["completions"] = count(args[0])
        return row

    return make_row


def _mark(mark, once=False):
    done = []

    def make_row(self, args, seconds):
        if once and done:
            return None
        done.append(True)
        return {"phase": wire.STARTUP, "mark": mark, "seconds": seconds}

    return make_row


def _record_phases(grpo, events: Events) -> None:
    if not runtime.rank0():
        return
    cls = runtime.need(grpo, "GRPOTrainer", getattr(grpo, "__name__", GRPO_TRAINER))
    timed(cls, "_move_model_to_vllm", _phase(wire.SYNC), events)
    timed(cls, "_generate_completions", _phase(wire.GENERATE, count=len), events)
    timed(cls, "_generate_and_score_completions", _phase(wire.ROLLOUT, count=len), events)
    timed(cls, "training_step", _phase(wire.TRAIN), events)
    timed(cls, "_save_checkpoint", _phase(wire.SAVE), events)  # its end: the console stops saying "saving"
    timed(cls, "__init__", _mark(wire.TRAINER_READY), events)
    timed(cls, "log", _mark(wire.FIRST_STEP_LOGGED, once=True), events)
    prepare = runtime.need(cls, "prepare_vllm", f"{cls.__module__}.{cls.__qualname__}")

    @functools.wraps(prepare)
    def prepare_vllm(self, *args, **kwargs):
        events.write({"phase": wire.STARTUP, "mark": wire.VLLM_STARTING})
        return prepare(self, *args, **kwargs)

    cls.prepare_vllm = prepare_vllm
    timed(cls, "prepare_vllm", _mark(wire.VLLM_READY), events)


def _record_arguments(base, events: Events) -> None:
    if runtime.rank0():
        timed(base.SwiftPipeline, "_parse_args", _mark(wire.ARGUMENTS_PARSED, once=True), events)


def _record_model_load(rlhf, events: Events) -> None:
    if runtime.rank0():
        timed(rlhf.SwiftRLHF, "_prepare_model_tokenizer", _mark(wire.MODEL_LOADED), events)


def _record_dataset(sft, events: Events) -> None:
    if runtime.rank0():
        timed(sft.SwiftSft, "_encode_dataset", _mark(wire.DATASET_READY), events)


_STACKS_FILES: list = []  # kept open: faulthandler writes to the file descriptor at the signal


def _stacks_on_signal(events_path: str) -> None:
    """The supervisor asks every process of a stalled run for its threads' stacks (SIGUSR1): each writes them
    into a file of its own, named by its role in the trainer's tree, rank and pid, so the console can show the
    training process's main thread rather than whichever process wrote last (supervise/deaths.py
    stall_excerpt). Empty files are removed when the run ends. Falls back to stderr (the role's log)."""
    label = runtime.process_label().replace(os.sep, "_") or "python"
    try:
        folder = os.path.join(os.path.dirname(events_path), wire.STACKS_DIR)
        os.makedirs(folder, exist_ok=True)
        name = f"{label}-rank{os.environ.get('RANK', '0')}-{os.getpid()}.txt"
        # open for the process's life
        f = open(os.path.join(folder, name), "a", encoding="utf-8")  # noqa: SIM115
    except OSError:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        return
    _STACKS_FILES.append(f)
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)


def install(value: str, after: After) -> None:
    """On with a path (the plan gives <run>/logs/events.jsonl); writes this process's `start` event now."""
    if not value:
        return
    events = Events(value)
    _stacks_on_signal(value)
    runtime.GcClock.start()
    after.patch(GRPO_TRAINER, lambda grpo: _record_phases(grpo, events))
    after.patch("swift.llm.base", lambda base: _record_arguments(base, events))
    after.patch("swift.llm.train.rlhf", lambda rlhf: _record_model_load(rlhf, events))
    after.patch("swift.llm.train.sft", lambda sft: _record_dataset(sft, events))
    label = runtime.process_label()
    if runtime.rank0() and label in wire.TRAINER_PROCESSES:
        events.write({"phase": wire.START, "process": label, "t": round(time.time(), 3)})
        if label == wire.WORKER:
            for module in WORKER_IMPORTS:
                after.time(module, events.write)


def _grpo(method: str, sha256: str) -> Target:
    return Target(GRPO_TRAINER, f"GRPOTrainer.{method}", sha256)


HOOK = Hook(
    name="events",
    variable="GRPO_RIG_EVENTS",
    targets=(
        _grpo("_move_model_to_vllm", "dce3819a920054cb"),
        _grpo("_generate_completions", "9c67c7d927277d74"),
        _grpo("_generate_and_score_completions", "0d1d4ab21330b002"),
        _grpo("training_step", "7835d720c3322b40"),
        _grpo("__init__", "3e6bb12909c57536"),
        _grpo("log", "c74f964fcb9d00a7"),
        _grpo("prepare_vllm", "62ee11a2af9769af"),
        # GRPOTrainer inherits it from ms-swift's mixin
        Target("swift.trainers.mixin", "SwiftMixin._save_checkpoint", "99188de871108bf2"),
        Target("swift.llm.base", "SwiftPipeline._parse_args", "0589b0d01622a55e"),
        Target("swift.llm.train.rlhf", "SwiftRLHF._prepare_model_tokenizer", "8901776aaa5c7e50"),
        Target("swift.llm.train.sft", "SwiftSft._encode_dataset", "f4ff059c42191ec3"),
    ),
    upstream=("ms-swift==3.6.4",),
    why="The trainer's phases (sync, generate, rollout, train) and start-up marks as JSON lines in the run's "
    "logs/events.jsonl: the console's heartbeat says what the trainer is doing from them, `train` prints the "
    "start-up table (supervise/startup.py), and the benchmarks time steps by them.",
    saves="no time itself: the evidence of every other hook's saving comes from these events (the start-up "
    "cuts of bench/startup/2026-12-02-0445-startup/, the rounds of bench/countdown_throughput.py)",
    delete_when="when ms-swift reports its GRPO phase and start-up timings itself (per-phase seconds in its "
    "logs) and the console, supervise/startup.py and bench/ read those instead",
    install=install,
)
