"""The one registry of recipe keys: what each key is, who reads it, and what it takes part in.

A recipe (and the environment, and the command line) holds these kinds of keys:

    owned     the entrypoint's own keys (settings.Settings: type, default and meaning of each)
    trainer   `swift rlhf` arguments, upper-cased: NUM_GENERATIONS=6 -> --num_generations 6
    rollout   `swift rollout` arguments behind ROLLOUT_: ROLLOUT_MAX_MODEL_LEN -> --max_model_len
    nccl      NCCL's documented variables (NCCL_VARIABLES), given to every child
    env       a few environment variables for the children (wandb, the hubs, allocator settings)
    managed   keys the entrypoint composes itself: refused, naming the key to use (MANAGED)
    renamed   arguments of other ms-swift versions or tools: refused, naming the 3.6.4 way (RENAMED)

and flags on some of them (`Key`): part of the run's identity (a resume with a changed value is refused),
node-local (may differ between the nodes of one run), shared with the rollout server (passed to
`swift rollout` as well), colocate-only (ms-swift ignores it in server mode; the rollout's key is named).
`lookup(name)` answers for any name; the tables below are the data.
"""

from __future__ import annotations

import dataclasses
import functools

from entrypoint.recipe import swift_schema
from entrypoint.recipe.settings import Settings


@dataclasses.dataclass(frozen=True)
class Renamed:
    message: str  # what the key was / why it does not apply
    fix: str  # the 3.6.4 way
    source: str  # where the fact comes from
    becomes: str = ""  # the 3.6.4 key it is, where it is one: a fix follows the recipe's mode (server_only)


@dataclasses.dataclass(frozen=True)
class Key:
    """What the registry knows of one key."""

    name: str
    kind: str  # "owned" | "trainer" | "rollout" | "nccl" | "env" | "managed" | "renamed"
    identity: bool = False  # what the run trains: a resume with another value is refused
    node_local: bool = False  # may differ between the nodes of a multi-node run
    shared_with_rollout: bool = False  # the rollout server gets the same value
    from_environment: bool = True  # read from the process environment when set there
    colocate_only: str | None = None  # ignored in server mode; the rollout's key ("" when none)
    managed: str = ""  # kind "managed": which key to use instead
    renamed: Renamed | None = None  # kind "renamed": the 3.6.4 way


