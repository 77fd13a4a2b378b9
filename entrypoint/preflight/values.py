"""Value checks that ms-swift reports late (after loading the model) or never."""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from entrypoint.errors import Problem
from entrypoint.facts import vllm_bnb
from entrypoint.facts.facts import resolved
from entrypoint.plan import budget
from entrypoint.recipe import optional, swift_schema
from entrypoint.recipe.args import COMPLETION_LENGTH_ALIASES
from entrypoint.rewards.check import NOT_PROBED

if TYPE_CHECKING:
    from entrypoint.facts.facts import Facts
    from entrypoint.plan.build import Plan

DEEPSPEED_NAMES = {
    "zero0",
    "zero1",
    "zero2",
    "zero3",
    "zero2_offload",
    "zero3_offload",
}  # swift/llm/ds_config


def evaluates(plan: Plan) -> bool:
    """ms-swift turns evaluation off when nothing is held out
    (v3.6.4:swift/llm/argument/train_args.py:185)."""
    a = plan.recipe.trainer_args
    return (a.split_dataset_ratio > 0 or bool(a.val_dataset)) and a.eval_strategy != "no"


def check(plan: Plan, facts: Facts) -> list[Problem]:
    """Every value problem of the plan's recipe, in a fixed order."""
    r = plan.recipe

    def where(key: str) -> str:
        return f"{key} ({r.source(key)})"

    problems: list[Problem] = []
    for part in (
        _check_batch,
        _check_fractions,
        _check_system,
        _check_vllm,
        _check_deepspeed,
        _check_rewards,
        _check_train_type,
        check_quantization,
        _check_completion_length,
        _check_one_copy_sync,
        _check_model_type,
        _check_registered,
        _check_config_model_type,
    ):
        problems += part(plan, facts, where)
    return problems


def _check_batch(plan: Plan, facts: Facts, where) -> list[Problem]:
    """GRPO's batch arithmetic: generations per prompt, the generation batch, the eval batch."""
    problems: list[Problem] = []
    b = plan.budget.batch if plan.budget else None
    if b is None:  # its inputs are already refused; the arithmetic would judge a default
        return problems
    if b.num_generations < 2:
        problems.append(
            Problem(
                where("NUM_GENERATIONS"),
                "GRPO needs at least 2 generations per prompt",
                "set NUM_GENERATIONS >= 2",
            )
        )
    elif b.generation_batch % (b.per_device * b.world):
        problems.append(
            Problem(
                where("GENERATION_BATCH_SIZE"),
                f"{b.generation_batch} is not a multiple of the global batch {b.per_device} x {b.world}",
                "use a multiple, or leave it unset",
            )
        )
    elif b.generation_batch % b.num_generations:
        valid = [n for n in range(2, b.generation_batch + 1) if b.generation_batch % n == 0]
        problems.append(
            Problem(
                where("NUM_GENERATIONS"),
                f"{b.num_generations} does not divide the generation batch ({b.per_device} "
                f"completions/device x {b.world} process(es) x {b.steps_per_generation} steps = "
                f"{b.generation_batch})",
                f"choose NUM_GENERATIONS from {valid}, or change PER_DEVICE_TRAIN_BATCH_SIZE / "
                "GRADIENT_ACCUMULATION_STEPS"
                if valid
                else "raise PER_DEVICE_TRAIN_BATCH_SIZE or GRADIENT_ACCUMULATION_STEPS so that the "
                f"generation batch is a multiple of NUM_GENERATIONS {b.num_generations}",
            )
        )
    if evaluates(plan) and b.num_generations >= 2 and (b.per_device_eval * b.world) % b.num_generations:
        problems.append(
            Problem(
                where("PER_DEVICE_EVAL_BATCH_SIZE"),
                f"the global eval batch {b.per_device_eval} x {b.world} is not a multiple of NUM_GENERATIONS "
                f"{b.num_generations} (ms-swift checks this when a validation split exists)",
                "set "
                f"PER_DEVICE_EVAL_BATCH_SIZE={_eval_batch(b.per_device_eval, b.world, b.num_generations)} "
                f"(the nearest value that makes the global eval batch a multiple of {b.num_generations})",
            )
        )
    return problems


