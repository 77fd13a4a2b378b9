"""The run's budget, computed once by plan.build: the batch arithmetic, the prompt's tokens, the workload of
one training process, vLLM's colocate settings, the cards' sizes, and the per-GPU peaks they predict.

Pure: a function of the recipe (its typed arguments, args.py), the layout, the inventory and the facts
host.gather read. The planner's shape choice (shape.py) and the memory check's refusals
(preflight/memory_check.py) both read the `Budget` plan.build freezes into the Plan; nothing recomputes it.

Where to add a knob that changes the memory plan: its argument in args.TrainerArgs, its effect on the
workload in `workload` (a field of memory.Workload) or on vLLM in `colocate_settings`, and its cost in
memory.py's model (docs/architecture.md walks through it).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from entrypoint.facts import datasets as dataset
from entrypoint.facts.datasets import dataset_key
from entrypoint.facts.facts import Facts
from entrypoint.facts.inventory import Inventory
from entrypoint.plan import memory
from entrypoint.plan.layout import Layout
from entrypoint.plan.memory import CUDA_CONTEXT_GIB, GpuEstimate, ModelDims, Workload
from entrypoint.recipe.args import TrainerArgs
from entrypoint.recipe.load import Recipe
from entrypoint.rewards import tasks

DEFAULT_PROMPT_TOKENS = 512
PROMPT_SAMPLE_ROWS = 2000  # rows of each dataset the prompt-length estimate reads
# Longest prompt of a hub dataset a shipped recipe names, which the planner cannot read before ms-swift
# downloads it. zouxuhong/Countdown-Tasks-3to4: ms-swift 3.6.4's fixed countdown question (v3.6.4
# swift/llm/dataset/dataset/llm.py:491-501, 324 characters with four two-digit numbers and a three-digit
# target) under Qwen2.5's default system prompt is 127 by memory.estimate_prompt_tokens; 160 with margin.
HUB_PROMPT_TOKENS = {"zouxuhong/Countdown-Tasks-3to4": 160}
# The keys the batch arithmetic reads: while one of them is refused, the arithmetic would judge a default.
BATCH_KEYS = {
    "PER_DEVICE_TRAIN_BATCH_SIZE", "GRADIENT_ACCUMULATION_STEPS", "STEPS_PER_GENERATION",
    "GENERATION_BATCH_SIZE", "NUM_GENERATIONS", "PER_DEVICE_EVAL_BATCH_SIZE", "TRAIN_GPUS", "NNODES",
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Batch:
    """GRPO batch arithmetic as ms-swift 3.6.4 computes it (v3.6.4:swift/trainers/rlhf_arguments.py:67-110,
    swift/trainers/arguments.py:99-102). All counts are completions unless named prompts."""

    per_device: int
    world: int  # training processes over all nodes
    grad_accum: int
    steps_per_generation: int
    generation_batch: int  # completions generated per generation round
    num_generations: int
    per_device_eval: int

    @property
    def prompts_per_generation(self) -> int:
        return self.generation_batch // self.num_generations if self.num_generations else 0

    def describe(self) -> str:
        return (
            f"{self.per_device} completions/device x {self.world} process(es) x {self.steps_per_generation} "
            f"step(s) = {self.generation_batch} completions per generation = {self.prompts_per_generation} "
            f"prompts x NUM_GENERATIONS {self.num_generations}"
        )


def batch(a: TrainerArgs, world: int) -> Batch:
    """ms-swift's batch for `world` training processes. Raises ZeroDivisionError for a zero batch (refused
    by the value checks before anything reads it)."""
    per_device = a.per_device_train_batch_size
    grad_accum = a.gradient_accumulation_steps or max(1, math.ceil(16 / per_device / world))
    spg = a.steps_per_generation or grad_accum
    generation_batch = a.generation_batch_size or per_device * world * spg
    return Batch(
        per_device, world, grad_accum, spg, generation_batch, a.num_generations, a.per_device_eval_batch_size
    )


def batch_of(recipe: Recipe, layout: Layout) -> Batch | None:
    """The recipe's batch on this layout, None while its inputs are refused."""
    if BATCH_KEYS & recipe.dropped:
        return None
    try:
        return batch(recipe.trainer_args, layout.nproc_per_node * recipe.settings.NNODES)
    except (ValueError, ZeroDivisionError):
        return None


