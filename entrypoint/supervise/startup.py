"""Where the seconds before the first training step go: the start-up table of a run, from its events.

The trainer's site hook (entrypoint/child/hooks/events.py, GRPO_RIG_EVENTS) writes a line when each
process of the trainer's tree starts, when the worker's heavy imports finish, and at the start-up marks
below; commands/train.py writes the entrypoint's own start. vLLM's engine logs how long its parts took
(vllm 0.8.5.post1: "Loading weights took", "torch.compile takes ... in total", "Graph capturing finished
in", "init engine ... took"). `table` lines both up: seconds from the command to each mark, and what
happened in between.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from entrypoint.child import wire

# (mark, what the seconds before it were spent on); the order of a colocated vLLM run
TRAINER_STARTED = "trainer started"  # the first START row of the trainer's tree
WORKER_STARTED = "worker started"  # the worker's START row
MARKS = (
    (TRAINER_STARTED, "the entrypoint: recipe, preflight, reward probe, dataset generation"),
    (WORKER_STARTED, "ms-swift's CLI and torchrun's launcher starting the worker (none for one process)"),
    (wire.ARGUMENTS_PARSED, "imports (torch, transformers, ms-swift), ms-swift's arguments"),
    (wire.MODEL_LOADED, "the model's weights and tokenizer"),
    (wire.DATASET_READY, "the template, loading and encoding the dataset"),
    (wire.VLLM_STARTING, "LoRA set-up, importing the GRPO trainer, the trainer's construction"),
    (wire.VLLM_READY, "vLLM: weights, torch.compile, KV cache, CUDA graphs (detail below)"),
    (wire.TRAINER_READY, "the rest of the trainer's construction"),
    (wire.FIRST_STEP_LOGGED, "the first step: weight sync, generation, scoring, training"),
)
VLLM_PARTS = {
    "weights": r"Loading weights took ([\d.]+) seconds",
    "torch.compile": r"torch\.compile takes ([\d.]+) s in total",
    "CUDA graphs": r"Graph capturing finished in ([\d.]+) secs",
    "whole engine": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) seconds",
}


def marks(events: Iterable[Mapping], command_start: float | None = None) -> dict[str, float]:
    """{mark: seconds from the command} for the marks the events hold, first occurrence; `import <module>`
    entries say when each timed import finished. The command's start is `command_start` (unix seconds),
    else the entrypoint's own start event; with several attempts in one file (a resumed run), the last."""
    events = list(events)
    starts = [i for i, e in enumerate(events) if wire.attempt_start(e)]
    if starts:
        events = events[starts[-1] :]
        command_start = events[0]["t"] if command_start is None else command_start
    if command_start is None:
        return {}
    out: dict[str, float] = {}
    for e in events:
        names = []
        if e.get("phase") == wire.START and e.get("process") != wire.ENTRYPOINT:
            # the first process of the trainer's tree; a one-process run starts the worker itself
            names = [TRAINER_STARTED, *([WORKER_STARTED] if e.get("process") == wire.WORKER else [])]
        elif e.get("phase") == wire.STARTUP:
            names = [e.get("mark")]
        elif e.get("phase") == wire.IMPORT:
            names = [f"import {e.get('module')}"]
        for name in names:
            if name and name not in out and isinstance(e.get("t"), int | float):
                out[name] = round(e["t"] - command_start, 1)
    return out


def read_events(path: Path) -> list[dict]:
    """The events file's lines as dicts; a line cut short by a crash is skipped. Raises OSError."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def vllm_parts(log_text: str) -> dict[str, float]:
    """{part: seconds} of the first vLLM engine's start, from its log lines (VLLM_PARTS)."""
    found = {}
    for part, pattern in VLLM_PARTS.items():
        m = re.search(pattern, log_text)
        if m:
            found[part] = float(m.group(1))
    return found


def table(at: Mapping[str, float], vllm: Mapping[str, float] | None = None) -> list[str]:
    """Markdown rows: each mark reached, seconds from the command, seconds since the previous mark, and what
    those seconds were spent on; the timed imports and vLLM's parts after them."""
    rows = ["| mark | s from the command | s since the previous | spent on |", "|---|---|---|---|"]
    before = 0.0
    for mark, cause in MARKS:
        if mark in at:
            rows.append(f"| {mark} | {at[mark]:.1f} | {at[mark] - before:.1f} | {cause} |")
            before = at[mark]
    imports = sorted((s, name) for name, s in at.items() if name.startswith("import "))
    if imports:
        rows.append("")
        rows.append(
            "Imports finished (s from the command): " + ", ".join(f"{n[7:]} {s:.1f}" for s, n in imports)
        )
    if vllm:
        rows.append("")
        rows.append("vLLM engine (s, its own log): " + ", ".join(f"{k} {v:.1f}" for k, v in vllm.items()))
    return rows
