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
from entrypoint.rewards import tasks

if TYPE_CHECKING:
    from entrypoint.facts import Facts
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
    if s.DATASET_GENERATOR:
        rows = list(tasks.TASKS[s.DATASET_GENERATOR].generate(50, 0))
        return memory.estimate_prompt_tokens(rows), "estimated from generated tasks"
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
    try:
        dims = ModelDims.from_config(config)
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"the config.json from {source} is not one the planner reads (missing {exc})"
    b = values.batch(plan)
    dtype = values.value(plan, "torch_dtype", "bfloat16")
    full = values.value(plan, "train_type", "lora") == "full"
    beta = float(values.value(plan, "beta", "0.04"))
    ds = values.value(plan, "deepspeed", "") or ""
    zero = 3 if "zero3" in ds else 2 if "zero2" in ds else 0
    if ds.endswith(".json") or ds.startswith("{"):  # a user's config: its stage and offload settings
        zero, offload_opt, offload_par = _deepspeed_file(plan, facts, ds)
    else:
        offload_opt, offload_par = ds.endswith("_offload"), ds == "zero3_offload"
    prompt, why = prompt_tokens(plan, facts)
    max_length = values.value(plan, "max_length", None)
    if max_length:
        prompt = min(prompt, int(max_length))
    w = Workload(
        dims=dims,
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
        offload_optimizer=offload_opt,
        offload_params=offload_par,
        vllm_tp=int(values.value(plan, "vllm_tensor_parallel_size", "1")),
    )
    return w, f"model dimensions from {source}; prompt {prompt} tokens, {why}"


def _deepspeed_file(plan: Plan, facts: Facts, value: str) -> tuple[int, bool, bool]:
    """(stage, optimizer offloaded, parameters offloaded) of a DeepSpeed JSON file or string (unknown: 0)."""
    import json

    try:
        whole = json.loads(value) if value.startswith("{") else (facts.deepspeed_config or {})
        config = whole.get("zero_optimization", {}) if isinstance(whole, dict) else {}
    except ValueError:
        return 0, False, False
    on_cpu = lambda key: (config.get(key) or {}).get("device") in ("cpu", "nvme")  # noqa: E731
    return int(config.get("stage", 0) or 0), on_cpu("offload_optimizer"), on_cpu("offload_param")


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
        why = Problem("memory", f"not estimated: {note}", "set MEMORY_CHECK=off to silence, or mount the model",
                      fatal=False)  # fmt: skip
        return [], [why], note
    card = card_size(plan)
    colocate = colocate_settings(plan, w) if layout.mode == "colocate" else None
    offload = "true" in (
        values.value(plan, "offload_model", "false"),
        values.value(plan, "offload_optimizer", "false"),
    )
    estimates = per_gpu(layout, card, w, colocate, float(r.rollout_arg("gpu_memory_utilization")), offload)
    extrapolated = w.dims.params > memory.CALIBRATED_MAX_PARAMS
    problems = _peak_problems(plan, w, estimates, colocate, extrapolated)
    problems += _vllm_fits(plan, w, card, colocate, offload)
    if extrapolated:
        note += (f"; extrapolated: the coefficients were fitted on models up to 1.5B parameters, this one has "
                 f"{w.dims.params / 1e9:.1f}B (docs/benchmarks/memory-calibration.json)")  # fmt: skip
    return estimates, problems, note


def _knobs(plan: Plan, colocate: memory.Colocate | None) -> dict[str, str]:
    """Per layout mode, the settings that lower a training GPU's peak, as a fix names them."""
    share = "lower VLLM_GPU_MEMORY_UTILIZATION (e.g. 0.3-0.4 on 24 GB)"
    if colocate is not None and plan.recipe.source("VLLM_GPU_MEMORY_UTILIZATION").startswith("planner:"):
        # the planner already chose the smallest share that holds the generation round: lowering it is no knob
        share = ("fewer or shorter completions per generation round (vLLM's share, VLLM_GPU_MEMORY_UTILIZATION="
                 f"{colocate.utilization:.2f}, was chosen by the planner to hold them)")  # fmt: skip
    return {
        "colocate": f"{share}, OFFLOAD_MODEL=true and OFFLOAD_OPTIMIZER=true with SLEEP_LEVEL=1, a shorter "
        "MAX_COMPLETION_LENGTH, a smaller PER_DEVICE_TRAIN_BATCH_SIZE (keep the generation batch with "
        "GRADIENT_ACCUMULATION_STEPS), fewer NUM_GENERATIONS",
        "server": "a shorter MAX_COMPLETION_LENGTH, a smaller PER_DEVICE_TRAIN_BATCH_SIZE (raise GRADIENT_ACCUMULATION_STEPS "
        "to keep the batch), GRADIENT_CHECKPOINTING=true, DEEPSPEED=zero2 or zero3 for full fine-tuning",
        "hf": "a shorter MAX_COMPLETION_LENGTH, a smaller PER_DEVICE_TRAIN_BATCH_SIZE, fewer NUM_GENERATIONS, "
        "GRADIENT_CHECKPOINTING=true",
    }