def prompt_tokens(recipe: Recipe, dataset_paths: list[str], facts: Facts) -> tuple[int, str]:
    """(tokens, where the number comes from) for the longest prompt: PROMPT_TOKENS, else estimated from
    generated tasks or the first rows of the JSONL datasets (facts.datasets) plus the system prompt."""
    s = recipe.settings
    if s.PROMPT_TOKENS:
        return s.PROMPT_TOKENS, "PROMPT_TOKENS"
    if s.DATASET_GENERATOR:
        rows = list(tasks.TASKS[s.DATASET_GENERATOR].generate(50, 0))
        return memory.estimate_prompt_tokens(rows), "estimated from generated tasks"
    rows: list[dict] = []
    known: list[int] = []  # hub datasets whose prompts are known (HUB_PROMPT_TOKENS)
    for spec in dataset_paths:
        path = Path(dataset.parse_spec(spec).path)
        hub_id = str(path).split(":")[0]  # without ms-swift's :subset
        if hub_id in HUB_PROMPT_TOKENS:
            known.append(HUB_PROMPT_TOKENS[hub_id])
            continue
        found = facts.datasets.get(dataset_key(path)) if path.suffix == ".jsonl" else None
        if found is not None:
            rows += [row for _, row in found.rows[:PROMPT_SAMPLE_ROWS]]
    if rows or known:
        system = recipe.trainer_args.system
        extra = 0
        if system:
            text = facts.system_text if system.endswith(".txt") and facts.system_text is not None else system
            extra = memory.estimate_prompt_tokens([{"messages": [{"content": text}]}])
        longest = max(([memory.estimate_prompt_tokens(rows)] if rows else []) + known)
        return (
            longest + extra,
            "estimated from the dataset" if rows else "ms-swift's prompt of this hub dataset",
        )
    return DEFAULT_PROMPT_TOKENS, "assumed; set PROMPT_TOKENS for a better estimate"


def workload(recipe: Recipe, b: Batch, dataset_paths: list[str], facts: Facts) -> tuple[Workload | None, str]:
    """The planner's view of one training process (model dimensions, batch, tokens), or None when the
    model's config.json was not found (facts.model_config)."""
    config, source = facts.model_config.config, facts.model_config.source
    if config is None and facts.model_config_error:  # found, but not JSON or not of transformers' types
        return None, f"the config.json at {source} {facts.model_config_error}"
    if config is None:  # `source` then says why the hub's answer was none, where it was asked (hubconfig.py)
        asked = f"; {source}" if source else ""
        return (
            None,
            "no config.json found for MODEL (local path, hub cache or "
            f"entrypoint/data/model_configs.json{asked})",
        )
    try:
        dims = ModelDims.from_config(config)
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"the config.json from {source} is not one the planner reads (missing {exc})"
    a = recipe.trainer_args
    full = a.train_type == "full"
    zero = deepspeed_stage(a.deepspeed, facts.deepspeed_config)
    prompt, why = prompt_tokens(recipe, dataset_paths, facts)
    if a.max_length:
        prompt = min(prompt, a.max_length)
    w = Workload(
        dims=dims,
        dtype_bytes=memory.DTYPE_BYTES.get(a.torch_dtype, 2),
        full=full,
        lora_rank=a.lora_rank,
        per_device=b.per_device,
        generation_per_device=b.per_device * b.steps_per_generation,
        prompt_tokens=prompt,
        completion_tokens=a.max_completion_length,
        gradient_checkpointing=a.gradient_checkpointing,
        reference_copy=full and a.beta > 0,
        zero_stage=zero.stage,
        world=b.world,
        hf_generation=not a.use_vllm,
        offload_optimizer=zero.offload_optimizer,
        offload_params=zero.offload_param,
        vllm_tp=a.vllm_tensor_parallel_size,
        liger=a.use_liger_kernel,
        quant_bits=a.bnb_bits,
        quantized_stay="offload_quant_states" in recipe.settings.disabled_hooks,
    )
    return w, f"model dimensions from {source}; prompt {prompt} tokens, {why}"


class ZeroStage(NamedTuple):
    """DeepSpeed's ZeRO as a run has it: its stage (0: none) and what it offloads to the CPU."""

    stage: int
    offload_optimizer: bool
    offload_param: bool


