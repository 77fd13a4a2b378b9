"""Per-GPU memory plan of a run and the refusal of one that does not fit (../shared/cases C09)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from entrypoint import datasets as dataset
from entrypoint import memory
from entrypoint.datasets import dataset_key
from entrypoint.errors import Problem
from entrypoint.memory import (
    CUDA_CONTEXT_GIB,
    GIB,
    HEADROOM_WARNING,
    VLLM_NON_KV_GIB,
    GpuEstimate,
    ModelDims,
    Workload,
)
from entrypoint.preflight import values
from entrypoint.rewards import countdown

if TYPE_CHECKING:
    from entrypoint.host import Facts
    from entrypoint.plan import Plan

DEFAULT_PROMPT_TOKENS = 512
PROMPT_SAMPLE_ROWS = 2000  # rows of each dataset the prompt-length estimate reads
SLEEPING_VLLM_GIB = 0.3  # what a sleeping colocated vLLM keeps (allocator pools, NCCL)


def prompt_tokens(plan: Plan, facts: Facts) -> tuple[int, str]:
    """(tokens, where the number comes from) for the longest prompt: PROMPT_TOKENS, else estimated from
    generated tasks or the first rows of the JSONL datasets (facts.datasets) plus the system prompt."""
    s = plan.recipe.settings
    if s.PROMPT_TOKENS:
        return s.PROMPT_TOKENS, "PROMPT_TOKENS"
    if s.DATASET_GENERATOR == "countdown":
        return memory.estimate_prompt_tokens(
            list(countdown.generate(50, 0))
        ), "estimated from generated tasks"
    rows: list[dict] = []
    for spec in plan.dataset_paths:
        path = Path(dataset.parse_spec(spec).path)
        found = facts.datasets.get(dataset_key(path)) if path.suffix == ".jsonl" else None
        if found is not None:
            rows += [row for _, row in found.rows[:PROMPT_SAMPLE_ROWS]]
    if rows:
        system = values.value(plan, "system", None)
        extra = 0
        if system:
            text = facts.system_text if system.endswith(".txt") and facts.system_text is not None else system
            extra = memory.estimate_prompt_tokens([{"messages": [{"content": text}]}])
        return memory.estimate_prompt_tokens(rows) + extra, "estimated from the dataset"
    return DEFAULT_PROMPT_TOKENS, "assumed; set PROMPT_TOKENS for a better estimate"


def workload(plan: Plan, facts: Facts) -> tuple[Workload | None, str]:
    """The planner's view of one training process (model dimensions, batch, tokens), or None when the
    model's config.json was not found (facts.model_config)."""
    config, source = facts.model_config
    if config is None:
        return (
            None,
            "no config.json found for MODEL (local path, hub cache or entrypoint/data/model_configs.json)",
        )
    b = values.batch(plan)
    dtype = values.value(plan, "torch_dtype", "bfloat16")
    full = values.value(plan, "train_type", "lora") == "full"
    beta = float(values.value(plan, "beta", "0.04"))
    ds = values.value(plan, "deepspeed", "") or ""
    zero = 3 if "zero3" in ds else 2 if "zero2" in ds else 0
    prompt, why = prompt_tokens(plan, facts)
    max_length = values.value(plan, "max_length", None)
    if max_length:
        prompt = min(prompt, int(max_length))
    w = Workload(
        dims=ModelDims.from_config(config),
        dtype_bytes=memory.DTYPE_BYTES.get(dtype, 2),
        full=full,
        lora_rank=int(values.value(plan, "lora_rank", "8")),
        per_device=b.per_device,
        generation_per_device=b.per_device * b.steps_per_generation,
        prompt_tokens=prompt,
        completion_tokens=int(values.value(plan, "max_completion_length", "512")),
        gradient_checkpointing=values.value(plan, "gradient_checkpointing", "true") == "true",
        reference_copy=full and beta > 0,
        zero_stage=zero,
        world=b.world,
        hf_generation=values.value(plan, "use_vllm", "false") != "true",
    )
    return w, f"model dimensions from {source}; prompt {prompt} tokens, {why}"