def _peak_problems(
    plan: Plan,
    w: Workload,
    estimates: list[GpuEstimate],
    colocate: memory.Colocate | None,
    extrapolated: bool,
) -> list[Problem]:
    """A predicted OOM or thin headroom per group of alike GPUs. Beyond the measured models an OOM refuses
    only when it is certain (certain_gib) or past the planner's uncertainty (EXTRAPOLATED_REFUSE_RATIO)."""
    s, mode = plan.recipe.settings, plan.layout.mode
    train = memory.estimate_training(w)
    knobs = _knobs(plan, colocate)
    beyond = (
        f" (extrapolated: a {w.dims.params / 1e9:.1f}B model, and the planner's measurements stop at 1.5B, so this "
        f"warns instead of refusing up to {memory.EXTRAPOLATED_REFUSE_RATIO:.2f}x the card; MEMORY_CHECK=off silences it)"
    )
    problems: list[Problem] = []
    for e, gpus in _alike(estimates):  # one problem for GPUs that get the same prediction
        what = (
            f"predicted {e.peak_gib:.1f} GiB on GPU {gpus} ({e.role}), which has {e.card_gib:.1f} GiB: "
            + ", ".join(f"{k} {v:.1f}" for k, v in e.parts.items() if abs(v) >= 0.05)
        )
        if e.role.startswith("rollout"):
            if e.headroom < HEADROOM_WARNING:  # vLLM takes its share up front; the rest is all that is left
                problems.append(Problem("memory", f"under {HEADROOM_WARNING:.0%} headroom: {what}; anything else on the "
                                        "card (a display, another process) makes vLLM refuse to start",
                                        "lower ROLLOUT_GPU_MEMORY_UTILIZATION to "
                                        f"{max(0.1, 0.9 - CUDA_CONTEXT_GIB / e.card_gib):.2f} or less on this "
                                        f"{e.card_gib:.0f} GiB card", fatal=False))  # fmt: skip
        elif e.peak_gib > e.card_gib:
            sure = (
                not extrapolated
                or certain_gib(w, train, e) > e.card_gib
                or e.peak_gib > memory.EXTRAPOLATED_REFUSE_RATIO * e.card_gib
            )
            past = (f" (extrapolated beyond the measured models, but {e.peak_gib / e.card_gib:.1f}x the card is past "
                    f"the planner's uncertainty, {memory.EXTRAPOLATED_REFUSE_RATIO:.2f}x)")  # fmt: skip
            problems.append(Problem("memory", f"does not fit: {what}" + (beyond if not sure else past if extrapolated else ""),
                                    f"turn these knobs: {knobs[mode]}" + ("; or MEMORY_CHECK=warn to try anyway" if sure else ""),
                                    fatal=s.MEMORY_CHECK == "error" and sure))  # fmt: skip
        elif e.headroom < HEADROOM_WARNING:
            problems.append(Problem("memory", f"under {HEADROOM_WARNING:.0%} headroom: {what}",
                                    f"consider: {knobs[mode]}", fatal=False))  # fmt: skip
    return problems


def certain_gib(w: Workload, train: memory.TrainingEstimate, e: GpuEstimate) -> float:
    """What is surely on a training GPU at the first optimizer step, whatever the fitted terms say (GiB):
    the CUDA context, or a colocated vLLM's whole share (vLLM fills utilization x card with the process's
    memory, the trainer's weights included: vllm 0.8.5.post1 v1/worker/gpu_worker.py:194-210), the
    optimizer states, and one micro-batch's fp32 logits (GRPO computes per-token log-probabilities from
    them). Beyond the measured models only this refuses; the rest of the estimate warns."""
    logits = w.per_device * w.completion_tokens * w.dims.vocab * 4 / GIB
    states = train.resident - train.weights
    if "vLLM" in e.parts and "offload" not in e.role:
        return max(e.parts["vLLM"], CUDA_CONTEXT_GIB + train.weights) + states + logits
    return CUDA_CONTEXT_GIB + train.resident + logits


def _alike(estimates: list[GpuEstimate]) -> list[tuple[GpuEstimate, str]]:
    """(first estimate, "0,1,2") per group of GPUs with the same role, card and predicted parts."""
    groups: dict[tuple, list[GpuEstimate]] = {}
    for e in estimates:
        key = (
            e.role,
            round(e.card_gib, 1),
            round(e.peak_gib, 1),
            tuple((k, round(v, 1)) for k, v in e.parts.items()),
        )
        groups.setdefault(key, []).append(e)
    return [(group[0], ",".join(str(e.gpu) for e in group)) for group in groups.values()]


