"""The refusal of a run whose predicted memory does not fit (case C09, tests/cases.md): reads the budget and the
per-GPU peaks plan.build computed (budget.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from entrypoint.errors import Problem
from entrypoint.plan import memory, shape
from entrypoint.plan.memory import (
    CUDA_CONTEXT_GIB,
    GIB,
    HEADROOM_WARNING,
    VLLM_NON_KV_GIB,
    GpuEstimate,
    Workload,
)

if TYPE_CHECKING:
    from entrypoint.plan.build import Plan


def check(plan: Plan) -> list[Problem]:
    """The memory problems of a plan: a predicted OOM is fatal unless MEMORY_CHECK says otherwise; a thin
    headroom, or a vLLM share too small for one sequence, warns or refuses. Reads plan.budget and
    plan.memory (budget.py computed both); nothing else."""
    s, layout, b = plan.recipe.settings, plan.layout, plan.budget
    if not plan.placed or layout.mode == "cpu" or s.MEMORY_CHECK == "off" or b is None:
        return []
    w = b.workload
    if b.batch is None:  # the batch's own values are refused: their errors say what to change
        return []
    if w is None:
        return _not_estimated(plan, b.note)
    extrapolated = w.dims.params > memory.CALIBRATED_MAX_PARAMS
    return _peak_problems(plan, w, list(plan.memory), b.colocate, extrapolated) + _vllm_fits(
        plan, w, b.card, b.colocate, b.offload
    )


def _not_estimated(plan: Plan, note: str) -> list[Problem]:
    """A plan without a memory estimate (the model's config.json unknown here). Where vLLM is colocated at
    ms-swift's default share (0.9, no value from the recipe or the planner) and stays awake while training,
    that share is taken from every training GPU before the first step, leaving the trainer a tenth: the run
    case C09 describes (tests/cases.md), refused whatever the model (MEMORY_CHECK=warn starts it anyway). Otherwise
    a warning."""
    r, s = plan.recipe, plan.recipe.settings
    a = r.trainer_args
    if plan.layout.mode != "colocate" or r.is_set("VLLM_GPU_MEMORY_UTILIZATION") or a.sleep_level >= 1:
        return [Problem("memory", f"not estimated: {note}", "set MEMORY_CHECK=off to silence, or mount the model",
                        fatal=False)]  # fmt: skip
    util = a.vllm_gpu_memory_utilization
    return [
        Problem(
            "memory",
            f"not estimated ({note}), and vLLM is colocated at ms-swift's default share {util:.2f} without sleep "
            f"mode: it takes {util:.0%} of each training GPU before the first step, leaving the trainer "
            f"{1 - util:.0%} for the model, its gradients and activations",
            "set VLLM_GPU_MEMORY_UTILIZATION (0.3 to 0.5 is usual beside training), or SLEEP_LEVEL=1; or give "
            "MODEL as a local directory with its config.json (or download the model once into the hub cache) "
            "so the planner sizes the share; MEMORY_CHECK=warn starts it as it is",
            fatal=s.MEMORY_CHECK == "error",
        )
    ]


def _share_knob(plan: Plan, colocate: memory.Colocate) -> str:
    """The colocated vLLM share as a knob: the value that still holds a generation round when it is lower
    than the recipe's (shape.smallest_share), never a range that may be what the recipe already has."""
    if plan.recipe.source("VLLM_GPU_MEMORY_UTILIZATION").startswith("planner:"):
        # the planner already chose the smallest share that holds the generation round: lowering it is no knob
        return ("fewer or shorter completions per generation round (vLLM's share, VLLM_GPU_MEMORY_UTILIZATION="
                f"{colocate.utilization:.2f}, was chosen by the planner to hold them)")  # fmt: skip
    b = plan.budget
    per_process = shape.step_completions(plan.recipe, b.batch).per_process if b.batch else 0
    smaller = shape.smallest_share(b, plan.layout, per_process) if per_process else None
    if smaller is not None and smaller.holds and smaller.utilization < colocate.utilization:
        return (f"VLLM_GPU_MEMORY_UTILIZATION={smaller.utilization:.2f} (now {colocate.utilization:.2f}; the smallest share whose KV "
                "cache holds a generation round)")  # fmt: skip
    return (f"fewer or shorter completions per generation round (a share below {colocate.utilization:.2f} would not "
            "hold them)")  # fmt: skip


def _knobs(plan: Plan, colocate: memory.Colocate | None) -> dict[str, str]:
    """Per layout mode, the settings that lower a training GPU's peak, as a fix names them."""
    share = _share_knob(plan, colocate) if colocate is not None else ""
    return {
        "colocate": f"{share}, OFFLOAD_MODEL=true and OFFLOAD_OPTIMIZER=true with SLEEP_LEVEL=1, a shorter "
        "MAX_COMPLETION_LENGTH, a smaller PER_DEVICE_TRAIN_BATCH_SIZE (keep the generation batch with "
        "GRADIENT_ACCUMULATION_STEPS), fewer NUM_GENERATIONS",
        "server": "a shorter MAX_COMPLETION_LENGTH, a smaller PER_DEVICE_TRAIN_BATCH_SIZE (raise GRADIENT_ACCUMULATION_STEPS "
        "to keep the batch), GRADIENT_CHECKPOINTING=true, DEEPSPEED=zero2 or zero3 for full fine-tuning",
        "hf": "a shorter MAX_COMPLETION_LENGTH, a smaller PER_DEVICE_TRAIN_BATCH_SIZE, fewer NUM_GENERATIONS, "
        "GRADIENT_CHECKPOINTING=true",
    }


def _largest_model_text(w: Workload, card_gib: float, colocate: memory.Colocate) -> str:
    """A fix for a model too large even with one weight copy on the card: the largest that would fit."""
    largest = memory.largest_one_copy_params(w, card_gib, colocate)
    return (f"even with one weight copy on the card at a time (OFFLOAD_MODEL, OFFLOAD_OPTIMIZER, SLEEP_LEVEL=1) this "
            f"{card_gib:.0f} GiB card trains at most about {largest:.1f}B parameters of this kind (bf16 LoRA, "
            f"micro-batch 1; this model has {w.dims.params / 1e9:.1f}B): a smaller MODEL; or, on several cards, "
            "DEEPSPEED=zero3 with VLLM_TENSOR_PARALLEL_SIZE=<the cards> shards both copies")  # fmt: skip


def _one_copy_fix(w: Workload, card_gib: float, colocate: memory.Colocate) -> str:
    """What still lowers a card whose trainer is offloaded around generation (OFFLOAD_MODEL), most
    direct first: the lever or hook missing from the one-copy path, LoRA for full fine-tuning, a smaller
    model when its weights alone leave too little, else the step's own size."""
    if colocate.sleep_level == 0:
        return "SLEEP_LEVEL=1: awake, vLLM's share stays on the card while the trainer trains"
    if not colocate.trainer_leaves_first:
        return ("take offload_before_wake out of DISABLE_HOOKS: without it ms-swift wakes vLLM's weights while the "
                "trainer's are still on the card")  # fmt: skip
    if w.full:
        return "TRAIN_TYPE=lora: full fine-tuning keeps gradients and optimizer states for every weight on the card"
    if w.dims.params / 1e9 > memory.largest_one_copy_params(w, card_gib, colocate):
        return _largest_model_text(w, card_gib, colocate)
    return ("a shorter MAX_COMPLETION_LENGTH, a smaller PER_DEVICE_TRAIN_BATCH_SIZE (keep the generation batch with "
            "GRADIENT_ACCUMULATION_STEPS), fewer NUM_GENERATIONS")  # fmt: skip


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
                                        f"{memory.rollout_share_with_headroom(e.card_gib):.2f} or less on this "
                                        f"{e.card_gib:.0f} GiB card", fatal=False))  # fmt: skip
        elif e.peak_gib > e.card_gib:
            sure = (
                not extrapolated
                or certain_gib(w, train, e) > e.card_gib
                or e.peak_gib > memory.EXTRAPOLATED_REFUSE_RATIO * e.card_gib
            )
            past = (f" (extrapolated beyond the measured models, but {e.peak_gib / e.card_gib:.1f}x the card is past "
                    f"the planner's uncertainty, {memory.EXTRAPOLATED_REFUSE_RATIO:.2f}x)")  # fmt: skip
            fit = _fit_text(plan)
            turn = f"{fit}{'other knobs' if fit else 'turn these knobs'}: {knobs[mode]}"
            if colocate is not None and colocate.offload_model:
                turn = _one_copy_fix(w, e.card_gib, colocate)
            problems.append(Problem("memory", f"does not fit: {what}" + (beyond if not sure else past if extrapolated else ""),
                                    turn + ("; or MEMORY_CHECK=warn to try anyway" if sure else ""),
                                    fatal=s.MEMORY_CHECK == "error" and sure))  # fmt: skip
        elif e.headroom < HEADROOM_WARNING:
            consider = (
                _one_copy_fix(w, e.card_gib, colocate) if colocate and colocate.offload_model else knobs[mode]
            )
            problems.append(Problem("memory", f"under {HEADROOM_WARNING:.0%} headroom: {what}",
                                    f"consider: {consider}", fatal=False))  # fmt: skip
    return problems