def deepspeed_stage(value: str, file_config: dict | None) -> ZeroStage:
    """The ZeRO stage of DEEPSPEED: one of ms-swift's names (zero2, zero3_offload ...), a JSON string, or a
    .json file (its content read by host.gather: facts)."""
    if value.endswith(".json") or value.startswith("{"):
        try:
            whole = json.loads(value) if value.startswith("{") else (file_config or {})
        except ValueError:
            return ZeroStage(0, False, False)
        config = whole.get("zero_optimization") if isinstance(whole, dict) else None
        config = config if isinstance(config, dict) else {}  # another type: DeepSpeed's own check says so
        part = lambda key: config[key] if isinstance(config.get(key), dict) else {}  # noqa: E731
        try:
            stage = int(config.get("stage", 0) or 0)
        except (TypeError, ValueError):
            stage = 0
        return ZeroStage(
            stage,
            part("offload_optimizer").get("device") in ("cpu", "nvme"),
            part("offload_param").get("device") in ("cpu", "nvme"),
        )
    zero = 3 if "zero3" in value else 2 if "zero2" in value else 0
    return ZeroStage(zero, value.endswith("_offload"), value == "zero3_offload")


EXPANDABLE_SEGMENTS = "expandable_segments:True"


def allocator(recipe: Recipe, layout: Layout, sleep_level: int | None = None) -> str | None:
    """PYTORCH_CUDA_ALLOC_CONF the planner gives the run (shape.choose), None for torch's default: expandable
    segments for a colocated trainer without sleep mode (`sleep_level`, default the recipe's), unless a layer
    sets the variable or AUTO_SHAPE=false. There one process holds vLLM's KV
    cache and the trainer's tensors, and torch's caching allocator keeps each freed block for a request of
    the same size: a longer batch of completions allocates the whole working set again beside the old one, a
    peak that grows in steps during a run (countdown-1x4090 on a 24 GiB card: 15.15 -> 19.32 GiB at its fourth
    step). Expandable segments grow one mapping instead (torch docs, "Optimizing memory usage with
    PYTORCH_CUDA_ALLOC_CONF"): the same run without gradient checkpointing peaked flat at 17.26 -> 17.42 GiB
    instead of 21.11 (bench/calibration/2026-12-02-1424-levers/). vLLM's sleep mode allocates through its
    own memory pool, which refuses expandable segments (vllm 0.8.5.post1 device_allocator/cumem.py:146)."""
    sleep = recipe.trainer_args.sleep_level if sleep_level is None else sleep_level
    if not recipe.settings.AUTO_SHAPE or recipe.is_set("PYTORCH_CUDA_ALLOC_CONF"):
        return None
    if layout.mode != "colocate" or sleep >= 1:
        return None
    return EXPANDABLE_SEGMENTS


def expandable(recipe: Recipe, layout: Layout) -> bool:
    """Whether the trainer's allocator grows expandable segments (the recipe's PYTORCH_CUDA_ALLOC_CONF, else
    `allocator`)."""
    conf = recipe.env.get("PYTORCH_CUDA_ALLOC_CONF") or allocator(recipe, layout) or ""
    return "expandable_segments:true" in conf.replace(" ", "").lower()


# vLLM 0.8.5's LoRAConfig's largest max_lora_rank (vllm/config.py:2677)
VLLM_MAX_LORA_RANK = 512


def adapter_sync_blocker(recipe: Recipe, deepspeed_config: dict | None = None) -> str:
    """Why a colocated run on the one-weight-copy path (SLEEP_LEVEL >= 1, OFFLOAD_MODEL) cannot have vLLM
    serve the trained adapter itself (entrypoint/child/hooks/adapter_sync.py), and so syncs as ms-swift does,
    merging the adapter into a full copy of the weights on the CPU every step; "" when it can. Pure: the
    plan sets GRPO_RIG_ADAPTER_SYNC exactly where this is "", and validate warns where it is not."""
    return adapter_sync_blocked(recipe, deepspeed_config)[0]


