"""The refusal of a run whose predicted memory does not fit (case C09, tests/cases.md): reads the budget and
the per-GPU peaks plan.build computed (budget.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from entrypoint.errors import LOCAL, Problem
from entrypoint.plan import build as plan_build
from entrypoint.plan import memory, shape
from entrypoint.plan.memory import (
    CUDA_CONTEXT_GIB,
    GIB,
    HEADROOM_WARNING,
    VLLM_NON_KV_GIB,
    GpuEstimate,
    Workload,
)
from entrypoint.preflight import values
from entrypoint.recipe.load import Choice, Origin, Typed, text_of

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
    peak = _peak_problems(plan, w, list(plan.memory), b.colocate, extrapolated)
    # a model too large for the card is short of KV cache too, with the same fix (the peak's adds
    # MEMORY_CHECK=warn): said once
    said = [p.fix for p in peak if p.fatal]
    vllm = [
        p
        for p in _vllm_fits(plan, w, b.card, b.colocate, b.offload)
        if not (p.fatal and any(f.startswith(p.fix) for f in said))
    ]
    return peak + vllm + _host_ram(plan)


# under this share of the machine's available RAM left beside the offloaded copies, a warning
RAM_HEADROOM = 0.10


def _ram_short(plan: Plan) -> tuple[float, float] | None:
    """(needed, available GiB) where the offloaded copies (plan.host_ram) do not fit the RAM the inventory
    records; None where they fit or either is unknown."""
    need, free = sum(v for _, v in plan.host_ram), plan.inventory.ram_free_gib
    return (need, free) if plan.host_ram and free is not None and need > free else None


def _host_ram(plan: Plan) -> list[Problem]:
    """The one-weight-copy path keeps the trainer's and vLLM's weights in CPU memory in turn: more than the
    machine has, and the kernel's OOM killer ends the run at its first offload (a 7B in bf16 on a 32 GB PC).
    Refused like a card that does not hold its peak (MEMORY_CHECK); an inventory that does not record RAM
    (an older file) is not judged."""
    free = plan.inventory.ram_free_gib
    if not plan.host_ram or free is None:
        return []
    need = sum(v for _, v in plan.host_ram)
    what = f"{plan.host_ram_line().removeprefix('host RAM: ')}" + (
        " (what was available when the inventory was read)"
        if plan.inventory.source.startswith("file:")
        else ""
    )
    if need > free:
        alternatives = [f for f in (_qlora(plan),) if f]
        fix = "; or ".join(
            [
                *alternatives,
                f"free {need - free:.0f} GiB more RAM (other programs), or a machine with "
                f"at least {need + 1:.0f} GiB available; or a smaller MODEL",
            ]
        )
        return [
            Problem(
                "host RAM",
                f"does not fit: {what}: the kernel's OOM killer would end the run at its first offload",
                fix
                + (
                    "; or MEMORY_CHECK=warn to try anyway"
                    if plan.recipe.settings.MEMORY_CHECK == "error"
                    else ""
                ),
                fatal=plan.recipe.settings.MEMORY_CHECK == "error",
            )
        ]
    if need > (1 - RAM_HEADROOM) * free:
        return [
            Problem(
                "host RAM",
                f"under {RAM_HEADROOM:.0%} left: {what}",
                "close other programs before the run, or use a machine with more RAM",
                fatal=False,
            )
        ]
    return []


def _not_estimated(plan: Plan, note: str) -> list[Problem]:
    """A plan without a memory estimate (the model's config.json unknown here). Where vLLM is colocated at
    ms-swift's default share (0.9, no value from the recipe or the planner) and stays awake while training,
    that share is taken from every training GPU before the first step, leaving the trainer a tenth: the run
    case C09 describes (tests/cases.md), refused whatever the model (MEMORY_CHECK=warn starts it anyway).
    Otherwise a warning."""
    r, s = plan.recipe, plan.recipe.settings
    a = r.trainer_args
    if plan.layout.mode != "colocate" or r.is_set("VLLM_GPU_MEMORY_UTILIZATION") or a.sleep_level >= 1:
        return [
            Problem(
                "memory",
                f"not estimated: {note}",
                "set MEMORY_CHECK=off to silence, or mount the model",
                fatal=False,
            )
        ]
    util = a.vllm_gpu_memory_utilization
    return [
        Problem(
            "memory",
            f"not estimated ({note}), and vLLM is colocated at ms-swift's default share {util:.2f} without "
            f"sleep mode: it takes {util:.0%} of each training GPU before the first step, leaving the "
            f"trainer {1 - util:.0%} for the model, its gradients and activations",
            "set VLLM_GPU_MEMORY_UTILIZATION (0.3 to 0.5 is usual beside training), or SLEEP_LEVEL=1; or "
            "give MODEL as a local directory with its config.json (or download the model once into the hub "
            "cache) so the planner sizes the share; MEMORY_CHECK=warn starts it as it is",
            fatal=s.MEMORY_CHECK == "error",
        )
    ]


def _share_knob(plan: Plan, colocate: memory.Colocate) -> str:
    """The colocated vLLM share as a knob: the value that still holds a generation round when it is lower
    than the recipe's (shape.smallest_share), never a range that may be what the recipe already has."""
    if plan.recipe.origin("VLLM_GPU_MEMORY_UTILIZATION") is Origin.PLANNER:
        # the planner already chose the smallest share that holds the generation round: lowering it is no knob
        return (
            "fewer or shorter completions per generation round (vLLM's share, VLLM_GPU_MEMORY_UTILIZATION="
            f"{colocate.utilization:.2f}, was chosen by the planner to hold them)"
        )
    b = plan.budget
    per_process = shape.step_completions(plan.recipe, b.batch).per_process if b.batch else 0
    smaller = shape.smallest_share(b, plan.layout, per_process) if per_process else None
    if smaller is not None and smaller.holds and smaller.utilization < colocate.utilization:
        return (
            f"VLLM_GPU_MEMORY_UTILIZATION={smaller.utilization:.2f} (now {colocate.utilization:.2f}; the "
            "smallest share whose KV cache holds a generation round)"
        )
    return (
        f"fewer or shorter completions per generation round (a share below {colocate.utilization:.2f} would "
        "not hold them)"
    )


def _replanned(plan: Plan, changes: Mapping[str, Typed]) -> Plan:
    """The plan of the recipe as its layers set it (the planner's choices left out, to be made again) with
    `changes` written on the command line: what following a fix would give."""
    r = plan.recipe.without_planner().with_values(
        [Choice(k, v, "", Origin.COMMAND_LINE) for k, v in changes.items()]
    )
    return plan_build.build(r, plan.inventory, plan.facts)


def fits(plan: Plan) -> GpuEstimate | None:
    """The fullest training GPU of a plan that no check refuses for memory or quantization: every card holds
    its predicted peak, vLLM's KV cache holds one sequence, the RAM the inventory records holds the offloaded
    copies, nothing fatal in the plan or its QLoRA values (a bitsandbytes missing from this Python aside: the
    image has it). None otherwise."""
    b = plan.budget
    if not plan.placed or any(p.fatal for p in plan.problems) or b is None or b.workload is None:
        return None
    if not plan.memory or any(e.peak_gib > e.card_gib for e in plan.memory):
        return None
    if b.colocate is not None and _kv_shortfalls(plan, b.workload, b.card, b.colocate, b.offload):
        return None
    if _ram_short(plan):
        return None
    quant = values.check_quantization(plan, plan.facts, lambda key: key)
    if any(p.fatal and p.kind != LOCAL for p in quant):
        return None
    trainers = [e for e in plan.memory if not e.role.startswith("rollout")] or list(plan.memory)
    return min(trainers, key=lambda e: e.headroom)


def _verified(
    plan: Plan, changes: Mapping[str, Typed], why: str = "", say: str = "", headroom: bool = False
) -> str:
    """`KEY=V ... fits: N GiB (why)` where planning the recipe with `changes` fits (with HEADROOM_WARNING
    free, `headroom`), else "": a fix names only values that fit. `say` words the change instead of its
    keys."""
    replanned = _replanned(plan, changes)
    e = fits(replanned)
    if e is None or (headroom and e.headroom < HEADROOM_WARNING):
        return ""
    words = say or " ".join(f"{k}={text_of(v)}" for k, v in changes.items())
    ram = f" and about {sum(v for _, v in replanned.host_ram):.0f} GiB of RAM" if replanned.host_ram else ""
    return f"{words} fits: {e.peak_gib:.1f} of {e.card_gib:.1f} GiB on GPU {e.gpu}{ram}" + (
        f" ({why})" if why else ""
    )


def _qlora(plan: Plan, headroom: bool = False, extra: Mapping[str, str] | None = None) -> str:
    """QUANT_METHOD=bnb QUANT_BITS=4 (with the `extra` pieces the one-copy path misses) where a bf16 LoRA
    run's weights are what does not fit and QLoRA fits."""
    a = plan.recipe.trainer_args
    if a.bnb_bits or a.train_type != "lora" or plan.recipe.is_set("QUANT_METHOD"):
        return ""
    return _verified(
        plan,
        {"QUANT_METHOD": "bnb", "QUANT_BITS": "4", **(extra or {})},
        "QLoRA: both weight copies in bitsandbytes 4-bit, the LoRA adapter trained as now",
        headroom=headroom,
    )


def _one_copy_levers(plan: Plan, headroom: bool = False) -> str:
    """OFFLOAD_MODEL, OFFLOAD_OPTIMIZER and SLEEP_LEVEL=1 (those not set so) where they make the plan fit."""
    a = plan.recipe.trainer_args
    if plan.layout.mode != "colocate" or a.train_type != "lora" or a.vllm_tensor_parallel_size > 1:
        return ""
    changes = {
        k: v for k, v in shape.ONE_COPY_LEVERS.items() if (plan.recipe.raw(k) or "").lower() != text_of(v)
    }
    if not changes or (a.offload_model and a.offload_optimizer and a.sleep_level == 1):
        return ""
    return _verified(plan, changes, "one weight copy on the card at a time", headroom=headroom)


def _step_knobs(plan: Plan) -> str:
    """What lowers the step's own memory, as far as the recipe has it to lower (no smaller micro-batch at
    1)."""
    smaller = plan.recipe.trainer_args.per_device_train_batch_size > 1
    return ", ".join(
        ["a shorter MAX_COMPLETION_LENGTH"]
        + (
            [
                "a smaller PER_DEVICE_TRAIN_BATCH_SIZE (keep the generation batch with "
                "GRADIENT_ACCUMULATION_STEPS)"
            ]
            if smaller
            else []
        )
        + ["fewer NUM_GENERATIONS"]
    )


def _knobs(
    plan: Plan, colocate: memory.Colocate | None, fatal: bool = True, qlora: bool = False
) -> dict[str, str]:
    """Per layout mode, the settings that lower a training GPU's peak, as a fix names them: the one-copy
    levers only where planning them fits (`fatal`: the plan does not fit; else they must leave
    HEADROOM_WARNING free), QLoRA (`qlora`: nothing lighter fits) where it fits, and a smaller micro-batch
    only above 1."""
    levers = _one_copy_levers(plan, not fatal)
    verified = [f for f in (levers, _qlora(plan) if qlora and fatal and not levers else "") if f]
    share = [_share_knob(plan, colocate)] if colocate is not None else []
    step = _step_knobs(plan)
    smaller = plan.recipe.trainer_args.per_device_train_batch_size > 1
    micro = (
        "a smaller PER_DEVICE_TRAIN_BATCH_SIZE (raise GRADIENT_ACCUMULATION_STEPS to keep the batch), "
        if smaller
        else ""
    )
    return {
        "colocate": ", ".join([*verified, *share, step]),
        "server": f"a shorter MAX_COMPLETION_LENGTH, {micro}GRADIENT_CHECKPOINTING=true, DEEPSPEED=zero2 or "
        "zero3 for full fine-tuning",
        "hf": f"{step}, GRADIENT_CHECKPOINTING=true",
    }


def _largest_model_text(
    plan: Plan,
    w: Workload,
    card_gib: float,
    colocate: memory.Colocate,
    missing: Mapping[str, str] | None = None,
) -> str:
    """A fix for a model too large even with one weight copy on the card: the largest that would fit on the
    one-copy path (vLLM asleep while the trainer trains, the trainer away while vLLM generates), in bf16 LoRA
    and with QLoRA, and QLoRA itself (with the one-copy pieces `missing`) where planning it fits."""
    colocate = dataclasses.replace(
        colocate, sleep_level=max(1, colocate.sleep_level), offload_model=True, trainer_leaves_first=True
    )
    largest = memory.largest_one_copy_params(w, card_gib, colocate)
    kind = "QLoRA, " if w.quant_bits else "bf16 LoRA, "
    also = ""
    if not w.quant_bits and not w.full:
        quantized = memory.largest_one_copy_params(dataclasses.replace(w, quant_bits=4), card_gib, colocate)
        also = f", about {quantized:.1f}B with QLoRA (QUANT_METHOD=bnb QUANT_BITS=4)"
    qlora = _qlora(plan, extra=missing)
    return (
        (f"{qlora}; or " if qlora else "")
        + "even with one weight copy on the card at a time (OFFLOAD_MODEL, OFFLOAD_OPTIMIZER, SLEEP_LEVEL=1) "
        f"this {card_gib:.0f} GiB card trains at most about {largest:.1f}B parameters of this kind "
        f"({kind}micro-batch 1, {w.completion_tokens}-token completions; this model has "
        f"{w.dims.params / 1e9:.1f}B){also}: a smaller MODEL; or, on several cards, DEEPSPEED=zero3 with "
        "VLLM_TENSOR_PARALLEL_SIZE=<the cards> shards both copies"
    )


def _hooks_without(plan: Plan, hook: str) -> str:
    """The recipe's DISABLE_HOOKS value with `hook` taken out: the fix that puts a hook back."""
    return ",".join(sorted(plan.recipe.settings.disabled_hooks - {hook}))


def _missing_pieces(plan: Plan, colocate: memory.Colocate) -> dict[str, str]:
    """What an offloaded (OFFLOAD_MODEL) recipe lacks of the one-copy path: vLLM asleep while the trainer
    trains, the hook that offloads the trainer before vLLM wakes."""
    missing = {"SLEEP_LEVEL": "1"} if colocate.sleep_level == 0 else {}
    if not colocate.trainer_leaves_first:
        missing["DISABLE_HOOKS"] = _hooks_without(plan, "offload_before_wake")
    return missing


def _one_copy_fix(
    plan: Plan, w: Workload, card_gib: float, colocate: memory.Colocate, fatal: bool = True
) -> str:
    """What still lowers a card whose trainer is offloaded around generation (OFFLOAD_MODEL), each checked by
    planning it, most direct first: the lever or hook missing from the one-copy path, LoRA for full
    fine-tuning, the largest micro-batch that fits, QLoRA; else a model too large for the card is named with
    the largest that fits, and otherwise the step's own size. `fatal`: the plan does not fit (else the fixes
    must leave HEADROOM_WARNING free)."""
    headroom = not fatal
    fixes = []
    missing = _missing_pieces(plan, colocate)  # the one-copy pieces the recipe lacks, for QLoRA's fix
    if colocate.sleep_level == 0:
        fixes.append(
            _verified(
                plan,
                {"SLEEP_LEVEL": "1"},
                "awake, vLLM's share stays on the card while the trainer trains",
                headroom=headroom,
            )
        )
    if not colocate.trainer_leaves_first:
        fixes.append(
            _verified(
                plan,
                {"DISABLE_HOOKS": missing["DISABLE_HOOKS"]},
                "without it ms-swift wakes vLLM's weights while the trainer's are still on the card",
                say="take offload_before_wake out of DISABLE_HOOKS",
                headroom=headroom,
            )
        )
    if w.full:
        fixes.append(
            _verified(
                plan,
                {"TRAIN_TYPE": "lora"},
                "full fine-tuning keeps gradients and optimizer states for every weight on the card",
                headroom=headroom,
            )
        )
    fixes.append(_fit_text(plan).removesuffix("; ") if fatal else "")
    fixes = [f for f in fixes if f]
    if fixes or not fatal:
        return "; or ".join(fixes) or _step_knobs(plan)
    one_copy = dataclasses.replace(
        colocate, sleep_level=max(1, colocate.sleep_level), trainer_leaves_first=True
    )
    if w.dims.params / 1e9 > memory.largest_one_copy_params(w, card_gib, one_copy):
        return _largest_model_text(plan, w, card_gib, colocate, missing)
    qlora = _qlora(plan, extra=missing)  # nothing lighter fits: the weights in 4 bits
    return f"{qlora}; or {_step_knobs(plan)}" if qlora else _step_knobs(plan)


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
    beyond = (
        f" (extrapolated: a {w.dims.params / 1e9:.1f}B model, and the planner's measurements stop at 1.5B, "
        f"so this warns instead of refusing up to {memory.EXTRAPOLATED_REFUSE_RATIO:.2f}x the card; "
        "MEMORY_CHECK=off silences it)"
    )
    problems: list[Problem] = []
    for e, gpus in _alike(estimates):  # one problem for GPUs that get the same prediction
        what = (
            f"predicted {e.peak_gib:.1f} GiB on GPU {gpus} ({e.role}), which has {e.card_gib:.1f} GiB: "
            + ", ".join(f"{k} {v:.1f}" for k, v in e.parts.items() if abs(v) >= 0.05)
        )
        if e.role.startswith("rollout"):
            if e.headroom < HEADROOM_WARNING:  # vLLM takes its share up front; the rest is all that is left
                problems.append(
                    Problem(
                        "memory",
                        f"under {HEADROOM_WARNING:.0%} headroom: {what}; anything else on the "
                        "card (a display, another process) makes vLLM refuse to start",
                        "lower ROLLOUT_GPU_MEMORY_UTILIZATION to "
                        f"{memory.rollout_share_with_headroom(e.card_gib):.2f} or less on this "
                        f"{e.card_gib:.0f} GiB card",
                        fatal=False,
                    )
                )
        elif e.peak_gib > e.card_gib:
            sure = (
                not extrapolated
                or certain_gib(w, train, e) > e.card_gib
                or e.peak_gib > memory.EXTRAPOLATED_REFUSE_RATIO * e.card_gib
            )
            past = (
                f" (extrapolated beyond the measured models, but {e.peak_gib / e.card_gib:.1f}x the card is "
                f"past the planner's uncertainty, {memory.EXTRAPOLATED_REFUSE_RATIO:.2f}x)"
            )
            if colocate is not None and colocate.offload_model:
                turn = _one_copy_fix(plan, w, e.card_gib, colocate)
            else:
                fit = _fit_text(plan)
                knobs = _knobs(plan, colocate, qlora=not fit)[mode]
                turn = f"{fit}{'other knobs' if fit else 'turn these knobs'}: {knobs}"
            problems.append(
                Problem(
                    "memory",
                    f"does not fit: {what}" + (beyond if not sure else past if extrapolated else ""),
                    turn + ("; or MEMORY_CHECK=warn to try anyway" if sure else ""),
                    fatal=s.MEMORY_CHECK == "error" and sure,
                )
            )
        elif e.headroom < HEADROOM_WARNING:
            consider = (
                _one_copy_fix(plan, w, e.card_gib, colocate, fatal=False)
                if colocate and colocate.offload_model
                else _knobs(plan, colocate, fatal=False)[mode]
            )
            problems.append(
                Problem(
                    "memory",
                    f"under {HEADROOM_WARNING:.0%} headroom: {what}",
                    f"consider: {consider}",
                    fatal=False,
                )
            )
    return problems


def _fit_text(plan: Plan) -> str:
    """The fix's first words when a shape fits (shape.largest_fit): the line to write, what it is predicted
    at, and, where the recipe closed the shape, how to let the planner choose; "" when none fits."""
    r = plan.recipe
    fit = shape.largest_fit(r, plan.layout, plan.budget)
    # the fix is a line to write: none when the recipe already has that text (raw: as the user wrote it)
    if fit is None or all(r.raw(k) == text_of(v) for k, v in fit.values.items()):
        return ""
    e = fit.worst
    text = (
        f"write {fit.line()}: the largest micro-batch that fits, predicted {e.peak_gib:.1f} of "
        f"{e.card_gib:.1f} GiB on GPU {e.gpu} ({e.headroom:.0%} free), the same {fit.completions} "
        "completions per optimizer step"
    )
    closed = [
        k
        for k in ("PER_DEVICE_TRAIN_BATCH_SIZE", "GRADIENT_ACCUMULATION_STEPS", "STEPS_PER_GENERATION")
        if r.layer(k) in (1, 2, 3)
    ]
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
    engine on the training cards (_colocated_fits), else a local rollout server on its cards
    (_rollout_fits)."""
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


def _kv_shortfalls(
    plan: Plan, w: Workload, card, colocate: memory.Colocate, offload: bool
) -> list[tuple[float, list[int], float, float, float]]:
    """(card size, its GPUs, KV budget at the share, at the planner's largest share, one sequence's need) per
    size of training card whose colocated engine cannot hold one sequence of its max_model_len (after the
    CUDA context and the weights; its V0 engine counts only its own)."""
    tp, v0 = w.vllm_tp, colocate.engine_v0
    need = memory.kv_gib(w.dims, w.dtype_bytes, colocate.max_model_len, tp)
    # OFFLOAD_MODEL: ms-swift builds the engine with the trainer's weights in CPU memory
    # (v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:274-280, offload_context); 4-bit ones stay
    # without the hook offload_quant_states (TrainingEstimate.pinned)
    model_offloaded = offload and plan.recipe.trainer_args.offload_model
    train = memory.estimate_training(w)
    resident = train.pinned if model_offloaded else train.weights
    by_card: dict[float, list[int]] = {}
    for gpu in plan.layout.train_gpus:
        by_card.setdefault(round(card(gpu), 2), []).append(gpu)
    out = []
    for size, gpus in by_card.items():
        budget = memory.kv_budget(w, size, colocate.utilization, resident, tp, v0)
        if budget < need:
            out.append(
                (
                    size,
                    gpus,
                    budget,
                    memory.kv_budget(w, size, memory.VLLM_UTILIZATION_CEILING, resident, tp, v0),
                    need,
                )
            )
    return out


def _colocated_fits(plan: Plan, w: Workload, card, colocate: memory.Colocate, offload: bool) -> list[Problem]:
    """Per size of training card, the colocated engine's KV cache at its share against one sequence of its
    max_model_len (_kv_shortfalls), with the fix: a larger share or a shorter context where one holds it, else
    the one-copy levers or QLoRA where planning them fits, else the largest model that would."""
    tp, v0 = w.vllm_tp, colocate.engine_v0
    model_offloaded = offload and plan.recipe.trainer_args.offload_model
    out: list[Problem] = []
    for size, gpus, budget, at_most, need in _kv_shortfalls(plan, w, card, colocate, offload):
        if at_most >= need:
            fix = (
                "raise VLLM_GPU_MEMORY_UTILIZATION, set VLLM_MAX_MODEL_LEN to prompt + completion tokens, or "
                "raise VLLM_TENSOR_PARALLEL_SIZE"
            )
        elif model_offloaded:
            fix = _largest_model_text(plan, w, size, colocate, _missing_pieces(plan, colocate))
            if w.quantized_stay:
                hook = _verified(
                    plan,
                    {"DISABLE_HOOKS": _hooks_without(plan, "offload_quant_states")},
                    "without it torch keeps the trainer's 4-bit segments reserved while vLLM starts",
                    say="take offload_quant_states out of DISABLE_HOOKS",
                )
                fix = f"{hook}; or {fix}" if hook else fix
        else:
            verified = "; or ".join(f for f in (_one_copy_levers(plan), _qlora(plan)) if f)
            fix = (
                f"no share of this {size:.0f} GiB card holds both copies of the weights and one sequence: "
                + (f"{verified}; or " if verified else "")
                + "a rollout server on its own GPU (ROLLOUT_GPUS), VLLM_TENSOR_PARALLEL_SIZE over several "
                "GPUs, or a smaller MODEL"
            )
        kept = (
            "; the 4-bit load's segments stay reserved, DISABLE_HOOKS has offload_quant_states"
            if memory.estimate_training(w).pinned
            else ""
        )
        counted = (
            f"vLLM's weights (1/{tp} per GPU; its V0 engine counts only its own) are"
            if v0
            else f"the CUDA context and vLLM's weights (1/{tp} per GPU; the trainer's are in CPU "
            f"memory{kept}) are"
            if model_offloaded
            else f"the CUDA context, the trainer's and vLLM's weights (1/{tp} per GPU) are"
        )
        out.append(
            Problem(
                "VLLM_GPU_MEMORY_UTILIZATION",
                f"{colocate.utilization} x {size:.1f} GiB (GPU {','.join(map(str, gpus))}) leaves "
                f"{budget:.1f} GiB for vLLM's KV cache once {counted} counted; one sequence of "
                f"{colocate.max_model_len} tokens needs {need:.2f} GiB (vLLM would refuse to start)",
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
    weights = w.vllm_weights_gib(tp)
    need = memory.kv_gib(w.dims, w.dtype_bytes, length, tp)
    out: list[Problem] = []
    for gpu in plan.layout.rollout_gpus:
        kv_budget = util * card(gpu) - weights - VLLM_NON_KV_GIB
        at_most = memory.VLLM_UTILIZATION_CEILING * card(gpu) - weights - VLLM_NON_KV_GIB
        what = (
            f"{util} x {card(gpu):.1f} GiB leaves {kv_budget:.1f} GiB for vLLM's KV cache on GPU {gpu} after "
            f"{weights:.1f} GiB of weights (1/{tp} of the model); one sequence of {length} tokens needs "
            f"{need:.2f} GiB"
        )
        if kv_budget < need:
            out.append(
                Problem(
                    "ROLLOUT_GPU_MEMORY_UTILIZATION",
                    f"{what} (vLLM would refuse to start)",
                    "raise ROLLOUT_GPU_MEMORY_UTILIZATION, lower ROLLOUT_MAX_MODEL_LEN, or raise "
                    "ROLLOUT_TENSOR_PARALLEL_SIZE",
                    fatal=_refuses(plan, w, at_most, need),
                )
            )
        elif kv_budget < HEADROOM_WARNING * util * card(gpu):
            out.append(
                Problem(
                    "ROLLOUT_GPU_MEMORY_UTILIZATION",
                    f"under {HEADROOM_WARNING:.0%} of vLLM's share is left for the KV cache: {what}; vLLM "
                    "will run few sequences at once, or refuse to start if the estimate is off",
                    "raise ROLLOUT_GPU_MEMORY_UTILIZATION or ROLLOUT_TENSOR_PARALLEL_SIZE, or use a smaller "
                    "model",
                    fatal=False,
                )
            )
    return out