def _fit_text(plan: Plan) -> str:
    """The fix's first words when a shape fits (shape.largest_fit): the line to write, what it is predicted
    at, and, where the recipe closed the shape, how to let the planner choose; "" when none fits."""
    r = plan.recipe
    fit = shape.largest_fit(r, plan.layout, plan.budget)
    # the fix is a line to write: none when the recipe already has that text (raw: as the user wrote it)
    if fit is None or all(r.raw(k) == v for k, v in fit.values.items()):
        return ""
    e = fit.worst
    text = (f"write {fit.line()}: the largest micro-batch that fits, predicted {e.peak_gib:.1f} of {e.card_gib:.1f} "
            f"GiB on GPU {e.gpu} ({e.headroom:.0%} free), the same {fit.completions} completions per optimizer step")  # fmt: skip
    closed = [k for k in ("PER_DEVICE_TRAIN_BATCH_SIZE", "GRADIENT_ACCUMULATION_STEPS", "STEPS_PER_GENERATION")
              if r.layer(k) in (1, 2, 3)]  # fmt: skip
    closed += ["VLLM_GPU_MEMORY_UTILIZATION"] if "VLLM_GPU_MEMORY_UTILIZATION" in fit.values else []
    if closed and r.settings.AUTO_SHAPE:
        keep = "" if r.is_set("GENERATION_BATCH_SIZE") else f"set GENERATION_BATCH_SIZE={fit.completions}, "
        text += f"; or {keep}drop {' and '.join(closed)} and let the planner choose"
    return text + "; "


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
    """vLLM refuses to start unless one sequence of max_model_len fits in its KV cache budget: the colocated
    engine on the training cards (_colocated_fits), else a local rollout server on its cards (_rollout_fits)."""
    if colocate is not None:
        return _colocated_fits(plan, w, card, colocate, offload)
    if not plan.layout.local_rollout:
        return []
    return _rollout_fits(plan, w, card)