def _check_fractions(plan: Plan, facts: Facts, where) -> list[Problem]:
    """vLLM memory shares are fractions of the card."""
    r = plan.recipe
    problems: list[Problem] = []
    for key, value in (
        ("VLLM_GPU_MEMORY_UTILIZATION", r.trainer_args.vllm_gpu_memory_utilization),
        ("ROLLOUT_GPU_MEMORY_UTILIZATION", r.rollout_args.gpu_memory_utilization),
    ):  # ms-swift's default, 0.9, where no layer sets them
        if not 0 < value <= 1:
            problems.append(
                Problem(
                    where(key), f"{value:g} is not a fraction in (0, 1]", f"set {key} between 0.1 and 0.95"
                )
            )
    return problems


def _check_system(plan: Plan, facts: Facts, where) -> list[Problem]:
    """A SYSTEM prompt file is a text file this process reads."""
    problems: list[Problem] = []
    system = plan.recipe.trainer_args.system or ""
    if system.endswith(".txt") and (facts.system_error or facts.system_text is None):
        problems.append(
            Problem(
                where("SYSTEM"),
                f"the system prompt file {system} {facts.system_error or 'does not exist'}",
                "give a UTF-8 text file inside the container (recipes/prompts/... or /data/...)"
                if facts.in_container
                else "give a UTF-8 text file on this machine (recipes/prompts/..., relative to the checkout)",
            )
        )
    return problems


def _check_vllm(plan: Plan, facts: Facts, where) -> list[Problem]:
    """vLLM with device_map; a vLLM context shorter than prompt + completion; vLLM keys without vLLM."""
    r = plan.recipe
    problems: list[Problem] = []
    use_vllm = r.trainer_args.use_vllm
    if use_vllm and r.trainer_args.device_map:
        problems.append(
            Problem(
                where("DEVICE_MAP"),
                "GRPO with vLLM is not compatible with device_map (ms-swift raises after loading; "
                "v3.6.4:swift/llm/argument/rlhf_args.py:257-259)",
                "remove DEVICE_MAP; one process per training GPU (TRAIN_GPUS) does the placement",
            )
        )
    # the planner never gives sleep mode expandable segments (budget.allocator): only a recipe's own value
    if (
        plan.layout.mode == "colocate"
        and r.trainer_args.sleep_level >= 1
        and budget.expandable(r, plan.layout)
    ):
        problems.append(
            Problem(
                f"{where('PYTORCH_CUDA_ALLOC_CONF')} with SLEEP_LEVEL={r.trainer_args.sleep_level}",
                "vLLM's sleep mode allocates through its own memory pool, which refuses expandable segments: "
                "the engine would stop at start-up, after the model has loaded (vllm 0.8.5.post1 "
                "device_allocator/cumem.py:146)",
                "set SLEEP_LEVEL=0 (expandable segments, no sleeping), or remove "
                "expandable_segments from PYTORCH_CUDA_ALLOC_CONF",
            )
        )
    w, a = plan.budget.workload if plan.budget else None, r.trainer_args
    if (
        use_vllm
        and w is not None
        and a.vllm_max_model_len
        and w.prompt_tokens + a.max_completion_length > a.vllm_max_model_len
    ):
        room = max(0, a.vllm_max_model_len - w.prompt_tokens)
        problems.append(
            Problem(
                where("VLLM_MAX_MODEL_LEN"),
                f"{a.vllm_max_model_len} tokens hold a prompt of ~{w.prompt_tokens} and {room} of the "
                f"{a.max_completion_length} completion tokens asked: vLLM ends a completion at its context "
                "length, short of the length the run asks for",
                f"VLLM_MAX_MODEL_LEN={w.prompt_tokens + a.max_completion_length} (prompt + completion), "
                "or a shorter MAX_COMPLETION_LENGTH",
                fatal=False,
            )
        )
    if not use_vllm:
        ignored = [
            k
            for k in r.trainer
            if k.startswith("vllm_") or k in ("sleep_level", "offload_model", "offload_optimizer")
        ]
        if ignored:
            problems.append(
                Problem(
                    ", ".join(k.upper() for k in ignored),
                    "set, but USE_VLLM is false, so they have no effect",
                    "set USE_VLLM=true, or remove them",
                    fatal=False,
                )
            )
    return problems


