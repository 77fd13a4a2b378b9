"""The batch shape: the planner picks what the recipe leaves open, for throughput within the card.

A recipe defines the work of an optimizer step: GENERATION_BATCH_SIZE completions per step (one
generation round, e.g. 32 = 4 prompts x NUM_GENERATIONS 8), or PER_DEVICE_TRAIN_BATCH_SIZE x processes x
GRADIENT_ACCUMULATION_STEPS. How that work is cut into micro-batches is a question of memory and speed,
not of learning: the same completions, prompts and advantages reach the same optimizer step. So where the
recipe does not set them, `choose` picks (AUTO_SHAPE=true, the default):

- PER_DEVICE_TRAIN_BATCH_SIZE: the largest divisor of the per-process completions whose predicted peak
  leaves at least HEADROOM of every training card free. Larger micro-batches are faster: the GPU runs one
  forward/backward over 8 completions in about the time of two over one (countdown-1x4090 on a 24 GiB
  card: micro-batch 8 x 4 ran 4.1x the completion tokens/s of 1 x 32,
  bench/startup/2026-12-02-1114-startup-levers/).
- GRADIENT_ACCUMULATION_STEPS: what keeps the completions per optimizer step (one generation round per
  step, ms-swift's default steps_per_generation = gradient_accumulation_steps).
- VLLM_GPU_MEMORY_UTILIZATION (colocate): the smallest share, in steps of 0.05, whose KV cache holds this
  process's whole generation round and one sequence of max_model_len; the rest of the card goes to
  training.
- ROLLOUT_GPU_MEMORY_UTILIZATION (a rollout server on this node): the largest share that leaves 10 % of its
  card free beside the CUDA context (0.82 on a 24 GiB card; ms-swift's default 0.9 leaves 8 %).
- VLLM_SCHEDULER_STEPS (colocate, one training process): 8 or 1, whichever gives the least predicted step
  (speed.generation_time + speed.training_time) with a shape that fits: vLLM's V0 engine with 8 decode steps
  per schedule pays a decode step's host work once per 8 (a round of 32 x 256 tokens: 1.28 s against V1's
  2.22 s in the trainer, bench/throughput/2026-12-03-1051-countdown-v0-engine/); V0 counts only its own memory
  against its share, so its share is sized by its own rule (memory.kv_budget) and the process's earlier memory
  is added to its peak (memory.colocate_peak). `engine_options` says where the choice is open.
- SLEEP_LEVEL (colocate): 0. In ms-swift 3.6.4 sleeping saves little peak memory unless the model or the
  optimizer is offloaded (memory.py, "vLLM side"): at micro-batch 8 on a 24 GiB card, torch's allocator,
  18.7 GiB asleep against 19.4 awake (bench/startup/2026-12-02-1114-startup-levers/); it rules out expandable
  segments, which hold the logits at about half the bytes, and every step pays for the offload and the reload.
  With OFFLOAD_MODEL or OFFLOAD_OPTIMIZER set, 1.

Values the recipe sets (in any layer) are never changed. With AUTO_SHAPE=false, or when the memory
cannot be estimated (unknown model, CPU run), the micro-batch is ms-swift's default of 1 and the
accumulation keeps the step's completions. Every choice carries its reason, which `plan` prints and the
manifest records as the value's source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from entrypoint.plan import memory, speed
from entrypoint.plan.budget import Batch, Budget
from entrypoint.plan.budget import allocator as budget_allocator
from entrypoint.plan.layout import Layout
from entrypoint.plan.memory import GpuEstimate, Workload
from entrypoint.recipe.load import Choice, Recipe, Typed, text_of

HEADROOM = 0.10  # at least this share of every card stays free (memory.HEADROOM_WARNING warns under it)
UTILIZATION_STEP = 0.05
UTILIZATION_FLOOR = 0.10
UTILIZATION_CEILING = memory.VLLM_UTILIZATION_CEILING
KV_MARGIN = 1.25  # vLLM's block rounding and the prompts' spread around the planner's estimate
# Decode steps per schedule when the planner turns multi-step scheduling on: vLLM alone ran a round of 32 x
# 256 tokens in 0.99 s at 8 against 1.66 s at 1 on its V0 engine (bench/generation/2026-12-03-0828-engines/).
MULTI_STEP = 8


class StepWork(NamedTuple):
    """The completions of one optimizer step: in all, and per training process (0 when they do not divide)."""

    total: int
    per_process: int


def step_completions(r: Recipe, b: Batch) -> StepWork:
    """The work the planner keeps while it cuts it into micro-batches: GENERATION_BATCH_SIZE when a layer
    sets it (one generation round per step), else PER_DEVICE_TRAIN_BATCH_SIZE x processes x
    GRADIENT_ACCUMULATION_STEPS."""
    total = b.generation_batch if r.is_set("GENERATION_BATCH_SIZE") else b.per_device * b.world * b.grad_accum
    return StepWork(total, total // b.world if total % b.world == 0 else 0)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _round_up(x: float, step: float) -> float:
    return round(-(-x // step) * step, 2)


# keys whose value from any layer fixes the shape there: the planner never changes them
_SHAPE_KEYS = (
    "PER_DEVICE_TRAIN_BATCH_SIZE",
    "GRADIENT_ACCUMULATION_STEPS",
    "GENERATION_BATCH_SIZE",
    "STEPS_PER_GENERATION",
    "VLLM_GPU_MEMORY_UTILIZATION",
    "SLEEP_LEVEL",
)


@dataclasses.dataclass(frozen=True)
class _Cut:
    """How one optimizer step's completions are cut into micro-batches: in all, per training process, the
    processes, and the shape keys a layer sets (_SHAPE_KEYS)."""

    total: int
    per_process: int
    world: int
    user: frozenset[str]

    def choices(self, pd: int, why: str) -> list[Choice]:
        """Micro-batch `pd` and the accumulation that keeps the step's completions, those the recipe leaves
        open."""
        out = []
        if "PER_DEVICE_TRAIN_BATCH_SIZE" not in self.user:
            out.append(Choice("PER_DEVICE_TRAIN_BATCH_SIZE", pd, why))
        if "GRADIENT_ACCUMULATION_STEPS" not in self.user:
            out.append(
                Choice(
                    "GRADIENT_ACCUMULATION_STEPS",
                    self.per_process // pd,
                    f"{self.total} completions per optimizer step / ({pd} per micro-batch x {self.world} "
                    "process(es)): one generation round per step",
                )
            )
        return out


def choose(
    r: Recipe,
    layout: Layout,
    budget: Budget,
    estimate: Callable[[Workload, memory.Colocate | None], list[GpuEstimate]] | None = None,
) -> list[Choice]:
    """The values the planner sets for recipe `r` on `layout`, given its budget at the recipe's current
    shape (budget.workload None when the model's dimensions are unknown). `estimate(w, colocate)` predicts
    the card peaks (default: the budget's, budget.per_gpu on the layout's cards). vLLM's colocated share
    and sleep level are chosen whenever the recipe leaves them open, whether or not it fixes the batch.

    Stages: vLLM's share (_vllm_share), the micro-batches that keep the step (_candidates), then ms-swift's
    default without an estimate, the fastest shape where levers or engines are open (_fastest_choices),
    else the largest micro-batch that fits (_largest_that_fits)."""
    b, w = budget.batch, budget.workload
    if b is None:
        return []
    user = frozenset(k for k in _SHAPE_KEYS if r.is_set(k))
    work = step_completions(r, b)
    cut = _Cut(work.total, work.per_process, b.world, user)
    auto = r.settings.AUTO_SHAPE and layout.mode != "cpu" and w is not None
    current = Colocated(None, [])
    if auto and layout.mode == "colocate" and cut.per_process:  # sized even when the user fixed the batch
        current = _vllm_share(r, layout, budget, cut.per_process, user)
    candidates = _candidates(b, cut)
    if not _batch_open(user) or not candidates:
        return current.choices
    if not auto:
        return cut.choices(min(candidates), f"ms-swift's default micro-batch ({_not_auto_why(r, layout)})")
    estimate = estimate or (lambda wl, co: budget.estimates(layout, wl, co))
    fastest = _fastest_choices(r, layout, budget, cut, candidates, current, estimate)
    if fastest is not None:
        return fastest
    return _largest_that_fits(w, cut, candidates, current.colocate, estimate) + current.choices


def _batch_open(user: frozenset[str]) -> bool:
    """Whether the planner may cut the step: not when a layer sets STEPS_PER_GENERATION, nor both the
    micro-batch and the accumulation."""
    return not (
        "STEPS_PER_GENERATION" in user
        or {"PER_DEVICE_TRAIN_BATCH_SIZE", "GRADIENT_ACCUMULATION_STEPS"} <= user
    )


def _candidates(b: Batch, cut: _Cut) -> list[int]:
    """The micro-batches that keep the step's completions: the recipe's own, the one its accumulation
    leaves (none when it does not divide), else every divisor of the completions per process."""
    if "PER_DEVICE_TRAIN_BATCH_SIZE" in cut.user:
        return [b.per_device]
    if "GRADIENT_ACCUMULATION_STEPS" in cut.user:
        divides = cut.per_process and cut.per_process % b.grad_accum == 0
        return [cut.per_process // b.grad_accum] if divides else []
    return divisors(cut.per_process) if cut.per_process else []


def _not_auto_why(r: Recipe, layout: Layout) -> str:
    """Why the planner keeps ms-swift's default micro-batch."""
    if not r.settings.AUTO_SHAPE:
        return "AUTO_SHAPE=false"
    return "no GPU" if layout.mode == "cpu" else "the model's memory cannot be estimated"


def _fastest_choices(
    r: Recipe,
    layout: Layout,
    budget: Budget,
    cut: _Cut,
    candidates: list[int],
    current: Colocated,
    estimate: Callable[[Workload, memory.Colocate | None], list[GpuEstimate]],
) -> list[Choice] | None:
    """Where levers (lever_options) or engines (engine_options) are open: the shape with the least predicted
    step among those that fit, its levers and engine where the recipe leaves them open, and vLLM's choices
    for that engine. None when there is nothing to choose or nothing fits."""
    w = budget.workload
    levers = lever_options(r, layout, w)
    engines = engine_options(r, layout, w, budget) if current.colocate is not None else []
    if len(levers) <= 1 and len(engines) <= 1:
        return None
    runs = _by_predicted_step(
        r,
        layout,
        budget,
        cut.per_process,
        cut.user,
        engines,
        current,
        lambda co: _fastest(w, co, cut.per_process, candidates, levers, estimate),
    )
    if not runs:
        return None
    best = runs[0]
    chosen = cut.choices(best.shape.per_device, best.shape.why)
    lever_why = (
        f"the fastest shape that fits: {best.shape.seconds:.1f} s of training per step, chosen with "
        f"PER_DEVICE_TRAIN_BATCH_SIZE={best.shape.per_device} (its line says against what)"
    )
    if not r.is_set("GRADIENT_CHECKPOINTING"):
        chosen.append(Choice("GRADIENT_CHECKPOINTING", best.shape.checkpointing, lever_why))
    if not r.is_set("USE_LIGER_KERNEL"):
        chosen.append(Choice("USE_LIGER_KERNEL", best.shape.liger, lever_why))
    if len(engines) > 1:
        chosen.append(Choice("VLLM_SCHEDULER_STEPS", best.scheduler_steps, _engine_why(runs)))
    return chosen + best.vllm


class Verdict(NamedTuple):
    """A micro-batch tried, and the fullest training card at it."""

    per_device: int
    worst: GpuEstimate


def _largest_that_fits(
    w: Workload,
    cut: _Cut,
    candidates: list[int],
    colocate: memory.Colocate | None,
    estimate: Callable[[Workload, memory.Colocate | None], list[GpuEstimate]],
) -> list[Choice]:
    """The largest candidate micro-batch whose predicted peak leaves HEADROOM free on every training card
    (naming the one above it, which does not); the smallest candidate when none does."""
    bigger: Verdict | None = None
    for pd in sorted(candidates, reverse=True):
        trial = dataclasses.replace(w, per_device=pd, generation_per_device=cut.per_process)
        trainers = [e for e in estimate(trial, colocate) if not e.role.startswith("rollout")]
        worst = min(trainers, key=lambda e: e.headroom)
        if worst.headroom >= HEADROOM:
            why = (
                f"the largest micro-batch whose predicted peak, {worst.peak_gib:.1f} of {worst.card_gib:.1f} "
                f"GiB on GPU {worst.gpu}, leaves at least {HEADROOM:.0%} free ({worst.headroom:.0%})"
            )
            if bigger is not None:
                why += f"; {bigger.per_device} would need {bigger.worst.peak_gib:.1f} GiB"
            return cut.choices(pd, why)
        bigger = Verdict(pd, worst)
    smallest = bigger  # candidates is never empty here
    why = (
        f"no micro-batch leaves {HEADROOM:.0%} free; even {smallest.per_device} is predicted at "
        f"{smallest.worst.peak_gib:.1f} of {smallest.worst.card_gib:.1f} GiB"
    )
    return cut.choices(smallest.per_device, why)


def lever_options(r: Recipe, layout: Layout, w: Workload) -> list[tuple[bool, bool]]:
    """(gradient checkpointing, liger's fused loss) pairs the planner may choose among: those the recipe
    leaves open, for a colocated LoRA or full run without DeepSpeed (where the memory and time models were
    measured: bench/calibration/memory-calibration.json, speed-calibration.json). Neither changes what is
    learned: checkpointing recomputes activations, liger computes ms-swift's same GRPO loss (its loss_type,
    beta, epsilon, temperature) from the hidden states a chunk at a time (v3.6.4 grpo_trainer.py:212-224)."""
    ckpt = [w.gradient_checkpointing] if r.is_set("GRADIENT_CHECKPOINTING") else [True, False]
    liger = [w.liger] if r.is_set("USE_LIGER_KERNEL") or not _liger_same_loss(r) else [False, True]
    if layout.mode != "colocate" or w.zero_stage or w.dims.params > memory.CALIBRATED_MAX_PARAMS:
        return [(w.gradient_checkpointing, w.liger)]
    return [(c, lg) for c in ckpt for lg in liger]


def _liger_same_loss(r: Recipe) -> bool:
    """Whether ms-swift 3.6.4 computes the recipe's own loss through liger: it refuses liger with DELTA,
    SEQUENCE_PARALLEL_SIZE > 1 and PADDING_FREE (swift/llm/argument/rlhf_args.py:260-267), and its liger path
    skips OVERLONG_FILTER's mask (grpo_trainer.py:1136-1145 against :1344-1372)."""
    a = r.trainer_args
    return a.delta is None and not a.padding_free and not a.overlong_filter and a.sequence_parallel_size <= 1


def engine_options(r: Recipe, layout: Layout, w: Workload, budget: Budget) -> list[int]:
    """VLLM_SCHEDULER_STEPS values the planner chooses between, by predicted step time and peak: 1 (ms-swift's
    V1 engine) and MULTI_STEP (vLLM's V0 engine, multi-step scheduling); [] when the choice is not open: the
    recipe sets VLLM_SCHEDULER_STEPS or VLLM_USE_V1, or the run is outside where both were measured (one
    colocated training process without vLLM tensor parallelism, sleep mode or offload, a model within
    memory.CALIBRATED_MAX_PARAMS: bench/calibration/generation-calibration.json). Neither changes what is
    learned: the same sampling parameters draw from the same weights (the V0 sampler, vllm 0.8.5.post1
    model_executor/layers/sampler.py, against V1's v1/sample/sampler.py)."""
    a = r.trainer_args
    if (
        r.settings.VLLM_SCHEDULER_STEPS
        or r.vllm_use_v1 is not None
        or layout.mode != "colocate"
        or layout.nproc_per_node != 1
        or len(layout.train_gpus) != 1
        or a.vllm_tensor_parallel_size > 1
        or (r.is_set("SLEEP_LEVEL") and a.sleep_level >= 1)
        or budget.offload
        or a.bnb_bits  # QLoRA: vLLM serves the adapter, and V0's multi-step runner refuses LoRA
        or w.dims.params > memory.CALIBRATED_MAX_PARAMS
    ):
        return []
    return [1, MULTI_STEP]


class EngineRun(NamedTuple):
    """One engine's fastest fitting shape, as _by_predicted_step ranks them."""

    seconds: float  # predicted step: training plus the generation round (without engines to choose, training)
    scheduler_steps: int  # VLLM_SCHEDULER_STEPS; 0 when no engine is chosen
    shape: Fastest
    vllm: list[Choice]  # vLLM's colocate choices for this engine
    generation: speed.GenerationTime | None  # None when no engine is chosen


def _by_predicted_step(
    r: Recipe,
    layout: Layout,
    budget: Budget,
    per_process: int,
    user: frozenset[str],
    engines: list[int],
    current: Colocated,
    fastest: Callable[[memory.Colocate | None], Fastest | None],
) -> list[EngineRun]:
    """The run of each engine in `engines` whose shape fits (`fastest(colocate)`, its share sized for that
    engine), least predicted step first; without engines to choose, the one run at `current`, its round
    left out."""
    runs = []
    for steps in engines or [0]:
        co, co_out = current if not engines else _vllm_share(r, layout, budget, per_process, user, steps > 1)
        shape = fastest(co)
        gen = speed.generation_time(budget.workload, steps, co.engine_v0) if engines else None
        if shape is not None and (gen is not None or not engines):
            runs.append(EngineRun(shape.seconds + (gen.seconds if gen else 0.0), steps, shape, co_out, gen))
    return sorted(runs, key=lambda run: run.seconds)


def _engine_why(runs: list[EngineRun]) -> str:
    """The reason of the engine choice: each engine's predicted step (round + training) and peak."""

    def one(run: EngineRun) -> str:
        steps, fastest, gen = run.scheduler_steps, run.shape, run.generation
        what = "vLLM's V0 engine, multi-step scheduling" if steps > 1 else "ms-swift's V1 engine"
        return (
            f"{what} ({steps} decode step(s) per schedule): {run.seconds:.1f} s per step (generation round "
            f"{gen.seconds:.1f} s: {gen.render()}; training {fastest.seconds:.1f} s), peak "
            f"{fastest.worst.peak_gib:.1f} of {fastest.worst.card_gib:.1f} GiB"
        )

    best = one(runs[0])
    rest = "; ".join(one(run) for run in runs[1:]) or "no other engine fits"
    return (
        f"the least predicted step time of the engines whose shape fits: {best}; against {rest} "
        "(speed.generation_time, bench/calibration/generation-calibration.json)"
    )


class _Trial(NamedTuple):
    """A shape that fits, as _fastest ranks them."""

    per_device: int
    checkpointing: bool
    liger: bool
    worst: GpuEstimate  # the fullest training card
    time: speed.TrainingTime
    changed: int  # levers turned away from the recipe's (or ms-swift's) own

    def rank(self) -> tuple[float, int, int]:
        """Least training time (to 0.01 s), then the fewest levers turned, then the larger micro-batch."""
        return round(self.time.seconds, 2), self.changed, -self.per_device


@dataclasses.dataclass(frozen=True)
class Fastest:
    """The fastest shape that fits: its levers, predicted training seconds per step, fullest card, reason."""

    per_device: int
    checkpointing: bool
    liger: bool
    seconds: float
    worst: GpuEstimate
    why: str


def _fastest(
    w: Workload,
    colocate: memory.Colocate | None,
    per_process: int,
    candidates: list[int],
    levers: list[tuple[bool, bool]],
    estimate: Callable[[Workload, memory.Colocate | None], list[GpuEstimate]],
) -> Fastest | None:
    """The shape with the least predicted training time per step (speed.training_time) whose predicted peak
    leaves HEADROOM free on every training card; on a tie the recipe's own levers, then the larger
    micro-batch. None when nothing fits."""
    fits: list[_Trial] = []
    for pd in candidates:
        for ckpt, liger in levers:
            trial = dataclasses.replace(
                w, per_device=pd, generation_per_device=per_process, gradient_checkpointing=ckpt, liger=liger
            )
            co = dataclasses.replace(colocate, liger=liger) if colocate is not None else None
            worst = min(
                (e for e in estimate(trial, co) if not e.role.startswith("rollout")), key=lambda e: e.headroom
            )
            if worst.headroom >= HEADROOM:
                changed = (ckpt != w.gradient_checkpointing) + (liger != w.liger)
                fits.append(_Trial(pd, ckpt, liger, worst, speed.training_time(trial, per_process), changed))
    if not fits:
        return None
    fits.sort(key=_Trial.rank)
    best, t = fits[0], fits[0].time
    why = (
        f"the least predicted training time per step (forward and backward; the generation round, the same "
        f"for every shape, aside), {t.seconds:.1f} s ({t.render()}), of the shapes whose "
        f"predicted peak leaves at least {HEADROOM:.0%} free: {best.worst.peak_gib:.1f} of "
        f"{best.worst.card_gib:.1f} GiB"
    )
    own = [f for f in fits if f.changed == 0]
    if own and own[0] is not best:
        why += (
            "; without turning a lever (checkpointing and liger as the recipe or ms-swift has them), "
            f"micro-batch {own[0].per_device}: {own[0].time.seconds:.1f} s ({own[0].time.render()})"
        )
    return Fastest(best.per_device, best.checkpointing, best.liger, t.seconds, best.worst, why)


def rollout_share(r: Recipe, layout: Layout, budget: Budget) -> list[Choice]:
    """ROLLOUT_GPU_MEMORY_UTILIZATION for a local rollout server when no layer sets it: the largest share
    that leaves the memory check's headroom on its smallest card (memory.rollout_share_with_headroom),
    instead of ms-swift's 0.9, which the memory check warns about on a 24 GiB card (else an imported
    recipe would be warned about the default it was given)."""
    if not layout.local_rollout or not r.settings.AUTO_SHAPE or r.is_set("ROLLOUT_GPU_MEMORY_UTILIZATION"):
        return []
    card = min(budget.card(g) for g in layout.rollout_gpus)
    share = memory.rollout_share_with_headroom(card)
    return [
        Choice(
            "ROLLOUT_GPU_MEMORY_UTILIZATION",
            round(share, 2),
            f"the largest share that leaves {memory.HEADROOM_WARNING:.0%} of the {card:.1f} GiB card free "
            f"beside the CUDA context ({memory.CUDA_CONTEXT_GIB} GiB); ms-swift's default is 0.9",
        )
    ]


class VllmShare(NamedTuple):
    """A colocated vLLM's share of the card, whether its KV cache holds what it must, and that need (GiB)."""

    utilization: float
    holds: bool
    need_gib: float


def smallest_share(budget: Budget, layout: Layout, per_process: int, v0: bool | None = None) -> VllmShare:
    """The smallest colocated share, in steps of UTILIZATION_STEP, whose KV cache holds this process's
    generation round (`per_process` sequences) and one sequence of max_model_len with KV_MARGIN, after the
    context and both copies of the weights on the smallest training card (`v0`: vLLM's V0 engine, which
    counts only its own; default the budget's engine); UTILIZATION_CEILING when none holds. With OFFLOAD_MODEL
    the trainer's weights are on the CPU while the engine starts (ms-swift builds it inside offload_context:
    v3.6.4 grpo_trainer.py:274-280) and while it generates: only vLLM's copy counts, and what the offload
    leaves (TrainingEstimate.pinned). Needs budget.workload and budget.colocate."""
    w, current = budget.workload, budget.colocate
    v0 = current.engine_v0 if v0 is None else v0
    card = min(budget.card(g) for g in layout.train_gpus)
    train = memory.estimate_training(w)
    resident = train.pinned if current.offload_model else train.weights
    tokens = w.prompt_tokens + w.completion_tokens
    need = KV_MARGIN * memory.kv_gib(w.dims, w.dtype_bytes, max(current.max_model_len, per_process * tokens))
    util = UTILIZATION_FLOOR
    while (
        util < UTILIZATION_CEILING - 1e-9 and memory.kv_budget(w, card, util, resident, engine_v0=v0) < need
    ):
        util = min(UTILIZATION_CEILING, _round_up(util + UTILIZATION_STEP, UTILIZATION_STEP))
    holds = memory.kv_budget(w, card, util, resident, engine_v0=v0) >= need
    return VllmShare(util, holds, need)


ONE_COPY_LEVERS = {"OFFLOAD_MODEL": True, "OFFLOAD_OPTIMIZER": True, "SLEEP_LEVEL": 1}


def one_copy_open(r: Recipe, layout: Layout, budget: Budget) -> bool:
    """Whether the one-weight-copy levers (ONE_COPY_LEVERS) are the planner's to set: a colocated LoRA run on
    unsplit weights with a known model, which leaves all three open and AUTO_SHAPE on."""
    return not (
        not r.settings.AUTO_SHAPE
        or layout.mode != "colocate"
        or budget.workload is None
        or budget.batch is None
        or budget.colocate is None
        or r.trainer_args.train_type != "lora"
        or r.trainer_args.vllm_tensor_parallel_size > 1
        or any(r.is_set(k) for k in ONE_COPY_LEVERS)
    )


def one_copy_levers(r: Recipe, layout: Layout, budget: Budget, why: str = "") -> list[Choice]:
    """OFFLOAD_MODEL=true, OFFLOAD_OPTIMIZER=true and SLEEP_LEVEL=1 where they are open (one_copy_open) and no
    vLLM share of the card holds both copies of the weights beside the generation round (smallest_share), or
    for the reason `why` the caller gives (build._shape: both copies fit, but no micro-batch trains beside
    them). Then one copy is on the GPU at a time, the trainer's in CPU memory while vLLM generates and vLLM's
    while the trainer trains (memory.offload_phases; the hooks offload_before_wake and adapter_sync; a 7B on a
    physical 24 GiB card: docs/benchmarks/one-card-7b.md). [] otherwise: a run that fits both copies keeps
    them (each step's offload costs time), and AUTO_SHAPE=false leaves ms-swift's."""
    if not one_copy_open(r, layout, budget):
        return []
    w = budget.workload
    per_process = step_completions(r, budget.batch).per_process
    # whether both copies fit beside the round on the card, whichever engine counts what (v0=False counts all)
    if not why and (not per_process or smallest_share(budget, layout, per_process, v0=False).holds):
        return []
    why = why or (
        f"no vLLM share of this card holds both copies of the {w.dims.params / 1e9:.1f}B model's weights "
        "beside its generation round"
    )
    why += (
        ": one copy on the GPU at a time (the trainer in CPU memory while vLLM generates, vLLM asleep while "
        "the trainer trains; "
        + ("docs/benchmarks/one-card-14b.md)" if w.quant_bits else "docs/benchmarks/one-card-7b.md)")
    )
    return [
        Choice("OFFLOAD_MODEL", True, why),
        Choice(
            "OFFLOAD_OPTIMIZER",
            True,
            "with OFFLOAD_MODEL: the optimizer's states leave the GPU with the weights",
        ),
        Choice(
            "SLEEP_LEVEL",
            1,
            "with OFFLOAD_MODEL: vLLM's weights wait in CPU memory while the trainer trains",
        ),
    ]


@dataclasses.dataclass(frozen=True)
class Fit:
    """A shape that fits: the keys to write, the fullest training GPU there, the completions per step kept."""

    values: dict[str, Typed]
    worst: GpuEstimate
    completions: int

    def line(self) -> str:
        return " ".join(f"{k}={text_of(v)}" for k, v in self.values.items())


def largest_fit(r: Recipe, layout: Layout, budget: Budget) -> Fit | None:
    """The largest micro-batch, with the accumulation that keeps the completions per optimizer step
    (step_completions), whose predicted peak leaves HEADROOM free on every training card: at vLLM's current
    share, then (a share a user set) at the smallest share that holds the round (smallest_share). The memory
    check's fix for a plan that does not fit. None when none fits or the memory cannot be estimated."""
    b, w = budget.batch, budget.workload
    if b is None or w is None or layout.mode == "cpu" or not layout.train_gpus:
        return None
    total, per_process = step_completions(r, b)
    if not per_process:
        return None
    shares = [budget.colocate]
    if budget.colocate is not None and r.layer("VLLM_GPU_MEMORY_UTILIZATION") in (
        1,
        2,
        3,
    ):  # the user's value
        smaller = smallest_share(budget, layout, per_process)
        if smaller.holds and smaller.utilization < budget.colocate.utilization:
            shares.append(dataclasses.replace(budget.colocate, utilization=smaller.utilization))
    for colocate in shares:
        for pd in sorted(divisors(per_process), reverse=True):
            # a user's STEPS_PER_GENERATION keeps the rounds per step: the round grows with the micro-batch
            round_size = pd * b.steps_per_generation if r.is_set("STEPS_PER_GENERATION") else per_process
            trial = dataclasses.replace(w, per_device=pd, generation_per_device=round_size)
            trainers = [
                e for e in budget.estimates(layout, trial, colocate) if not e.role.startswith("rollout")
            ]
            worst = min(trainers, key=lambda e: e.headroom)
            if worst.headroom >= HEADROOM:
                values: dict[str, Typed] = {
                    "PER_DEVICE_TRAIN_BATCH_SIZE": pd,
                    "GRADIENT_ACCUMULATION_STEPS": per_process // pd,
                }
                if colocate is not budget.colocate:
                    values["VLLM_GPU_MEMORY_UTILIZATION"] = round(colocate.utilization, 2)
                return Fit(values, worst, total)
    return None


class Colocated(NamedTuple):
    """A colocated vLLM's settings once the planner has chosen (None: not colocated), and its choices."""

    colocate: memory.Colocate | None
    choices: list[Choice]


def _vllm_share(
    r: Recipe, layout: Layout, budget: Budget, per_process: int, user: frozenset[str], v0: bool | None = None
) -> Colocated:
    """vLLM's share and sleep level for colocate (those the recipe leaves open), and the Colocate they make;
    `v0`: for vLLM's V0 engine (default the budget's engine)."""
    w, current = budget.workload, budget.colocate
    v0 = current.engine_v0 if v0 is None else v0
    tokens = w.prompt_tokens + w.completion_tokens
    out: list[Choice] = []
    util = current.utilization
    if "VLLM_GPU_MEMORY_UTILIZATION" not in user:
        card = min(budget.card(g) for g in layout.train_gpus)
        util, holds, need = smallest_share(budget, layout, per_process, v0)
        what = (
            f"this process's generation round ({per_process} sequences of ~{tokens} tokens) and one sequence "
            f"of {current.max_model_len} (with {KV_MARGIN}x margin: {need:.2f} GiB)"
        )
        out.append(
            Choice(
                "VLLM_GPU_MEMORY_UTILIZATION",
                round(util, 2),
                f"the smallest share whose KV cache holds {what}, after "
                + (
                    "vLLM's own weights (its V0 engine counts only what it allocates)"
                    if v0
                    else "the context, vLLM's weights and the trainer's reserved 4-bit segments (without the "
                    "hook offload_quant_states they stay on the GPU while vLLM generates)"
                    if current.offload_model and w.quantized_stay
                    else "the context and vLLM's weights (the trainer's are on the CPU while vLLM generates)"
                    if current.offload_model
                    else "the context and both copies of the weights"
                )
                + f"; the rest of the {card:.1f} GiB card trains"
                if holds
                else f"the most the planner gives vLLM: no share holds {what} beside "
                + (
                    "vLLM's own weights and the trainer's reserved 4-bit segments (DISABLE_HOOKS has "
                    "offload_quant_states)"
                    if current.offload_model and w.quantized_stay
                    else "vLLM's own weights"
                    if current.offload_model
                    else "both copies of the weights"
                )
                + f" on this {card:.1f} GiB card (the memory check says what to change)",
            )
        )
    sleep = current.sleep_level
    if "SLEEP_LEVEL" not in user:
        offload = budget.offload
        sleep = 1 if offload else 0
        out.append(
            Choice(
                "SLEEP_LEVEL",
                sleep,
                "offload is on: vLLM sleeps while the model and optimizer are away"
                if offload
                else "sleeping saves little peak memory without offload in ms-swift 3.6.4 (torch's cache and "
                "vLLM's pool meet at the next wake-up; measured at 8 x 4 on torch's allocator: 18.7 GiB "
                "asleep, 19.4 awake, bench/startup/2026-12-02-1114-startup-levers), rules out expandable "
                "segments (vLLM's sleep-mode pool refuses them) and costs the offload and reload of vLLM "
                "every step",
            )
        )
    alloc = budget_allocator(r, layout, sleep)
    if alloc:
        out.append(
            Choice(
                "PYTORCH_CUDA_ALLOC_CONF",
                alloc,
                "vLLM's KV cache and the trainer's tensors share one process: torch's caching allocator "
                "would grow the peak by whole working sets as longer batches arrive (measured: 15.2 -> 19.3 "
                "GiB at the fourth step of countdown-1x4090), expandable segments grow one mapping ("
                f"{memory.coefficients()['colocate_logit_bytes']:.0f} bytes per logit entry on the card "
                f"against {memory.coefficients()['colocate_torch_logit_bytes']:.0f}, fitted: "
                "bench/calibration/memory-calibration.json; budget.allocator)",
            )
        )
    return Colocated(
        dataclasses.replace(
            current,
            utilization=util,
            sleep_level=sleep,
            expandable=bool(alloc) or current.expandable,
            engine_v0=v0,
        ),
        out,
    )