def _refuses(plan: Plan, w: Workload, at_most: float, need: float) -> bool:
    """Whether a KV cache that cannot hold one sequence refuses the run: not with MEMORY_CHECK=warn (the user
    tries anyway); beyond the measured models only when no share at all (`at_most` GiB) holds it (`need`
    GiB), which is arithmetic on the parameter count, not a calibrated guess (a 7B on 24 GiB, cases C09)."""
    calibrated = w.dims.params <= memory.CALIBRATED_MAX_PARAMS
    return plan.recipe.settings.MEMORY_CHECK == "error" and (calibrated or at_most < need)


def _colocated_fits(plan: Plan, w: Workload, card, colocate: memory.Colocate, offload: bool) -> list[Problem]:
    """Per size of training card, the colocated engine's KV cache at its share (after the CUDA context and
    the weights; its V0 engine counts only its own) against one sequence of its max_model_len."""
    tp, v0 = w.vllm_tp, colocate.engine_v0
    need = memory.kv_gib(w.dims, w.dtype_bytes, colocate.max_model_len, tp)
    # OFFLOAD_MODEL: ms-swift builds the engine with the trainer's weights in CPU memory
    # (v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:274-280, offload_context)
    model_offloaded = offload and plan.recipe.trainer_args.offload_model
    resident = 0.0 if model_offloaded else memory.estimate_training(w).weights
    by_card: dict[float, list[int]] = {}
    for gpu in plan.layout.train_gpus:
        by_card.setdefault(round(card(gpu), 2), []).append(gpu)
    out: list[Problem] = []
    for size, gpus in by_card.items():
        budget = memory.kv_budget(w.dims, w.dtype_bytes, size, colocate.utilization, resident, tp, v0)
        if budget >= need:
            continue
        at_most = memory.kv_budget(
            w.dims, w.dtype_bytes, size, memory.VLLM_UTILIZATION_CEILING, resident, tp, v0
        )
        fix = (
            "raise VLLM_GPU_MEMORY_UTILIZATION, set VLLM_MAX_MODEL_LEN to prompt + completion tokens, or "
            "raise VLLM_TENSOR_PARALLEL_SIZE"
            if at_most >= need
            else _largest_model_text(w, size, colocate)
            if model_offloaded
            else f"no share of this {size:.0f} GiB card holds both copies of the weights and one sequence: "
            "OFFLOAD_MODEL=true, OFFLOAD_OPTIMIZER=true and SLEEP_LEVEL=1 (one weight copy on the card at a time: "
            "ms-swift builds vLLM while the trainer's weights are in CPU memory), a rollout server on its own GPU "
            "(ROLLOUT_GPUS), VLLM_TENSOR_PARALLEL_SIZE over several GPUs, or a smaller MODEL"
        )
        counted = (
            f"vLLM's weights (1/{tp} per GPU; its V0 engine counts only its own) are"
            if v0
            else f"the CUDA context and vLLM's weights (1/{tp} per GPU; the trainer's are in CPU memory) are"
            if model_offloaded
            else f"the CUDA context, the trainer's and vLLM's weights (1/{tp} per GPU) are"
        )
        out.append(
            Problem(
                "VLLM_GPU_MEMORY_UTILIZATION",
                f"{colocate.utilization} x {size:.1f} GiB (GPU {','.join(map(str, gpus))}) leaves {budget:.1f} GiB "
                f"for vLLM's KV cache once {counted} counted; one sequence of {colocate.max_model_len} tokens "
                f"needs {need:.2f} GiB (vLLM would refuse to start)",
                fix,
                fatal=_refuses(plan, w, at_most, need),
            )
        )
    return out


