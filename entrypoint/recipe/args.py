"""The `swift rlhf` and `swift rollout` arguments the decisions read, typed, built once per recipe.

A recipe keeps each argument as the argv tokens it will pass (Recipe.trainer, Recipe.rollout: strings,
already checked against ms-swift's own types by swift_schema.ArgSpec.coerce). Decisions need numbers,
booleans and lists: `TrainerArgs.of(tokens)` converts them here, once, by the generated schema's type and
nargs (entrypoint/data/swift_rlhf_args.json), and fills what the recipe leaves out with ms-swift's default:
its dataclass default, else the one it sets at run time (RUNTIME_DEFAULTS). A list argument (nargs "+",
`List[str]` / `List[float]` in ms-swift's dataclasses) is a tuple of typed items, () where ms-swift leaves
it None or empty. `Recipe.trainer_args` and `Recipe.rollout_args` hold the result; no other module
converts or splits an argument's text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from entrypoint.recipe import swift_schema

# Defaults ms-swift 3.6.4 sets at run time rather than in its dataclasses (the schema says None there).
RUNTIME_DEFAULTS: dict[str, str] = {
    "beta": "0.04",  # GRPO's KL coefficient when unset (v3.6.4:swift/llm/argument/rlhf_args.py:168-169)
    "torch_dtype": "bfloat16",  # the model's own dtype: the models planned here ship bfloat16 (config.json)
    "dataloader_num_workers": "1",  # on Linux, when unset (v3.6.4:swift/trainers/arguments.py:110-114)
    "deepspeed": "",  # none
}


def _typed(text: str | None, kind: str) -> Any:
    if text is None or (text == "" and kind != "str"):
        return None
    if kind == "bool":
        return text.strip().lower() in swift_schema.TRUE_WORDS
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    return text


def _typed_items(given: list[str] | None, spec: swift_schema.ArgSpec) -> tuple[Any, ...]:
    """A list argument's items typed by its schema; ms-swift's default list when the recipe gives none
    (None there: ms-swift leaves the argument unset, which reads as no items)."""
    items = given if given else (spec.default or [])
    return tuple(_typed(str(item), spec.type) for item in items)


def _values(cls, command: str, tokens: Mapping[str, list[str]]) -> dict[str, Any]:
    schema = swift_schema.load(command)
    out: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        spec = schema[field.name]
        given = tokens.get(field.name)
        if spec.nargs == "+":
            out[field.name] = _typed_items(given, spec)
            continue
        if given:
            text = given[0]
        elif isinstance(spec.default, bool):
            text = "true" if spec.default else "false"
        elif spec.default is not None:
            text = str(spec.default)
        else:
            text = RUNTIME_DEFAULTS.get(field.name) if command == "rlhf" else None
        out[field.name] = _typed(text, spec.type)
    return out


# `swift rlhf` arguments ms-swift 3.6.4 turns into max_completion_length, first wins (TrainerArgs.of)
COMPLETION_LENGTH_ALIASES = ("response_length", "max_new_tokens")


@dataclasses.dataclass(frozen=True)
class TrainerArgs:
    """`swift rlhf` arguments as the run will see them. None: ms-swift derives the value itself (the
    accumulation from 16 / per-device / world, the generation batch from the others, vLLM's context from
    the model). Lists are tuples in the recipe's order (ms-swift's types: swift/llm/argument/rlhf_args.py,
    base_args/data_args.py, base_args/base_args.py, swift/trainers/arguments.py at v3.6.4).

    `model` is the recipe's MODEL as written (a hub id or a path; ms-swift's ModelArguments.model,
    base_args/model_args.py:35), a field like any other argument: the path the run passes instead (the
    embedded model's directory, an offline snapshot) is the plan's `model_path`."""

    model: str | None
    dataset: tuple[str, ...]  # ms-swift: [] (data_args.py:30)
    val_dataset: tuple[str, ...]  # ms-swift: [] (data_args.py:32)
    external_plugins: tuple[str, ...]  # ms-swift: [] (base_args.py:75); the image adds its own file first
    reward_funcs: tuple[str, ...]  # ms-swift: [] (rlhf_args.py:53)
    # (): every reward weighs 1.0, set at run time
    # (v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:163-169)
    reward_weights: tuple[float, ...]
    reward_model: tuple[str, ...]  # ms-swift: None (rlhf_args.py:16)
    # (): "default" for each reward model, set at run time (grpo_trainer.py:141-143)
    reward_model_plugin: tuple[str, ...]
    target_modules: tuple[str, ...]  # ms-swift: ['all-linear'] (tuner_args.py:110)
    soft_cache_length: int | None  # tokens; soft_overlong needs it (trainers/arguments.py:215)
    device_map: str | None  # JSON or a name; ms-swift parses it at run time (model_args.py:78-79)
    per_device_train_batch_size: int
    gradient_accumulation_steps: int | None
    steps_per_generation: int | None
    generation_batch_size: int | None
    num_generations: int
    per_device_eval_batch_size: int
    max_steps: int  # -1: from the dataset and the epochs
    learning_rate: float | None  # None: 1e-4 LoRA, 1e-5 full (v3.6.4 swift/llm/argument/train_args.py:56-60)
    lr_scheduler_type: str  # transformers' SchedulerType name; ms-swift: cosine
    warmup_ratio: float
    warmup_steps: int  # > 0 wins over warmup_ratio (transformers TrainingArguments.get_warmup_steps)
    max_completion_length: int
    max_length: int | None
    torch_dtype: str
    train_type: str
    quant_method: str | None  # bnb, hqq, eetq, quanto, fp8; None: not quantized
    quant_bits: str | None  # one of the schema's choices ("4", "8", "float8", ...)
    bnb_4bit_quant_type: str  # nf4 (ms-swift's default) or fp4
    lora_rank: int
    beta: float
    deepspeed: str
    gradient_checkpointing: bool
    use_liger_kernel: bool
    delta: float | None
    padding_free: bool
    overlong_filter: bool
    sequence_parallel_size: int
    use_vllm: bool
    vllm_gpu_memory_utilization: float
    vllm_tensor_parallel_size: int
    vllm_max_model_len: int | None
    vllm_enforce_eager: bool
    sleep_level: int
    offload_model: bool
    offload_optimizer: bool
    seed: int
    temperature: float
    top_p: float
    top_k: int
    split_dataset_ratio: float
    eval_strategy: str | None
    system: str | None
    use_hf: bool
    dataloader_num_workers: int
    save_strategy: str
    save_steps: float
    save_total_limit: int | None
    save_only_model: bool
    resume_only_model: bool
    log_completions: bool
    logging_steps: int  # a step line every N steps; ms-swift: 5 (trainers/arguments.py)

    @classmethod
    def of(cls, tokens: Mapping[str, list[str]]) -> TrainerArgs:
        """From a recipe's argv tokens (Recipe.trainer). Raises ValueError only for a token that the
        schema's coercion would have refused (Recipe.load drops those first). ms-swift's other spellings
        of the completion's length win over max_completion_length as in its RLHF arguments: response_length,
        then max_new_tokens (v3.6.4:swift/llm/argument/rlhf_args.py:197-199)."""
        values = _values(cls, "rlhf", tokens)
        for alias in COMPLETION_LENGTH_ALIASES:
            if tokens.get(alias):
                values["max_completion_length"] = int(tokens[alias][0])
                break
        return cls(**values)

    @property
    def bnb_bits(self) -> int:
        """4 or 8 where the model is loaded in bitsandbytes' 4/8 bits (QUANT_METHOD=bnb), else 0."""
        return int(self.quant_bits) if self.quant_method == "bnb" and self.quant_bits in ("4", "8") else 0

    @property
    def offload(self) -> bool:
        """OFFLOAD_MODEL or OFFLOAD_OPTIMIZER: ms-swift moves them to the CPU around generation."""
        return self.offload_model or self.offload_optimizer


@dataclasses.dataclass(frozen=True)
class RolloutArgs:
    """`swift rollout` arguments as the server will see them (ROLLOUT_* keys)."""

    gpu_memory_utilization: float
    tensor_parallel_size: int
    data_parallel_size: int
    max_model_len: int | None
    max_num_seqs: int
    enforce_eager: bool

    @classmethod
    def of(cls, tokens: Mapping[str, list[str]]) -> RolloutArgs:
        return cls(**_values(cls, "rollout", tokens))