def _check_deepspeed(plan: Plan, facts: Facts, where) -> list[Problem]:
    """DEEPSPEED names a built-in config, a file or JSON, and a GPU run."""
    problems: list[Problem] = []
    value = plan.recipe.trainer_args.deepspeed  # "": none
    if value:
        if value not in DEEPSPEED_NAMES and not facts.path(Path(value)).is_file:
            try:
                json.loads(value)
            except ValueError:
                problems.append(
                    Problem(
                        where("DEEPSPEED"),
                        f"{value!r} is not a built-in config, a file, or JSON",
                        f"use one of {sorted(DEEPSPEED_NAMES)}",
                    )
                )
        if plan.placed and plan.layout.mode == "cpu":
            problems.append(
                Problem(
                    where("DEEPSPEED"), "DeepSpeed needs GPUs; this run is on the CPU", "remove DEEPSPEED"
                )
            )
    return problems


def _check_rewards(plan: Plan, facts: Facts, where) -> list[Problem]:
    """Reward functions, weights and the settings some of them need."""
    a = plan.recipe.trainer_args
    problems: list[Problem] = []
    funcs, models, weights = a.reward_funcs, a.reward_model, a.reward_weights
    # ms-swift appends the reward models to the reward functions before it counts the weights
    # (v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:138-167)
    if weights and len(weights) != len(funcs) + len(models):
        counted = f"{len(funcs)} reward function(s)" + (f" + {len(models)} reward model(s)" if models else "")
        problems.append(
            Problem(
                where("REWARD_WEIGHTS"),
                f"{len(weights)} weights for {counted}",
                "give one weight per REWARD_FUNCS entry, then one per REWARD_MODEL entry, in that order",
            )
        )
    plugins = a.reward_model_plugin
    if plugins and len(plugins) != len(models):
        problems.append(
            Problem(
                where("REWARD_MODEL_PLUGIN"),
                f"{len(plugins)} plugin(s) for {len(models)} reward model(s) (ms-swift asserts they match: "
                "v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:141-146)",
                "give one REWARD_MODEL_PLUGIN per REWARD_MODEL entry (default, or a plugin name)",
            )
        )
    if "soft_overlong" in funcs and a.soft_cache_length is None:
        problems.append(
            Problem(
                where("REWARD_FUNCS"),
                "soft_overlong needs SOFT_CACHE_LENGTH",
                "set SOFT_CACHE_LENGTH (tokens)",
            )
        )
    if not funcs and not models:
        problems.append(
            Problem(
                "REWARD_FUNCS",
                "no reward function or reward model",
                "set REWARD_FUNCS (e.g. accuracy format)",
            )
        )
    return problems


def _check_train_type(plan: Plan, facts: Facts, where) -> list[Problem]:
    """LoRA keys that do nothing with full fine-tuning; TARGET_MODULES words ms-swift does not expand."""
    r = plan.recipe
    problems: list[Problem] = []
    train_type = r.trainer_args.train_type
    problems += _check_adapter_values(r, facts)
    if train_type == "full":
        lora_keys = [
            k.upper()
            for k in r.trainer
            if k.startswith("lora_") and not r.source(k.upper()).startswith("recipes/defaults.env")
        ]
        if lora_keys:
            problems.append(
                Problem(
                    ", ".join(lora_keys),
                    "LoRA settings with TRAIN_TYPE=full have no effect",
                    "remove them",
                    fatal=False,
                )
            )
    return problems


# What ms-swift 3.6.4 expands in TARGET_MODULES (v3.6.4:swift/llm/train/tuner.py:91-110); any other word is
# a module name PEFT matches by suffix.
TARGET_MODULE_WORDS = ("all-linear", "all-embedding")