def _rollout_fits(plan: Plan, w: Workload, card) -> list[Problem]:
    """Per rollout GPU, the local server's KV cache at ROLLOUT_GPU_MEMORY_UTILIZATION (after its share of the
    weights and vLLM's other memory) against one sequence of ROLLOUT_MAX_MODEL_LEN (else prompt +
    completion); under HEADROOM_WARNING of its share left for the cache warns."""
    ra = plan.recipe.rollout_args
    util, tp = ra.gpu_memory_utilization, ra.tensor_parallel_size
    length = ra.max_model_len or w.prompt_tokens + w.completion_tokens
    weights = w.dims.params * w.dtype_bytes / GIB / tp
    need = memory.kv_gib(w.dims, w.dtype_bytes, length, tp)
    out: list[Problem] = []
    for gpu in plan.layout.rollout_gpus:
        kv_budget = util * card(gpu) - weights - VLLM_NON_KV_GIB
        at_most = memory.VLLM_UTILIZATION_CEILING * card(gpu) - weights - VLLM_NON_KV_GIB
        what = (f"{util} x {card(gpu):.1f} GiB leaves {kv_budget:.1f} GiB for vLLM's KV cache on GPU {gpu} after "
                f"{weights:.1f} GiB of weights (1/{tp} of the model); one sequence of {length} tokens needs {need:.2f} GiB")  # fmt: skip
        if kv_budget < need:
            out.append(
                Problem(
                    "ROLLOUT_GPU_MEMORY_UTILIZATION",
                    f"{what} (vLLM would refuse to start)",
                    "raise ROLLOUT_GPU_MEMORY_UTILIZATION, lower ROLLOUT_MAX_MODEL_LEN, or raise ROLLOUT_TENSOR_PARALLEL_SIZE",
                    fatal=_refuses(plan, w, at_most, need),
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