def adapter_sync_blocked(recipe: Recipe, deepspeed_config: dict | None = None) -> tuple[str, str]:
    """(why, the change that lifts it) of adapter_sync_blocker; ("", "") when vLLM can serve the adapter."""
    a, s = recipe.trainer_args, recipe.settings
    v0 = recipe.vllm_use_v1 is False or (
        s.VLLM_SCHEDULER_STEPS > 1 and "scheduler_steps" not in s.disabled_hooks
    )
    checks = (
        (a.train_type != "lora", "there is no adapter (TRAIN_TYPE is not lora)", "TRAIN_TYPE=lora"),
        (
            a.sleep_level >= 2,
            "SLEEP_LEVEL=2 discards the base weights vLLM would serve the adapter on",
            "SLEEP_LEVEL=1",
        ),
        (
            v0,
            "vLLM's V0 engine runs it (VLLM_SCHEDULER_STEPS > 1 or VLLM_USE_V1=0): its multi-step runner "
            "refuses LoRA (vllm/worker/multi_step_model_runner.py:285-287), and only V1 was measured",
            "VLLM_SCHEDULER_STEPS=1, without VLLM_USE_V1=0",
        ),
        (
            deepspeed_stage(a.deepspeed, deepspeed_config).stage == 3,
            "DeepSpeed ZeRO-3 partitions the adapter's weights (ms-swift gathers them for its merge)",
            "DEEPSPEED=zero2, or none",
        ),
        (
            a.lora_rank > VLLM_MAX_LORA_RANK,
            f"vLLM 0.8.5 serves LoRA ranks up to {VLLM_MAX_LORA_RANK}",
            f"LORA_RANK={VLLM_MAX_LORA_RANK} or less",
        ),
        (
            "adapter_sync" in s.disabled_hooks,
            "DISABLE_HOOKS turns adapter_sync off",
            "take adapter_sync out of DISABLE_HOOKS",
        ),
    )
    return next(((why, fix) for blocked, why, fix in checks if blocked), ("", ""))


def engine_v0(recipe: Recipe) -> bool:
    """Whether a colocated vLLM runs its V0 engine: multi-step scheduling (VLLM_SCHEDULER_STEPS > 1, which
    plan runs with VLLM_USE_V1=0) or the recipe's own VLLM_USE_V1=0."""
    return recipe.settings.VLLM_SCHEDULER_STEPS > 1 or recipe.vllm_use_v1 is False


def colocate_settings(
    a: TrainerArgs,
    b: Batch,
    w: Workload,
    expandable: bool = False,
    v0: bool = False,
    disabled_hooks: frozenset[str] = frozenset(),
) -> memory.Colocate:
    """vLLM's colocate settings as the run will see them (recipe values, else ms-swift's defaults; the
    child hooks DISABLE_HOOKS leaves out, where they change what meets on the card); `v0`:
    engine_v0."""
    return memory.Colocate(
        utilization=a.vllm_gpu_memory_utilization,
        sleep_level=a.sleep_level,
        max_model_len=a.vllm_max_model_len or (w.dims.max_positions or w.prompt_tokens + w.completion_tokens),
        # ms-swift's colocate engine: max_num_seqs = per-device batch x vLLM TP x steps_per_generation
        # (v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:449-475)
        round_tokens=b.per_device * b.steps_per_generation * (w.prompt_tokens + w.completion_tokens),
        expandable=expandable,
        liger=a.use_liger_kernel,
        engine_v0=v0,
        offload_model=a.offload_model,
        trainer_leaves_first="offload_before_wake" not in disabled_hooks,
    )


def card_size(recipe: Recipe, inventory: Inventory) -> Callable[[int], float]:
    """GiB of a GPU as the run sees it: EMULATE_VRAM_GB caps every card (child/hooks/emulate_vram.py)."""
    emulated = recipe.settings.EMULATE_VRAM_GB

    def card(gpu: int) -> float:
        info = inventory.gpu(gpu)
        total = info.memory_total_gib if info else 24.0
        return min(total, emulated) if emulated else total

    return card