def _check_adapter_values(r, facts: Facts) -> list[Problem]:
    """TARGET_MODULES words that look like ms-swift's expansions but are not one (ms-swift 2.x's ALL, a typo
    of all-linear): PEFT would look for a module of that name and fail after the model loaded."""
    a, problems = r.trainer_args, []
    for word in a.target_modules:
        if word.lower().startswith("all") and word not in TARGET_MODULE_WORDS:
            problems.append(
                Problem(
                    f"TARGET_MODULES ({r.source('TARGET_MODULES')})",
                    f"{word!r} is not a word ms-swift 3.6.4 knows (it expands "
                    f"{' and '.join(TARGET_MODULE_WORDS)}; ms-swift 2.x spelled every linear layer ALL)",
                    "TARGET_MODULES=all-linear",
                )
            )
    return problems


# what a bf16 route says where QLoRA cannot run (the planner keeps one weight copy on a card where two do not
# fit)
BF16_ROUTE = (
    "QUANT_METHOD= QUANT_BITS= (empty) to train bf16 LoRA (where two weight copies do not fit a card, the "
    "planner keeps one on it at a time: recipe countdown-7b-1x4090)"
)


def check_quantization(plan: Plan, facts: Facts, where) -> list[Problem]:
    """QUANT_METHOD=bnb: what ms-swift, transformers and vLLM 0.8.5 accept of it, refused before the model
    loads. QLoRA with vLLM runs colocated, vLLM holding its own 4-bit copy (quantized while it loads the bf16
    checkpoint: vllm/model_executor/model_loader/loader.py:1038-1122) and given only the trained adapter each
    step (entrypoint/child/hooks/adapter_sync.py): ms-swift's own sync merges the adapter into the base
    weights and copies them (v3.6.4 grpo_trainer.py:491-552), and merged into bitsandbytes' packed 4-bit
    weights those are not weights vLLM can load. A Python without bitsandbytes (in the lock) is
    packages.check's."""
    r, a = plan.recipe, plan.recipe.trainer_args
    if not a.quant_method and a.quant_bits:  # a recipe's QLoRA turned off by QUANT_METHOD= alone
        return [
            Problem(
                where("QUANT_BITS"),
                f"{a.quant_bits} without QUANT_METHOD: ms-swift 3.6.4 loads the model unquantized "
                "(swift/llm/argument/base_args/quant_args.py:41-43), though the argv still says --quant_bits",
                "QUANT_BITS= (empty) too, or QUANT_METHOD=bnb for QLoRA",
                fatal=False,
            )
        ]
    if a.quant_method != "bnb":
        return []
    problems: list[Problem] = []
    method = where("QUANT_METHOD")
    if a.quant_bits not in ("4", "8"):
        problems.append(
            Problem(
                where("QUANT_BITS") if a.quant_bits else "QUANT_BITS",
                f"{a.quant_bits or 'unset'} with QUANT_METHOD=bnb: ms-swift 3.6.4 loads bitsandbytes "
                "weights in 4 or 8 bits and raises at start-up otherwise "
                "(swift/llm/argument/base_args/quant_args.py:42-51)",
                "QUANT_BITS=4 (QLoRA)",
            )
        )
        return problems
    if a.train_type == "full":
        problems.append(
            Problem(
                f"TRAIN_TYPE=full with QUANT_METHOD=bnb ({r.source('QUANT_METHOD')})",
                "transformers' Trainer refuses to fine-tune a quantized model without adapters "
                "(after loading it: 'You cannot perform fine-tuning on purely quantized models', "
                "transformers 4.51.3 trainer.py, Trainer.__init__)",
                "TRAIN_TYPE=lora for QLoRA, or QUANT_METHOD= QUANT_BITS= (empty) to train the full model",
            )
        )
    zero3 = budget.deepspeed_stage(a.deepspeed, facts.deepspeed_config)[0] == 3
    if zero3:
        problems.append(
            Problem(
                f"{where('DEEPSPEED')} with QUANT_METHOD=bnb",
                "DeepSpeed ZeRO-3 shards nothing of a bitsandbytes model: transformers loads a "
                "quantized model whole on every GPU (no zero.Init: transformers 4.51.3 "
                "modeling_utils.py get_init_context)"
                + (
                    ", and it partitions the adapter, which vLLM is given whole each step"
                    if a.use_vllm
                    else ""
                )
                + "; no run measured it",
                "DEEPSPEED=zero2 (each GPU keeps its 4-bit copy, ZeRO-2 shards the adapter's "
                "optimizer states), or no DEEPSPEED",
            )
        )
    if not a.use_vllm:
        return problems
    if a.quant_bits == "8":
        problems.append(
            Problem(
                f"{where('QUANT_BITS')} with vLLM",
                "vLLM 0.8.5 quantizes a bf16 checkpoint while it loads it to bitsandbytes 4-bit NF4 "
                "only (8 bits only from a checkpoint saved in 8 bits: model_loader/loader.py:928-939): "
                "its copy would not be the trainer's 8-bit model",
                "QUANT_BITS=4 (QLoRA), or USE_VLLM=false (generation inside the trainer, slower)",
            )
        )
        return problems
    if a.bnb_4bit_quant_type != "nf4":
        problems.append(
            Problem(
                f"{where('BNB_4BIT_QUANT_TYPE')} with vLLM",
                f"{a.bnb_4bit_quant_type}: vLLM 0.8.5 quantizes its copy to nf4 "
                "(model_loader/loader.py:1113-1117), so it would sample from another model than the "
                "one trained",
                "BNB_4BIT_QUANT_TYPE=nf4 (ms-swift's default)",
            )
        )
    if plan.layout.mode == "server":
        problems.append(
            Problem(
                f"{where('ROLLOUT_GPUS')} with QUANT_METHOD=bnb",
                "ms-swift 3.6.4 gives a rollout server the adapter merged into the base weights each "
                "step (grpo_trainer.py:491-552); merged into bitsandbytes' packed 4-bit weights, those "
                "are not weights vLLM can load",
                "remove ROLLOUT_GPUS: colocated, vLLM loads its own 4-bit copy and is given only the "
                f"adapter; or {BF16_ROUTE}",
            )
        )
    elif plan.layout.mode == "colocate":
        why, lift = budget.adapter_sync_blocked(r, facts.deepspeed_config)
        if why and not zero3 and a.train_type == "lora":
            problems.append(
                Problem(
                    f"{method} with vLLM",
                    "vLLM can be given QLoRA's weights only as the trained adapter (it holds its own "
                    "4-bit copy; ms-swift's merged copy cannot be loaded into it), and here it cannot: "
                    f"{why}",
                    f"{lift}; or {BF16_ROUTE}",
                )
            )
    problems += _check_bnb_architecture(r, facts, method)
    return problems


