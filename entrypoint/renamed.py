"""Arguments that users copy from old posts, newer docs or other tools, and what ms-swift 3.6.4 wants.

Each entry is refused before heavy work with its replacement named. Without this table ms-swift 3.6.4
either rejects them only after building its argument dataclasses (`ValueError: remaining_argv`, by then
it has created an output folder and, in server mode, joined the weight-sync group;
v3.6.4:swift/llm/base.py:27-37) or, for valid-but-wrong ones, runs with a silently different setup.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Renamed:
    message: str  # what the key was / why it does not apply
    fix: str  # the 3.6.4 way
    source: str  # where the fact comes from


_SERVER_FIX = (
    "give the rollout its own GPU(s) with ROLLOUT_GPUS=<ordinal> (server mode: a `swift rollout` process), "
    "or leave ROLLOUT_GPUS empty to colocate vLLM on the training GPUs"
)

RENAMED: dict[str, Renamed] = {
    "VLLM_DEVICE": Renamed(
        "removed in ms-swift 3.6 (the <=3.5 'last GPU runs vLLM' layout)",
        _SERVER_FIX,
        "deprecated with 'will be removed in version 3.6' in v3.5.3:swift/llm/argument/rlhf_args.py:279-294; "
        "absent from v3.6.0",
    ),
    "NUM_INFER_WORKERS": Renamed(
        "removed in ms-swift 3.6",
        _SERVER_FIX + "; several rollout GPUs run data-parallel",
        "v3.5.3:swift/llm/argument/rlhf_args.py:279-294",
    ),
    "VLLM_MAX_NUM_SEQS": Renamed(
        "a ms-swift 3.2 GRPO argument, not in 3.6.4 (it returns in 3.7+ as a rollout argument)",
        "server mode: ROLLOUT_MAX_NUM_SEQS=<n>; colocate mode sizes it from the batch "
        "(per_device_train_batch_size x tp x steps_per_generation)",
        "v3.2.0:swift/trainers/arguments.py:73-100; v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:449-475",
    ),
    "TENSOR_PARALLEL_SIZE": Renamed(
        "the pre-3.6 GRPO spelling",
        "colocate: VLLM_TENSOR_PARALLEL_SIZE=<n>; server mode: ROLLOUT_TENSOR_PARALLEL_SIZE=<n>",
        "v3.5.3:swift/llm/argument/rlhf_args.py:279-294",
    ),
    "TUNER_TYPE": Renamed(
        "the ms-swift 4.x name",
        "TRAIN_TYPE=lora (or full)",
        "v3.6.4:swift/llm/argument/base_args/base_args.py:73 (train_type), tuner_args.py",
    ),
    "SFT_TYPE": Renamed(
        "the ms-swift 2.x name",
        "TRAIN_TYPE=lora (or full)",
        "v3.6.4:swift/llm/argument/base_args/base_args.py:73 (train_type), tuner_args.py",
    ),
    "LOAD_IN_4BIT": Renamed(
        "not an ms-swift argument in any version (a transformers/bitsandbytes kwarg)",
        "QLoRA: QUANT_METHOD=bnb and QUANT_BITS=4 (with TRAIN_TYPE=lora)",
        "v3.6.4:swift/llm/argument/base_args/quant_args.py:29-32",
    ),
    "LOAD_IN_8BIT": Renamed(
        "not an ms-swift argument in any version",
        "QUANT_METHOD=bnb and QUANT_BITS=8",
        "v3.6.4:swift/llm/argument/base_args/quant_args.py:29-32",
    ),
    "QUANTIZATION_BIT": Renamed(
        "not an ms-swift argument (LLaMA-Factory's name)",
        "QUANT_METHOD=bnb and QUANT_BITS=4",
        "v3.6.4:swift/llm/argument/base_args/quant_args.py:29-32",
    ),
    "LORA_TARGET_MODULES": Renamed(
        "not an ms-swift argument",
        "TARGET_MODULES=all-linear",
        "v3.6.4:swift/llm/argument/base_args/base_args.py:73 (train_type), tuner_args.py",
    ),
    "LORA_TARGET": Renamed(
        "LLaMA-Factory's name",
        "TARGET_MODULES=all-linear",
        "v3.6.4:swift/llm/argument/base_args/base_args.py:73 (train_type), tuner_args.py",
    ),
    "LORA_R": Renamed(
        "PEFT's name",
        "LORA_RANK=<r>",
        "v3.6.4:swift/llm/argument/base_args/base_args.py:73 (train_type), tuner_args.py",
    ),
    "USE_PEFT": Renamed(
        "TRL's name",
        "TRAIN_TYPE=lora",
        "v3.6.4:swift/llm/argument/base_args/base_args.py:73 (train_type), tuner_args.py",
    ),
    "MAX_PROMPT_LENGTH": Renamed(
        "TRL's name; ms-swift truncates prompt + completion to MAX_LENGTH",
        "MAX_LENGTH=<tokens> (prompt + completion) and MAX_COMPLETION_LENGTH=<tokens>",
        "v3.6.4:swift/llm/argument/rlhf_args.py:163-167",
    ),
    "GC_COLLECT_AFTER_OFFLOAD": Renamed(
        "deprecated in 3.6.4 and has no effect",
        "drop it; OFFLOAD_MODEL / OFFLOAD_OPTIMIZER / SLEEP_LEVEL control memory in colocate mode",
        "v3.6.4:swift/trainers/arguments.py:202",
    ),
}

# ms-swift 3.7+ renamed the rollout's vLLM flags with a `vllm_` prefix; in 3.6.4 they are unknown
# (`ValueError: remaining_argv`). Spelled here as recipe keys.
for _flag in (
    "GPU_MEMORY_UTILIZATION",
    "MAX_MODEL_LEN",
    "TENSOR_PARALLEL_SIZE",
    "DATA_PARALLEL_SIZE",
    "ENABLE_PREFIX_CACHING",
    "ENFORCE_EAGER",
    "MAX_NUM_SEQS",
    "USE_ASYNC_ENGINE",
):
    RENAMED[f"ROLLOUT_VLLM_{_flag}"] = Renamed(
        "the ms-swift 3.7+ spelling of a `swift rollout` flag; 3.6.4 has no `vllm_` prefix there",
        f"ROLLOUT_{_flag}=<value>",
        "v3.6.4:swift/llm/argument/infer_args.py:67-82; prefix added in v3.7.0",
    )

# `swift rlhf` arguments that only act in colocate mode: in server mode ms-swift ignores them (some with
# one warning line), so a user who set them believes they are tuning the rollout when they are not.
COLOCATE_ONLY: dict[str, str] = {
    "VLLM_GPU_MEMORY_UTILIZATION": "ROLLOUT_GPU_MEMORY_UTILIZATION",
    "VLLM_MAX_MODEL_LEN": "ROLLOUT_MAX_MODEL_LEN",
    "VLLM_ENFORCE_EAGER": "ROLLOUT_ENFORCE_EAGER",
    "VLLM_ENABLE_PREFIX_CACHING": "ROLLOUT_ENABLE_PREFIX_CACHING",
    "VLLM_TENSOR_PARALLEL_SIZE": "ROLLOUT_TENSOR_PARALLEL_SIZE",
    "VLLM_LIMIT_MM_PER_PROMPT": "ROLLOUT_LIMIT_MM_PER_PROMPT",
    "SLEEP_LEVEL": "",
    "OFFLOAD_MODEL": "",
    "OFFLOAD_OPTIMIZER": "",
}
COLOCATE_ONLY_SOURCE = "v3.6.4:swift/llm/argument/rlhf_args.py:294-302; swift/trainers/arguments.py:163-201"