def per_gpu(
    layout: Layout,
    card: Callable[[int], float],
    w: Workload,
    colocate: memory.Colocate | None,
    rollout_utilization: float,
    offload: bool = False,
    coef: Mapping[str, float] | None = None,
) -> list[GpuEstimate]:
    """Predicted card-level peak of every GPU the layout uses (pure: the shape chooser calls it for each
    candidate). `card(gpu)` is the card's size in GiB; `offload`: OFFLOAD_MODEL or OFFLOAD_OPTIMIZER."""
    train = memory.estimate_training(w, coef)
    training_parts = {
        "context": CUDA_CONTEXT_GIB,
        "weights": train.weights,
        "optimizer": train.optimizer,
        "activations": train.activations,
        "logits": train.logits,
        "kv cache (HF)": train.kv_cache,
    }
    estimates: list[GpuEstimate] = []
    for gpu in layout.train_gpus:
        total = card(gpu)
        if colocate is None:
            estimates.append(
                GpuEstimate(gpu, "trainer", total, CUDA_CONTEXT_GIB + train.peak, training_parts)
            )
        elif offload:
            # the phases do not meet on the card: the peak is the larger one (memory.offload_phases)
            phases = memory.offload_phases(train, total, colocate, coef)
            sums = {name: sum(parts.values()) for name, parts in phases.items()}
            larger = max(sums, key=sums.get)
            estimates.append(
                GpuEstimate(
                    gpu,
                    f"trainer + vLLM (colocate, offload; peak in {larger})",
                    total,
                    sums[larger],
                    phases[larger],
                )
            )
        else:
            calibrated = w.dims.params <= memory.CALIBRATED_MAX_PARAMS
            parts = memory.colocate_peak(train, total, colocate, coef, calibrated)
            estimates.append(GpuEstimate(gpu, "trainer + vLLM (colocate)", total, sum(parts.values()), parts))
    for gpu in layout.rollout_gpus:
        total = card(gpu)
        estimates.append(
            GpuEstimate(
                gpu,
                "rollout (vLLM)",
                total,
                CUDA_CONTEXT_GIB + rollout_utilization * total,
                {"context": CUDA_CONTEXT_GIB, "vLLM": rollout_utilization * total},
            )
        )
    return estimates


@dataclasses.dataclass(frozen=True)
class Budget:
    """What a run asks of each GPU, at the recipe's current shape."""

    batch: Batch | None  # None while the batch's inputs are refused
    workload: Workload | None  # None when the model's dimensions are unknown (note says why)
    note: str
    colocate: memory.Colocate | None  # vLLM's settings in colocate mode
    card: Callable[[int], float] = dataclasses.field(repr=False, compare=False)
    offload: bool = False  # OFFLOAD_MODEL or OFFLOAD_OPTIMIZER
    rollout_utilization: float = 0.9  # a local rollout server's share of its GPUs

    def estimates(
        self, layout: Layout, w: Workload | None = None, colocate: memory.Colocate | None = None
    ) -> list[GpuEstimate]:
        """Per-GPU peaks for this budget, or for a trial workload/colocate (the shape chooser's)."""
        w = w or self.workload
        if w is None:
            return []
        colocate = colocate if colocate is not None else self.colocate
        return per_gpu(layout, self.card, w, colocate, self.rollout_utilization, self.offload)


def host_ram(recipe: Recipe, layout: Layout, budget: Budget) -> dict[str, float]:
    """GiB of this node's RAM the run's colocated training processes need for what they offload around
    generation and vLLM's sleep (memory.host_ram, once per process on the node); {} where nothing waits in
    CPU memory or the memory cannot be estimated."""
    a, w = recipe.trainer_args, budget.workload
    if layout.mode != "colocate" or w is None or budget.colocate is None:
        return {}
    train = memory.estimate_training(w)
    parts = memory.host_ram(train, w, a.offload_model, a.offload_optimizer, budget.colocate.sleep_level)
    return {k: v * layout.nproc_per_node for k, v in parts.items()}


def compute(
    recipe: Recipe, layout: Layout, inventory: Inventory, facts: Facts, dataset_paths: list[str]
) -> Budget:
    """The budget of `recipe` on `layout` (plan.build calls this once per shape of the recipe)."""
    a, card = recipe.trainer_args, card_size(recipe, inventory)
    b = batch_of(recipe, layout)
    util = recipe.rollout_args.gpu_memory_utilization
    if b is None:
        return Budget(None, None, "the batch's values are refused", None, card, a.offload, util)
    w, note = workload(recipe, b, dataset_paths, facts)
    colocate = (
        colocate_settings(
            a, b, w, expandable(recipe, layout), engine_v0(recipe), recipe.settings.disabled_hooks
        )
        if w is not None and layout.mode == "colocate"
        else None
    )
    return Budget(b, w, note, colocate, card, a.offload, util)