def _check_bnb_architecture(r, facts: Facts, method: str) -> list[Problem]:
    """The model's architecture against what vLLM 0.8.5 loads in bitsandbytes with LoRA (facts/vllm_bnb.py):
    by its config.json, else by the architectures ms-swift registers its type for (all of them alike)."""
    config = facts.model_config.config or {}
    found = config.get("architectures") or []
    if not found:
        kind = swift_schema.registered_type(r.trainer_args.model or "")
        found = swift_schema.model_types().get(kind, {}).get("architectures", []) if kind else []
    verdicts = {arch: vllm_bnb.why_not(arch) for arch in found}
    refused = {arch: why for arch, why in verdicts.items() if why}
    unlisted = [arch for arch, why in verdicts.items() if why is None]
    fix = (
        f"{BF16_ROUTE}; or USE_VLLM=false (transformers loads it in 4 bits; generation inside the trainer, "
        "slower)"
    )
    if refused and len(refused) == len(verdicts):
        arch, why = next(iter(refused.items()))
        return [
            Problem(
                f"{method} with vLLM",
                f"vLLM 0.8.5 cannot load {arch} in bitsandbytes 4-bit and serve the adapter on it: {why}",
                fix,
            )
        ]
    if unlisted and len(unlisted) == len(verdicts):
        return [
            Problem(
                f"{method} with vLLM",
                f"vLLM 0.8.5's model registry does not list {unlisted[0]}: it would "
                "load it through its Transformers backend, which no run here loaded in bitsandbytes",
                fix,
                fatal=False,
            )
        ]
    return []