def colocate_settings(plan: Plan, w: Workload) -> memory.Colocate:
    """vLLM's colocate settings as the run will see them (recipe values, else ms-swift's defaults)."""
    b = values.batch(plan)
    length = values.value(plan, "vllm_max_model_len", None)
    return memory.Colocate(
        utilization=float(values.value(plan, "vllm_gpu_memory_utilization", "0.9")),
        sleep_level=int(values.value(plan, "sleep_level", "0")),
        max_model_len=int(length)
        if length
        else (w.dims.max_positions or w.prompt_tokens + w.completion_tokens),
        # ms-swift's colocate engine: max_num_seqs = per-device batch x vLLM TP x steps_per_generation
        # (v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:449-475)
        round_tokens=b.per_device * b.steps_per_generation * (w.prompt_tokens + w.completion_tokens),
    )


def per_gpu(
    layout,
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
    training_parts = {"context": CUDA_CONTEXT_GIB, "weights": train.weights, "optimizer": train.optimizer,
                      "activations": train.activations, "logits": train.logits, "kv cache (HF)": train.kv_cache}  # fmt: skip
    estimates: list[GpuEstimate] = []
    for gpu in layout.train_gpus:
        total = card(gpu)
        if colocate is None:
            estimates.append(
                GpuEstimate(gpu, "trainer", total, CUDA_CONTEXT_GIB + train.peak, training_parts)
            )
        elif offload:
            # Offloading empties torch's cache around generation, so the two phases do not meet on the card
            # (not calibrated: no offload measurement yet).
            vllm = colocate.utilization * total
            sleeping = SLEEPING_VLLM_GIB if colocate.sleep_level >= 1 else vllm
            peak = max(CUDA_CONTEXT_GIB + vllm, CUDA_CONTEXT_GIB + train.peak + sleeping)
            estimates.append(GpuEstimate(gpu, "trainer + vLLM (colocate, offload)", total, peak,
                                         {**training_parts, "vLLM": vllm}))  # fmt: skip
        else:
            parts = memory.colocate_peak(train, total, colocate, coef)
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
            )  # fmt: skip
        )
    return estimates


def card_size(plan: Plan) -> Callable[[int], float]:
    """GiB of a GPU as the run sees it: EMULATE_VRAM_GB caps every card (sitecustomize.py)."""
    s = plan.recipe.settings

    def card(gpu: int) -> float:
        info = plan.inventory.gpu(gpu)
        total = info.memory_total_gib if info else 24.0
        return min(total, s.EMULATE_VRAM_GB) if s.EMULATE_VRAM_GB else total

    return card