def _vllm_fits(
    plan: Plan, w: Workload, card, colocate: memory.Colocate | None, offload: bool = False
) -> list[Problem]:
    """vLLM refuses to start unless one sequence of max_model_len fits in its KV cache budget."""
    r, layout = plan.recipe, plan.layout
    # MEMORY_CHECK=warn: the user tries anyway; a model beyond the measured ones only warns
    fatal = r.settings.MEMORY_CHECK == "error" and w.dims.params <= memory.CALIBRATED_MAX_PARAMS
    out: list[Problem] = []
    if colocate is not None:
        tp = w.vllm_tp
        need = memory.kv_gib(w.dims, w.dtype_bytes, colocate.max_model_len, tp)
        # OFFLOAD_MODEL: ms-swift builds the engine with the trainer's weights in CPU memory
        # (v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:274-280, offload_context)
        model_offloaded = offload and r.arg("offload_model") == "true"
        resident = 0.0 if model_offloaded else memory.estimate_training(w).weights
        by_card: dict[float, list[int]] = {}
        for gpu in layout.train_gpus:
            by_card.setdefault(round(card(gpu), 2), []).append(gpu)
        for size, gpus in by_card.items():
            budget = memory.kv_budget(w.dims, w.dtype_bytes, size, colocate.utilization, resident, tp)
            at_most = memory.kv_budget(
                w.dims, w.dtype_bytes, size, memory.VLLM_UTILIZATION_CEILING, resident, tp
            )
            fix = (
                "raise VLLM_GPU_MEMORY_UTILIZATION, set VLLM_MAX_MODEL_LEN to prompt + completion tokens, or "
                "raise VLLM_TENSOR_PARALLEL_SIZE"
                if at_most >= need
                else f"no share of this {size:.0f} GiB card holds both copies of the weights and one sequence: "
                "OFFLOAD_MODEL=true (ms-swift builds vLLM while the trainer's weights are in CPU memory), a rollout "
                "server on its own GPU (ROLLOUT_GPUS), VLLM_TENSOR_PARALLEL_SIZE over several GPUs, or a smaller MODEL"
            )
            if budget < need:
                out.append(
                    Problem(
                        "VLLM_GPU_MEMORY_UTILIZATION",
                        f"{colocate.utilization} x {size:.1f} GiB (GPU {','.join(map(str, gpus))}) leaves {budget:.1f} GiB "
                        "for vLLM's KV cache once the "
                        f"CUDA context, the trainer's and vLLM's weights (1/{tp} per GPU) are counted; one sequence of "
                        f"{colocate.max_model_len} tokens needs {need:.2f} GiB (vLLM would refuse to start)",
                        fix,
                        fatal=fatal,
                    )
                )
        return out
    if not layout.local_rollout:
        return out
    util = float(r.rollout_arg("gpu_memory_utilization"))
    tp = int(r.rollout_arg("tensor_parallel_size", "1"))
    length = int(r.rollout_arg("max_model_len", str(w.prompt_tokens + w.completion_tokens)))
    weights = w.dims.params * w.dtype_bytes / GIB / tp
    need = memory.kv_gib(w.dims, w.dtype_bytes, length, tp)
    for gpu in layout.rollout_gpus:
        kv_budget = util * card(gpu) - weights - VLLM_NON_KV_GIB
        what = (f"{util} x {card(gpu):.1f} GiB leaves {kv_budget:.1f} GiB for vLLM's KV cache on GPU {gpu} after "
                f"{weights:.1f} GiB of weights (1/{tp} of the model); one sequence of {length} tokens needs {need:.2f} GiB")  # fmt: skip
        if kv_budget < need:
            out.append(
                Problem(
                    "ROLLOUT_GPU_MEMORY_UTILIZATION",
                    f"{what} (vLLM would refuse to start)",
                    "raise ROLLOUT_GPU_MEMORY_UTILIZATION, lower ROLLOUT_MAX_MODEL_LEN, or raise ROLLOUT_TENSOR_PARALLEL_SIZE",
                    fatal=fatal,
                )
            )
        elif kv_budget < HEADROOM_WARNING * util * card(gpu):
            out.append(
                Problem(
                    "ROLLOUT_GPU_MEMORY_UTILIZATION",
                    f"under {HEADROOM_WARNING:.0%} of vLLM's share is left for the KV cache: {what}; vLLM will run "
                    "few sequences at once, or refuse to start if the estimate is off",
                    "raise ROLLOUT_GPU_MEMORY_UTILIZATION or ROLLOUT_TENSOR_PARALLEL_SIZE, or use a smaller model",
                    fatal=False,
                )
            )
    return out