def _check_completion_length(plan: Plan, facts: Facts, where) -> list[Problem]:
    """MAX_NEW_TOKENS or RESPONSE_LENGTH beside a different MAX_COMPLETION_LENGTH: ms-swift 3.6.4's RLHF
    uses the first of RESPONSE_LENGTH, MAX_NEW_TOKENS, MAX_COMPLETION_LENGTH (rlhf_args.py:197-199), and so
    does the plan (TrainerArgs.of); a warning, since the recipe's own value is silently not the one used."""
    r = plan.recipe
    used = r.trainer_args.max_completion_length
    given = [k.upper() for k in COMPLETION_LENGTH_ALIASES if r.trainer.get(k)]
    if not given or not r.trainer.get("max_completion_length"):
        return []
    written = int(r.trainer["max_completion_length"][0])
    if written == used and len(given) == 1:
        return []
    return [
        Problem(
            where(given[0]),
            f"ms-swift 3.6.4 generates up to {used} tokens per completion from it, over "
            + ", ".join(
                f"{k}={(r.trainer.get(k.lower()) or [''])[0]}" for k in [*given[1:], "MAX_COMPLETION_LENGTH"]
            )
            + f"; the plan counts {used}",
            f"set MAX_COMPLETION_LENGTH={used} and remove {' and '.join(given)}",
            fatal=False,
        )
    ]


def _check_one_copy_sync(plan: Plan, facts: Facts, where) -> list[Problem]:
    """On the one-weight-copy path (colocated, SLEEP_LEVEL >= 1, OFFLOAD_MODEL, LoRA) without vLLM serving
    the adapter (budget.adapter_sync_blocker): ms-swift merges the adapter into the weights on the CPU
    every step, 24 s of a 32 s Qwen2.5-7B step on a 24 GiB card (docs/benchmarks/one-card-7b.md); said,
    since nothing else changes in the plan."""
    r, a = plan.recipe, plan.recipe.trainer_args
    if plan.layout.mode != "colocate" or a.sleep_level < 1 or not a.offload_model or a.train_type != "lora":
        return []
    if a.bnb_bits and a.use_vllm:  # QLoRA: no merge to fall back on (check_quantization refuses it)
        return []
    why = budget.adapter_sync_blocker(r, facts.deepspeed_config)
    if not why:
        return []
    return [
        Problem(
            "weight sync",
            f"vLLM cannot be given only the trained adapter here: {why}; ms-swift merges the "
            "adapter into the weights on the CPU every step instead (24 s of a 32 s step for a 7B model "
            "on a 24 GiB card: docs/benchmarks/one-card-7b.md)",
            "change what stops it, where you can, for steps about twice as fast",
            fatal=False,
        )
    ]