MANAGED: dict[str, str] = {
    "RLHF_TYPE": "this image runs GRPO; the entrypoint always passes --rlhf_type grpo",
    "VLLM_MODE": "the mode follows the layout: ROLLOUT_GPUS set -> server, empty -> colocate",
    "VLLM_SERVER_HOST": "server mode is composed by the entrypoint: set ROLLOUT_GPUS=<ordinal> for a rollout "
    "on this machine, or ROLLOUT_HOST=<address> for one on another node",
    "VLLM_SERVER_PORT": "the entrypoint picks a free port; set ROLLOUT_PORT to choose one",
    "VLLM_SERVER_BASE_URL": "in ms-swift 3.6.4 a base URL alone does not enable server mode (vLLM then "
    "silently colocates on the training GPU); set ROLLOUT_GPUS or ROLLOUT_HOST instead",
    "VLLM_SERVER_TIMEOUT": "the entrypoint waits for the rollout server's health itself and gives the "
    "trainer the same budget: set ROLLOUT_STARTUP_TIMEOUT (seconds)",
    "ADD_VERSION": "the run directory is OUTPUT_DIR/RUN_NAME, with no vN- folder",
    "LOGGING_DIR": "logs go under the run directory",
    "RESUME_FROM_CHECKPOINT": "resume is automatic: start the run again with the same RUN_NAME",
    "LOCAL_RANK": "set by torchrun for each process",
    "CUDA_VISIBLE_DEVICES": "the entrypoint sets it per process: use TRAIN_GPUS and ROLLOUT_GPUS "
    "(in-container ordinals); to hide GPUs from the container, use compose's device_ids",
    "NPROC_PER_NODE": "derived from the number of TRAIN_GPUS",
    "ROLLOUT_MODEL": "the rollout serves MODEL",
    "ROLLOUT_EXTERNAL_PLUGINS": "the rollout loads the same EXTERNAL_PLUGINS as the trainer",
    "ROLLOUT_INFER_BACKEND": "swift rollout always uses vLLM",
}


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
        "v3.2.0:swift/trainers/arguments.py:73-100; "
        "v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:449-475",
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
        "QUANT_METHOD=bnb QUANT_BITS=4 (QLoRA, with TRAIN_TYPE=lora; bitsandbytes 0.45.5 is in the lock: a "
        "14B model on one 24 GB card, recipe countdown-14b-1x4090)",
        "v3.6.4:swift/llm/argument/base_args/quant_args.py:29-32",
    ),
    "LOAD_IN_8BIT": Renamed(
        "not an ms-swift argument in any version",
        "QUANT_METHOD=bnb QUANT_BITS=4 (QLoRA; vLLM 0.8.5 loads a bf16 checkpoint in bitsandbytes 4-bit "
        "only), or QUANT_METHOD=bnb QUANT_BITS=8 with USE_VLLM=false",
        "v3.6.4:swift/llm/argument/base_args/quant_args.py:29-32",
    ),
    "QUANTIZATION_BIT": Renamed(
        "not an ms-swift argument (LLaMA-Factory's name)",
        "QUANT_METHOD=bnb QUANT_BITS=4",
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
    "CKPT_DIR": Renamed(
        "ms-swift's compatibility spelling: 3.6.4 loads the folder as MODEL (over a MODEL given beside it), "
        "or as an adapter when it holds adapter_config.json, which the plan would not see",
        "MODEL=<the folder>, or for an adapter checkpoint ADAPTERS=<the folder> with MODEL=<its base model>",
        "v3.6.4:swift/llm/argument/base_args/base_args.py:28-43 (CompatArguments._handle_ckpt_dir)",
    ),
    "MAX_PROMPT_LENGTH": Renamed(
        "TRL's name; ms-swift truncates prompt + completion to MAX_LENGTH",
        "MAX_LENGTH=<tokens> (prompt + completion) and MAX_COMPLETION_LENGTH=<tokens>",
        "v3.6.4:swift/llm/argument/rlhf_args.py:163-167",
    ),
}


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a numeric `swift rlhf` / `swift rollout` argument may take: low/high bounds (None: open),
    `exclusive_low` for a strict lower bound, `also` for sentinel values outside them (-1: "unset")."""

    low: float | None
    high: float | None = None
    exclusive_low: bool = False
    also: tuple[float, ...] = ()
    meaning: str = ""  # why, in the user's terms
    source: str = ""

    def admits(self, number: float) -> bool:
        if number in self.also:
            return True
        if self.low is not None and (number <= self.low if self.exclusive_low else number < self.low):
            return False
        return self.high is None or number <= self.high

    def describe(self) -> str:
        low = "" if self.low is None else (f"> {self.low:g}" if self.exclusive_low else f">= {self.low:g}")
        high = "" if self.high is None else f"<= {self.high:g}"
        text = " and ".join(t for t in (low, high) if t)
        return text + "".join(f", or {a:g}" for a in self.also)


# Where a value outside these ranges fails late (a ZeroDivisionError after the model loaded, a vLLM
# ValueError at the first rollout) or silently means something else (MAX_STEPS=-5 trains by epochs).
# Keys are `swift rlhf` argument names; "rollout." prefixes `swift rollout` ones.
_TF = "transformers 4.51.3:src/transformers/training_args.py"
_VLLM = "vllm 0.8.5:vllm/sampling_params.py:_verify_args"
RANGES: dict[str, Range] = {
    "per_device_train_batch_size": Range(
        1,
        meaning="completions per device per step",
        source="v3.6.4:swift/trainers/rlhf_arguments.py:83-88 divides by it",
    ),
    "per_device_eval_batch_size": Range(
        1,
        meaning="completions per device per eval step",
        source="v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:236-243",
    ),
    "gradient_accumulation_steps": Range(1, meaning="steps per optimizer update", source=_TF),
    "steps_per_generation": Range(
        1,
        meaning="optimizer steps per generation round",
        source="v3.6.4:swift/trainers/rlhf_arguments.py:72-88",
    ),
    "generation_batch_size": Range(
        1, meaning="completions per generation round", source="v3.6.4:swift/trainers/rlhf_arguments.py:72-88"
    ),
    "learning_rate": Range(
        0,
        1,
        exclusive_low=True,
        meaning="a learning rate (AdamW refuses negative ones; 0 trains nothing; above 1 is an exponent "
        "slip)",
        source="torch 2.6.0:torch/optim/adamw.py:30 (lr >= 0)",
    ),
    "temperature": Range(
        0,
        exclusive_low=True,
        meaning="sampling temperature; GRPO divides the logits by it, and 0 makes every generation of a "
        "prompt the same",
        source="v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:1315 (logits / self.temperature)",
    ),
    "top_p": Range(0, 1, exclusive_low=True, meaning="nucleus sampling mass", source=_VLLM),
    "top_k": Range(1, also=(-1,), meaning="tokens kept for sampling (-1: all)", source=_VLLM),
    "repetition_penalty": Range(0, exclusive_low=True, meaning="a multiplicative penalty", source=_VLLM),
    "max_steps": Range(
        1,
        also=(-1,),
        meaning="optimizer steps (-1: run NUM_TRAIN_EPOCHS); other values <= 0 silently mean -1",
        source=_TF + " (max_steps > 0 overrides num_train_epochs)",
    ),
    "num_train_epochs": Range(0, exclusive_low=True, meaning="epochs over the dataset", source=_TF),
    "max_completion_length": Range(
        1, meaning="tokens per completion", source="v3.6.4:swift/llm/argument/rlhf_args.py"
    ),
    "max_length": Range(
        1, meaning="prompt + completion tokens", source="v3.6.4:swift/llm/argument/base_args/template_args.py"
    ),
    "num_iterations": Range(
        1, meaning="policy updates per generation (GRPO's mu)", source="trl 0.18:trl/trainer/grpo_config.py"
    ),
    "beta": Range(
        0, meaning="the KL coefficient (0: no reference model)", source="trl 0.18:trl/trainer/grpo_config.py"
    ),
    "epsilon": Range(
        0, exclusive_low=True, meaning="the PPO clip range", source="trl 0.18:trl/trainer/grpo_config.py"
    ),
    "warmup_ratio": Range(
        0,
        1,
        meaning="a fraction of the training steps",
        source=_TF + " (warmup_ratio must lie in range [0,1])",
    ),
    "lora_rank": Range(
        1,
        meaning="the LoRA rank",
        source="peft 0.15:src/peft/tuners/lora/layer.py (r should be a positive integer)",
    ),
    "logging_steps": Range(0, exclusive_low=True, meaning="steps between log lines", source=_TF),
    "save_steps": Range(0, exclusive_low=True, meaning="steps between checkpoints", source=_TF),
    "eval_steps": Range(0, exclusive_low=True, meaning="steps between evaluations", source=_TF),
    "dataloader_num_workers": Range(0, meaning="data loader worker processes", source=_TF),
    "dataset_num_proc": Range(
        1,
        meaning="dataset preprocessing processes",
        source="v3.6.4:swift/llm/argument/base_args/data_args.py",
    ),
    "vllm_tensor_parallel_size": Range(
        1, meaning="GPUs per colocated vLLM engine", source="vllm 0.8.5:vllm/config.py ParallelConfig"
    ),
    "rollout.tensor_parallel_size": Range(
        1, meaning="GPUs per vLLM engine", source="vllm 0.8.5:vllm/config.py ParallelConfig"
    ),
    "rollout.data_parallel_size": Range(
        1, meaning="vLLM engines", source="v3.6.4:swift/llm/infer/rollout.py"
    ),
    "rollout.max_num_seqs": Range(
        1, meaning="sequences vLLM runs at once", source="vllm 0.8.5:vllm/config.py SchedulerConfig"
    ),
}


def range_of(key: str) -> Range | None:
    """The admitted range of a recipe key (NUM_GENERATIONS, ROLLOUT_MAX_NUM_SEQS), None when unbounded."""
    name = key.lower()
    if name.startswith("rollout_"):
        return RANGES.get("rollout." + name[len("rollout_") :])
    return RANGES.get(name)


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
        becomes=f"ROLLOUT_{_flag}",
    )


# Accepted by 3.6.4 with a deprecation warning and no effect: warned about, passed on as ms-swift would take
# them.
DEPRECATED: dict[str, tuple[str, str]] = {
    "GC_COLLECT_AFTER_OFFLOAD": (
        "deprecated in ms-swift 3.6.4 (removed in 3.7) and has no effect; OFFLOAD_MODEL / OFFLOAD_OPTIMIZER "
        "/ SLEEP_LEVEL control memory in colocate mode",
        "v3.6.4:swift/llm/argument/rlhf_args.py:314-316",
    ),
}

# `swift rlhf` arguments that only act in colocate mode: in server mode ms-swift ignores them (some with
# one warning line), so a user who set them believes they are tuning the rollout when they are not. They
# are warned about, never refused: ms-swift accepts them (`_external_vllm_warning`, rlhf_args.py:294-302).
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
# COLOCATE_ONLY read backwards: what a rollout server's key is called on the colocated engine, for a fix
# in a recipe that runs no server (where every ROLLOUT_ key is refused: plan/layout._check_mode_keys).
COLOCATED_KEY: dict[str, str] = {server: colocated for colocated, server in COLOCATE_ONLY.items() if server}


def server_only(key: str) -> bool:
    """A key that only a rollout server takes: refused in a recipe that runs none (ROLLOUT_GPUS and
    ROLLOUT_HOST empty; plan/layout._check_mode_keys), so never a fix to offer there."""
    return key.startswith("ROLLOUT_") and key not in ("ROLLOUT_GPUS", "ROLLOUT_HOST")


# NCCL's documented environment variables (NCCL user guide, "Environment Variables"), used to catch
# typos: NCCL ignores names it does not know, so NCCL_P2P_DISSABLE=1 silently does nothing.
NCCL_VARIABLES = frozenset(
    {
        "NCCL_ALGO", "NCCL_BUFFSIZE", "NCCL_CHECK_POINTERS", "NCCL_COLLNET_ENABLE", "NCCL_COMM_BLOCKING",
        "NCCL_COMM_ID", "NCCL_CONF_FILE", "NCCL_CROSS_NIC", "NCCL_CUMEM_ENABLE", "NCCL_DEBUG",
        "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_DMABUF_ENABLE", "NCCL_GRAPH_DUMP_FILE",
        "NCCL_GRAPH_FILE", "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_HOSTID", "NCCL_IB_ADAPTIVE_ROUTING",
        "NCCL_IB_AR_THRESHOLD", "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX", "NCCL_IB_HCA", "NCCL_IB_MERGE_NICS",
        "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_RETRY_CNT",
        "NCCL_IB_ROCE_VERSION_NUM",
        "NCCL_IB_SL", "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_TC", "NCCL_IB_TIMEOUT", "NCCL_IB_USE_INLINE",
        "NCCL_IGNORE_CPU_AFFINITY", "NCCL_IGNORE_DISABLED_P2P", "NCCL_LAUNCH_MODE", "NCCL_LL128_BUFFSIZE",
        "NCCL_LL_BUFFSIZE", "NCCL_MAX_CTAS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MIN_NCHANNELS",
        "NCCL_MNNVL_ENABLE", "NCCL_NET", "NCCL_NET_DISABLE_INTRA", "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ",
        "NCCL_NET_OVERHEAD", "NCCL_NET_PLUGIN", "NCCL_NSOCKS_PERTHREAD", "NCCL_NTHREADS", "NCCL_NVB_DISABLE",
        "NCCL_NVLS_ENABLE", "NCCL_P2P_DIRECT_DISABLE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL",
        "NCCL_P2P_NET_CHUNKSIZE", "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_P2P_PCI_CHUNKSIZE", "NCCL_P2P_READ_ENABLE",
        "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_PROTO", "NCCL_PXN_DISABLE", "NCCL_RAS_ENABLE",
        "NCCL_RUNTIME_CONNECT",
        "NCCL_SET_STACK_SIZE", "NCCL_SET_THREAD_NAME", "NCCL_SHM_DISABLE", "NCCL_SHM_USE_CUDA_MEMCPY",
        "NCCL_SOCKET_FAMILY", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_NTHREADS", "NCCL_SOCKET_RETRY_CNT",
        "NCCL_SOCKET_RETRY_SLEEP_MSEC", "NCCL_TOPO_DUMP_FILE", "NCCL_TOPO_FILE", "NCCL_TUNER_PLUGIN",
        "NCCL_WORK_FIFO_DEPTH",
    }
)  # fmt: skip


# Environment variables a recipe may set for the child processes.
ENV_PASSTHROUGH = {
    "PYTORCH_CUDA_ALLOC_CONF",
    "OMP_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
    "CUDA_LAUNCH_BLOCKING",
    "TORCH_DISTRIBUTED_DEBUG",
    "GLOO_SOCKET_IFNAME",
}
ENV_PASSTHROUGH_PREFIXES = ("WANDB_", "HF_", "MODELSCOPE_", "TORCH_NCCL_")

# ms-swift's own environment knobs (swift_schema.environment_variables(): the variables its code reads,
# and those its docs list for specific models, such as MAX_PIXELS for the Qwen VL models, read by
# qwen_vl_utils) reach the children as environment, whatever a `swift rlhf` argument of the same name
# does. Left out: what torchrun and the entrypoint set per process, and arguments ms-swift copies into
# the environment itself, where the argument is the knob (USE_HF, PACKING_CACHE: base_args.py:144-149).
SWIFT_ENV_NOT_KNOBS = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_SIZE", "_PATCH_WORLD_SIZE",
    "NPROC_PER_NODE", "NNODES", "NODE_RANK", "MASTER_PORT", "MASTER_ADDR", "ACCELERATE_USE_DEEPSPEED",
    "ACCELERATE_USE_FSDP", "USE_HF", "PACKING_CACHE",
}  # fmt: skip


@functools.cache
def swift_env() -> frozenset[str]:
    """The environment variables a recipe may set for ms-swift (its knobs), as environment."""
    return frozenset(swift_schema.environment_variables()) - SWIFT_ENV_NOT_KNOBS


# Names that shells and launchers export for their own reasons; never read as recipe values from the
# process environment (they remain valid in recipe files and on the command line).
NOT_FROM_ENVIRONMENT = {"COLUMNS", "DEBUG", "LOCAL_RANK", "LOG_LEVEL", "VERBOSE", "STREAM", "STRICT"}

# Recipe keys that define what a run trains; a resume with any of them changed is refused.
IDENTITY = (
    "MODEL", "MODEL_SOURCE", "MODEL_TYPE", "TRAIN_TYPE", "LORA_RANK", "LORA_ALPHA", "LORA_DROPOUT",
    "TARGET_MODULES", "QUANT_METHOD", "QUANT_BITS", "DATASET", "DATASET_GENERATOR", "DATASET_ROWS",
    "REWARD_FUNCS", "REWARD_WEIGHTS", "SEED",
)  # fmt: skip

# What a resume restores from the checkpoint whatever the recipe now says: the optimizer's and the
# learning-rate schedule's state (transformers' Trainer._load_optimizer_and_scheduler; a run resumed with
# LEARNING_RATE changed kept the checkpoint's scheduler.pt base_lrs while its manifest said the new value).
# A resume with one of them changed is refused unless RESUME_ONLY_MODEL=true (weights only: a new optimizer
# and schedule with the new values, ms-swift's --resume_only_model).
RESUME_RESTORED = (
    "LEARNING_RATE", "LR_SCHEDULER_TYPE", "WARMUP_RATIO", "WARMUP_STEPS", "WEIGHT_DECAY", "ADAM_BETA1",
    "ADAM_BETA2", "ADAM_EPSILON", "OPTIM", "MAX_GRAD_NORM",
)  # fmt: skip
# What GRPO's steps after a resume use as the recipe now says, though the steps before used the old values:
# the resume goes on, saying which values changed at which step (the manifest keeps every attempt's recipe).
RESUME_CHANGES = (
    "NUM_GENERATIONS", "BETA", "TEMPERATURE", "TOP_P", "TOP_K", "REPETITION_PENALTY", "MAX_COMPLETION_LENGTH",
    "MAX_LENGTH", "SYSTEM", "EPSILON", "EPSILON_HIGH", "LOSS_TYPE", "SCALE_REWARDS", "NUM_ITERATIONS",
)  # fmt: skip

# Keys that may differ between the nodes of one run (everything else must match: nodes.py).
NODE_LOCAL = (
    "NODE_RANK", "OUTPUT_DIR", "INVENTORY", "EMBEDDED_MODEL_DIR", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA",
    "GPU_MONITOR_INTERVAL", "STOP_GRACE_SECONDS", "NODE_CHECK_TIMEOUT", "RECIPE",
)  # fmt: skip
NODE_LOCAL_PREFIXES = ("WANDB_", "HF_")

# Trainer arguments the rollout server must share (same model, template, dtype, seed).
SHARED_WITH_ROLLOUT = ("MODEL", "MODEL_TYPE", "MODEL_REVISION", "TEMPLATE", "TORCH_DTYPE", "USE_HF", "SEED")

OWNED = frozenset(Settings.model_fields)


@functools.cache
def lookup(name: str) -> Key | None:
    """The registry's answer for a recipe key (upper case), or None when no kind takes it."""
    flags = {
        "identity": name in IDENTITY,
        "node_local": name in NODE_LOCAL or name.startswith(NODE_LOCAL_PREFIXES),
        "shared_with_rollout": name in SHARED_WITH_ROLLOUT,
        "from_environment": name not in NOT_FROM_ENVIRONMENT,
        "colocate_only": COLOCATE_ONLY.get(name),
    }
    if name in MANAGED:
        return Key(name, "managed", managed=MANAGED[name], **flags)
    if name in RENAMED:
        return Key(name, "renamed", renamed=RENAMED[name], **flags)
    if name in OWNED:
        kind = "owned"
    elif name in NCCL_VARIABLES:
        kind = "nccl"
    elif name in ENV_PASSTHROUGH or name.startswith(ENV_PASSTHROUGH_PREFIXES) or name in swift_env():
        # before the arguments: MAX_PIXELS and LOG_LEVEL are also `swift rlhf` arguments, but the variable
        # is what qwen_vl_utils and ms-swift's logger read, and what the v3.6.4 examples set
        kind = "env"
    elif name.startswith("ROLLOUT_") and name[len("ROLLOUT_") :].lower() in swift_schema.load("rollout"):
        kind = "rollout"
    elif name.lower() in swift_schema.load("rlhf"):
        kind = "trainer"
    else:
        return None
    return Key(name, kind, **flags)


def known() -> list[str]:
    """Every key a recipe may set (for suggestions and `keys`)."""
    names = set(OWNED) | set(NCCL_VARIABLES) | ENV_PASSTHROUGH | swift_env()
    names |= {name.upper() for name in swift_schema.load("rlhf")}
    names |= {"ROLLOUT_" + name.upper() for name in swift_schema.load("rollout")}
    return sorted(k for k in names if k not in MANAGED and k not in RENAMED)
