"""Step-time model: the seconds a colocated GRPO step spends training, for the planner's choice among the
levers that do not change what is learned (the micro-batch, gradient checkpointing, liger's fused loss).

One optimizer step trains its completions in micro-batches; each micro-batch costs, on the card the model
was measured on,

    per micro-batch = base[lever] + per_ktoken[lever] x (micro-batch x (prompt + completion tokens)) / 1000

with `lever` one of "plain", "plain, checkpointing", "liger", "liger, checkpointing" (liger's fused loss,
gradient checkpointing). The coefficients are fitted by bench/fit_speed.py to the phase events of the
throughput benchmark's lever runs (docs/benchmarks/speed-calibration.json; tests/test_speed.py checks every
point): Qwen2.5-0.5B, countdown-1x4090's 32 completions per step, on the lent H200 capped at 24 GiB, with
the planner's expandable segments (sixth lease, docs/gpu-evidence.md). There a micro-batch's time hardly
depends on its size (the small model leaves the GPU waiting on kernel launches: 0.37 s at micro-batch 4,
0.41 s at 16 with checkpointing), so fewer, larger micro-batches win; checkpointing recomputes each
layer's forward (0.22 s without it at micro-batch 8, 0.23 s with liger at 16); liger's fused loss computes
the loss a chunk at a time. On a slower card the per-token term grows; the ranking it gives (fewer micro-batches, no recompute
when memory allows) is the same. Generation (the vLLM round) is the same for every candidate and is not
part of the choice.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping

from entrypoint.memory import DATA, Workload

LEVERS = ("plain", "plain, checkpointing", "liger", "liger, checkpointing")
# Until bench/fit_speed.py writes data/speed_coefficients.json: medians of the 2026-12-02 H200 lever runs.
DEFAULT_COEFFICIENTS = {
    "plain": (0.27, 0.0),
    "plain, checkpointing": (0.52, 0.0),
    "liger": (0.38, 0.0),
    "liger, checkpointing": (0.62, 0.0),
}


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