def _check_model_type(plan: Plan, facts: Facts, where) -> list[Problem]:
    """A MODEL_TYPE of another family than MODEL: ms-swift 3.6.4 loads the model with that type's template
    and loader without checking its architecture (swift/llm/model/register.py:525-531). By MODEL's name where
    ms-swift lists it, else by its config.json's architectures (a local folder; facts.model_config)."""
    r = plan.recipe
    model, given = r.trainer_args.model or "", (r.trainer.get("model_type") or [""])[0]
    if not model:
        return []
    types = swift_schema.model_types()
    found = swift_schema.registered_type(model)
    config = facts.model_config.config or {}
    arch = (config.get("architectures") or [None])[0]
    if not given:
        # unlisted by name, ms-swift goes by the architecture and stops where several types share it
        # (register.py:479-486, "Please explicitly pass the model_type")
        same = swift_schema.types_for_architecture(arch)
        # a checkpoint folder names its type in args.json, which ms-swift reads first (register.py:477-478)
        if found is None and len(same) > 1 and "args.json" not in facts.path(model).entries:
            return [
                Problem(
                    "MODEL_TYPE",
                    f"ms-swift 3.6.4 does not list MODEL={model} by name, and {len(same)} of its "
                    f"types share its architecture {arch}: it would stop at start-up asking for one",
                    f"MODEL_TYPE=<one of: {', '.join(same[:8])}{' ...' if len(same) > 8 else ''}>",
                )
            ]
        return []
    if given not in types:
        close = difflib.get_close_matches(given, list(types), n=3, cutoff=0.6)
        return [
            Problem(
                where("MODEL_TYPE"),
                f"ms-swift 3.6.4 registers no model type {given!r}: it would stop at start-up",
                (f"did you mean {', '.join(close)}? " if close else "")
                + (
                    f"MODEL_TYPE={found}, or remove MODEL_TYPE"
                    if found
                    else "remove MODEL_TYPE (ms-swift "
                    "finds the type from MODEL), or one of the types in "
                    "entrypoint/data/swift_model_types.json"
                ),
            )
        ]
    if found is not None and found != given:
        return [
            Problem(
                where("MODEL_TYPE"),
                f"{given} is not the type ms-swift 3.6.4 registers MODEL={model} under "
                f"({found}): it would load the model with {given}'s template and loader without checking",
                f"MODEL_TYPE={found}, or remove MODEL_TYPE (ms-swift finds it)",
            )
        ]
    allowed = types.get(given, {}).get("architectures") or []
    if found is None and arch and allowed and arch not in allowed:
        same = swift_schema.types_for_architecture(arch)
        return [
            Problem(
                where("MODEL_TYPE"),
                f"{given} is registered in ms-swift 3.6.4 for {', '.join(allowed)}, but "
                f"MODEL's config.json says {arch}: it would load the model with {given}'s template without "
                "checking",
                f"MODEL_TYPE=<one of ms-swift's types for {arch}: {', '.join(same[:8]) or 'none'}"
                + (" ..." if len(same) > 8 else "")
                + ">",
            )
        ]
    return []


# Values ms-swift 3.6.4 looks up by name: (recipe key, `swift rlhf` argument or rollout.<argument>, the
# registry it is looked up in: swift_schema.registry(), plus what the plugins add where PLUGGABLE).
REGISTERED = (
    ("TRAIN_TYPE", "train_type", "train_types"),
    ("LOSS_TYPE", "loss_type", "loss_types"),
    ("MULTI_TURN_SCHEDULER", "multi_turn_scheduler", "multi_turn_schedulers"),
    ("ROLLOUT_MULTI_TURN_SCHEDULER", "rollout.multi_turn_scheduler", "multi_turn_schedulers"),
    ("TEMPLATE", "template", "templates"),
    ("OPTIMIZER", "optimizer", "optimizers"),
    ("REWARD_MODEL_PLUGIN", "reward_model_plugin", "rm_plugins"),
)
KIND_NAMES = {
    "train_types": "train type",
    "loss_types": "GRPO loss type",
    "multi_turn_schedulers": "multi-turn scheduler",
    "templates": "template",
    "optimizers": "plugin optimizer",
    "rm_plugins": "reward-model plugin",
}
PLUGGABLE = ("multi_turn_schedulers", "rm_plugins", "optimizers", "train_types")  # swift.plugin registries
# Other tools' and versions' names, with what 3.6.4 spells instead.
REGISTERED_HINTS = {
    ("TRAIN_TYPE", "qlora"): "QLoRA is TRAIN_TYPE=lora with QUANT_METHOD=bnb and QUANT_BITS=4 in ms-swift",
    ("TRAIN_TYPE", "dora"): "DoRA is TRAIN_TYPE=lora with USE_DORA=true in ms-swift",
}


