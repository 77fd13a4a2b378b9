"""Step-time model: the seconds a colocated GRPO step spends training, for the planner's choice among the
levers that do not change what is learned (the micro-batch, gradient checkpointing, liger's fused loss).

One optimizer step trains its completions in micro-batches; each micro-batch costs, on the card the model
was measured on,

    per micro-batch = base[lever] + per_ktoken[lever] x (micro-batch x (prompt + completion tokens)) / 1000

with `lever` one of "plain", "plain, checkpointing", "liger", "liger, checkpointing" (liger's fused loss,
gradient checkpointing). The coefficients are fitted by bench/fit_speed.py to the phase events of the
throughput benchmark's lever runs (bench/calibration/speed-calibration.json; tests/plan/test_speed.py checks
every point): Qwen2.5-0.5B, countdown-1x4090's 32 completions per step, on the lent H200 capped at 24 GiB,
with the planner's expandable segments (bench/calibration/2026-12-02-1733-levers-expandable-segments/). There
a micro-batch's time hardly
depends on its size (the small model leaves the GPU waiting on kernel launches: 0.37 s at micro-batch 4,
0.41 s at 16 with checkpointing), so fewer, larger micro-batches win; checkpointing recomputes each
layer's forward (0.22 s without it at micro-batch 8, 0.23 s with liger at 16); liger's fused loss computes
the loss a chunk at a time. On a slower card the per-token term grows; the ranking it gives (fewer
micro-batches, no recompute when memory allows) is the same.

The generation round (a colocated vLLM engine, weight sync included) is the same for every micro-batch and
differs by engine: vLLM 0.8.5's V1 engine, or its V0 engine with N decode steps per schedule (multi-step
scheduling, VLLM_SCHEDULER_STEPS). At countdown-1x4090's 32 sequences of a 0.5B model a decode step is one
host core's work (bench/generation/2026-12-03-0828-engines/: CPU seconds = wall seconds), so

    round = MAX_COMPLETION_LENGTH decode steps x seconds per decode step[engine]

with the seconds per step fitted to the trainer's measured rounds (bench/fit_generation.py,
bench/calibration/generation-calibration.json, data/generation_coefficients.json; tests/plan/test_speed.py
checks every point). Multi-step scheduling pays the host's scheduling and output handling once per N steps.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping

from entrypoint.plan.memory import DATA, Workload

LEVERS = ("plain", "plain, checkpointing", "liger", "liger, checkpointing")
# Until bench/fit_speed.py writes data/speed_coefficients.json: medians of the 2026-12-02 H200 lever runs.
DEFAULT_COEFFICIENTS = {
    "plain": (0.27, 0.0),
    "plain, checkpointing": (0.52, 0.0),
    "liger": (0.38, 0.0),
    "liger, checkpointing": (0.62, 0.0),
}


# Engines data/generation_coefficients.json lacks (bench/fit_generation.py fits the measured ones): the
# trainer's rounds of 2026-12-03 07:11-09:10 over 256 decode steps (bench/throughput/, bench/generation/);
# "v0, 8 steps" from vLLM alone (0.993 s a round, bench/generation/2026-12-03-0828-engines/) plus the
# trainer's weight sync (0.11 s), until a trainer's rounds are measured.
DEFAULT_GENERATION = {"v1": 0.0084, "v0": 0.0067, "v0, 8 steps": 0.0043}


@functools.cache
def coefficients() -> dict[str, tuple[float, float]]:
    """{lever: (base seconds, seconds per 1000 tokens)} per micro-batch (data/speed_coefficients.json)."""
    path = DATA / "speed_coefficients.json"
    if path.exists():
        fitted = json.loads(path.read_text())["coefficients"]
        return {**DEFAULT_COEFFICIENTS, **{k: tuple(v) for k, v in fitted.items()}}
    return dict(DEFAULT_COEFFICIENTS)


def lever(w: Workload) -> str:
    """The lever class of a workload: liger's fused loss or not, gradient checkpointing or not."""
    name = "liger" if w.liger else "plain"
    return f"{name}, checkpointing" if w.gradient_checkpointing else name


@dataclasses.dataclass(frozen=True)
class TrainingTime:
    """Predicted training seconds of one optimizer step on one process."""

    lever: str
    micro_batches: int
    per_micro_batch: float  # seconds

    @property
    def seconds(self) -> float:
        return self.micro_batches * self.per_micro_batch

    def render(self) -> str:
        return f"{self.micro_batches} x {self.per_micro_batch:.2f} s ({self.lever})"


def training_time(
    w: Workload, per_process: int, coef: Mapping[str, tuple[float, float]] | None = None
) -> TrainingTime:
    """Training seconds of an optimizer step that trains `per_process` completions on this process in
    micro-batches of w.per_device (forward, backward and the reference log-probs; generation excluded)."""
    c = coef or coefficients()
    name = lever(w)
    base, per_ktoken = c[name]
    tokens = w.per_device * (w.prompt_tokens + w.completion_tokens)
    return TrainingTime(name, math.ceil(per_process / w.per_device), base + per_ktoken * tokens / 1000)


def engine(scheduler_steps: int, v0: bool = False) -> str:
    """The engine class of a colocated vLLM: "v0, N steps" (multi-step scheduling, which only V0 has), else
    "v0" (VLLM_USE_V1=0) or "v1"."""
    return f"v0, {scheduler_steps} steps" if scheduler_steps > 1 else "v0" if v0 else "v1"


@functools.cache
def generation_coefficients() -> dict[str, float]:
    """{engine: seconds per decode step} of a generation round (data/generation_coefficients.json)."""
    path = DATA / "generation_coefficients.json"
    fitted = json.loads(path.read_text())["coefficients"] if path.exists() else {}
    return {**DEFAULT_GENERATION, **fitted}


@dataclasses.dataclass(frozen=True)
class GenerationTime:
    """Predicted seconds of one generation round on one process (weight sync included)."""

    engine: str
    decode_steps: int
    per_decode_step: float  # seconds

    @property
    def seconds(self) -> float:
        return self.decode_steps * self.per_decode_step

    def render(self) -> str:
        return f"{self.decode_steps} decode steps x {self.per_decode_step * 1000:.1f} ms ({self.engine})"


def generation_time(
    w: Workload, scheduler_steps: int, v0: bool = False, coef: Mapping[str, float] | None = None
) -> GenerationTime | None:
    """The generation round of a colocated engine (`engine`'s arguments), w.completion_tokens decode steps
    long; None for an engine never measured."""
    c = coef or generation_coefficients()
    name = engine(scheduler_steps, v0)
    return GenerationTime(name, w.completion_tokens, c[name]) if name in c else None