def estimate(plan: Plan, facts: Facts) -> tuple[list[GpuEstimate], list[Problem], str]:
    """Per-GPU estimates, problems (a predicted OOM is fatal unless MEMORY_CHECK says otherwise), and a note."""
    r, s, layout = plan.recipe, plan.recipe.settings, plan.layout
    if layout.mode == "cpu" or s.MEMORY_CHECK == "off":
        return [], [], ""
    w, note = workload(plan, facts)
    if w is None:
        return (
            [],
            [
                Problem(
                    "memory",
                    f"not estimated: {note}",
                    "set MEMORY_CHECK=off to silence, or mount the model",
                    fatal=False,
                )
            ],
            note,
        )
    card = card_size(plan)
    colocate = colocate_settings(plan, w) if layout.mode == "colocate" else None
    offload = "true" in (
        values.value(plan, "offload_model", "false"),
        values.value(plan, "offload_optimizer", "false"),
    )
    rollout_util = float(r.rollout_arg("gpu_memory_utilization"))
    estimates = per_gpu(layout, card, w, colocate, rollout_util, offload)

    problems: list[Problem] = []
    fatal = s.MEMORY_CHECK == "error"
    knobs = {
        "colocate": "lower VLLM_GPU_MEMORY_UTILIZATION (e.g. 0.3-0.4 on 24 GB), OFFLOAD_MODEL=true and "
        "OFFLOAD_OPTIMIZER=true with SLEEP_LEVEL=1, a shorter MAX_COMPLETION_LENGTH, a smaller PER_DEVICE_TRAIN_BATCH_SIZE "
        "(keep the generation batch with GRADIENT_ACCUMULATION_STEPS), fewer NUM_GENERATIONS",
        "server": "a shorter MAX_COMPLETION_LENGTH, a smaller PER_DEVICE_TRAIN_BATCH_SIZE (raise GRADIENT_ACCUMULATION_STEPS "
        "to keep the batch), GRADIENT_CHECKPOINTING=true, DEEPSPEED=zero2 or zero3 for full fine-tuning",
        "hf": "a shorter MAX_COMPLETION_LENGTH, a smaller PER_DEVICE_TRAIN_BATCH_SIZE, fewer NUM_GENERATIONS, "
        "GRADIENT_CHECKPOINTING=true",
    }
    for e in estimates:
        what = (
            f"predicted {e.peak_gib:.1f} GiB on GPU {e.gpu} ({e.role}), which has {e.card_gib:.1f} GiB: "
            + ", ".join(f"{k} {v:.1f}" for k, v in e.parts.items() if abs(v) >= 0.05)
        )
        if e.role.startswith("rollout"):
            continue
        if e.peak_gib > e.card_gib:
            problems.append(
                Problem(
                    "memory",
                    f"does not fit: {what}",
                    f"turn these knobs: {knobs[layout.mode]}; or MEMORY_CHECK=warn to try anyway",
                    fatal=fatal,
                )
            )
        elif e.headroom < HEADROOM_WARNING:
            problems.append(
                Problem(
                    "memory",
                    f"under {HEADROOM_WARNING:.0%} headroom: {what}",
                    f"consider: {knobs[layout.mode]}",
                    fatal=False,
                )
            )
    problems += _vllm_fits(plan, w, card, colocate)
    return estimates, problems, note


def _vllm_fits(plan: Plan, w: Workload, card, colocate: memory.Colocate | None) -> list[Problem]:
    """vLLM refuses to start unless one sequence of max_model_len fits in its KV cache budget."""
    r, layout = plan.recipe, plan.layout
    need_one = lambda length: memory.kv_gib(w.dims, w.dtype_bytes, length)  # noqa: E731
    out: list[Problem] = []
    if colocate is not None:
        train = memory.estimate_training(w)
        for gpu in layout.train_gpus:
            budget = memory.kv_budget(w.dims, w.dtype_bytes, card(gpu), colocate.utilization, train.weights)
            if budget < need_one(colocate.max_model_len):
                out.append(
                    Problem(
                        "VLLM_GPU_MEMORY_UTILIZATION",
                        f"{colocate.utilization} x {card(gpu):.1f} GiB leaves {budget:.1f} GiB for vLLM's KV cache once the "
                        f"CUDA context, the trainer's and vLLM's weights are counted; one sequence of {colocate.max_model_len} "
                        f"tokens needs {need_one(colocate.max_model_len):.2f} GiB (vLLM would refuse to start)",
                        "raise VLLM_GPU_MEMORY_UTILIZATION, or set VLLM_MAX_MODEL_LEN to prompt + completion tokens",
                    )
                )
        return out
    if not layout.local_rollout:
        return out
    util = float(r.rollout_arg("gpu_memory_utilization"))
    length = int(r.rollout_arg("max_model_len", str(w.prompt_tokens + w.completion_tokens)))
    weights = w.dims.params * w.dtype_bytes / GIB
    for gpu in layout.rollout_gpus:
        kv_budget = util * card(gpu) - weights - VLLM_NON_KV_GIB
        if kv_budget < need_one(length):
            out.append(
                Problem(
                    "ROLLOUT_GPU_MEMORY_UTILIZATION",
                    f"{util} x {card(gpu):.1f} GiB leaves {kv_budget:.1f} GiB for vLLM's KV cache after {weights:.1f} GiB of "
                    f"weights; one sequence of {length} tokens needs {need_one(length):.2f} GiB (vLLM would refuse to start)",
                    "raise ROLLOUT_GPU_MEMORY_UTILIZATION, or lower the max model length",
                )
            )
    return out