def _check_registered(plan: Plan, facts: Facts, where) -> list[Problem]:
    """A name ms-swift 3.6.4 looks up in one of its registries (a tuner, GRPO's loss, a multi-turn scheduler,
    a template, a plugin optimizer, a reward-model plugin; REPORT_TO's integrations in transformers): one it
    does not register fails after the model has loaded (`Unknown loss type`, a KeyError). The names are
    those of the lock's ms-swift, plus those the recipe's plugins register (the probe's `registries`)."""
    r = plan.recipe
    registry = swift_schema.registry()
    added = (facts.plugins or {}).get("registries") or {}
    # what the plugins add is unknown where the probe stopped waiting or failed, or a plugin file is missing
    # (each of those has its own problem): the plugin registries' names are then not judged
    # (a command that imports nothing, `rerun --plan`, knows what a recipe without plugins of its own adds:
    # nothing)
    not_probed = facts.plugin_error == NOT_PROBED and not r.trainer_args.external_plugins
    unknown = bool((facts.plugins or {}).get("slow") or (facts.plugin_error and not not_probed)) or any(
        not facts.path(Path(resolved(f, facts.paths))).is_file for f in r.trainer_args.external_plugins
    )
    problems: list[Problem] = []
    for key, arg, kind in REGISTERED:
        if unknown and kind in PLUGGABLE:
            continue
        tokens = r.rollout.get(arg.split(".", 1)[1]) if arg.startswith("rollout.") else r.trainer.get(arg)
        names = sorted(set(registry[kind]) | set(added.get(kind, [])))
        for value in tokens or []:
            if value in names:
                continue
            hint = REGISTERED_HINTS.get((key, value))
            close = difflib.get_close_matches(value, names, n=1, cutoff=0.6)
            listed = ", ".join(names[:20]) + (f" ... ({len(names)} in all)" if len(names) > 20 else "")
            fix = (
                f"{hint}; " if hint else f"did you mean {close[0]}? " if close else ""
            ) + f"{key}=<one of: {listed}>"
            if kind in PLUGGABLE:
                fix += "; a plugin in EXTERNAL_PLUGINS may register more"
            problems.append(
                Problem(
                    f"{key}={value} ({r.source(key)})",
                    f"ms-swift 3.6.4 registers no {KIND_NAMES[kind]} "
                    f"named {value!r}: it would fail after the model has loaded [source: "
                    f"{swift_schema.REGISTRY_SOURCES[kind]}]",
                    fix,
                )
            )
    integrations = sorted(optional.generated()["report_to"])
    for value in r.trainer.get("report_to") or []:
        if value not in integrations and value not in ("none", "all"):
            close = difflib.get_close_matches(value, integrations, n=1, cutoff=0.6)
            problems.append(
                Problem(
                    f"REPORT_TO={value} ({r.source('REPORT_TO')})",
                    "is not an integration transformers "
                    f"4.51.3 knows (its trainer refuses it at start-up) [source: {optional.INTEGRATIONS}]",
                    (f"did you mean {close[0]}? " if close else "")
                    + f"REPORT_TO=<some of: {', '.join(integrations)}, or none>",
                )
            )
    return problems


def _check_config_model_type(plan: Plan, facts: Facts, where) -> list[Problem]:
    """A config.json whose model_type transformers 4.51.3 does not know (qwen3_vl, a newer model): it cannot
    build the model, and ms-swift 3.6.4 needs transformers < 4.53, so the lock cannot move on for it. A
    config with its own code (auto_map) loads through it instead."""
    config, source = facts.model_config
    model_type = (config or {}).get("model_type")
    known = swift_schema.registry()["transformers_model_types"]
    if not model_type or model_type in known or (config or {}).get("auto_map"):
        return []
    close = difflib.get_close_matches(model_type, known, n=3, cutoff=0.7)
    return [
        Problem(
            f"MODEL ({plan.recipe.source('MODEL')})",
            f"its config.json ({source}) has model_type "
            f"{model_type!r}, which transformers 4.51.3 does not know: loading it would fail after the "
            f"start-up (ms-swift 3.6.4 supports transformers < 4.53) [source: "
            f"{swift_schema.REGISTRY_SOURCES['transformers_model_types']}]",
            "choose a model this transformers knows"
            + (f" (close: {', '.join(close)})" if close else "")
            + "; a newer model family needs a newer ms-swift and transformers than this image's lock",
        )
    ]


def _eval_batch(now: int, world: int, generations: int) -> int:
    """The per-device eval batch nearest `now` (the larger on a tie) whose global batch over `world`
    processes is a multiple of `generations`: generations / gcd(world, generations) and its multiples."""
    step = generations // math.gcd(world, generations)
    lower = max(step, now // step * step)
    return lower if now - lower < lower + step - now else lower + step
