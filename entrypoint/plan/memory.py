"""Memory planner: predicted peak GPU memory (GiB) per GPU, before anything is loaded.

Training side (what `torch.cuda.max_memory_reserved` reaches in the trainer; ms-swift logs it as
`memory(GiB)`), the larger of two phases:

    train phase = weights [+ reference model] + gradients and AdamW states
                  + activations of one micro-batch (per_device x (prompt + completion) tokens)
                  + logits over the vocabulary for its completion tokens
    generation  = weights [+ reference] + optimizer states + KV cache of the generation batch
                  (HF generation inside the trainer, when USE_VLLM=false)

    peak = OVERHEAD x max(train, generation) + CONSTANT

AdamW on bf16 parameters keeps bf16 states (torch creates them like the parameter), so full fine-tuning
costs 2 (weights) + 2 (grads) + 4 (two states) bytes per parameter; DeepSpeed ZeRO-2 keeps fp32 master
weights and states (12 bytes) plus gradients, sharded over the processes. LoRA's reference log-probs use
the same model with adapters disabled (v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:1155); full
fine-tuning with BETA > 0 loads a second copy.

The coefficients of activations, logits, OVERHEAD and CONSTANT are fitted to measurements of real
ms-swift 3.6.4 GRPO runs on an H200 (bench/calibration/memory-calibration.json, fitted by
bench/fit_memory.py); tests/plan/test_memory.py checks every measurement is within 15 %.

vLLM side, colocated (what NVML sees on the card, sleep level 0 unless said), three parts with a meaning,
with one set of coefficients per allocator (colocate_* with expandable segments, colocate_torch_* without):

    card peak = VLLM_GPU_MEMORY_UTILIZATION x card                                    "vLLM"
                + optimizer + activations [x activation_factor, without checkpointing]
                  + [liger_]logit_bytes x micro-batch x completion x vocabulary             "training"
                + constant_gib [+ colocate_sleep_gib, SLEEP_LEVEL >= 1]                     "graphs, sampler"

- "vLLM": vLLM's V1 engine sizes itself so that the whole process holds utilization x card once its KV
  cache is allocated: the CUDA context and the trainer's weights, already there, count against that share,
  beside vLLM's own copy of the weights, its profiling peak and the KV cache (vllm 0.8.5.post1
  v1/worker/gpu_worker.py:170-215). Measured: share 0.25 -> 0.35 of a 24 GiB card moved the peak from 19.32
  to 21.80 GiB, 1.03 GiB per GiB of share (bench/calibration/2026-12-02-1424-levers/).
  The V0 engine (VLLM_USE_V1=0; multi-step scheduling runs only there) measures from a snapshot taken when
  it starts, so its share holds only its own weights, profiling peak and KV cache (worker/worker.py:162-181,
  225-264): the CUDA context and the trainer's weights come on top ("context and weights before vLLM (V0)":
  colocate_v0_before_gib + the weights). At share 0.25 its KV cache was 4.75 GiB against V1's 2.69, at 0.10
  1.15 GiB (bench/generation/2026-12-03-0828-engines/, bench/throughput/2026-12-03-1051-countdown-v0-engine/).
  Fitted with the other expandable-
  segment coefficients to the three V0 runs and the rest: 0.69 GiB, below the ~1.1 GiB NVML sees outside
  torch's allocator, the difference within the "training" part's spread (+-7 %).
- "training": what a training step adds on top: gradients and optimizer states, activations (the trainer
  side above, whose weights vLLM's share already counts) and the logits as they land on the card, with
  their own bytes per entry: the policy's logits and the reference model's beside them (liger's fused loss
  drops the policy's, not the reference's). The same process holds vLLM's KV cache and the trainer's
  tensors, and torch's default caching allocator keeps a freed block for a same-size request: when a longer
  batch of completions arrives, the working set is allocated again beside the old one (countdown-1x4090
  went 15.15 -> 19.32 GiB at its fourth step, bench/calibration/2026-12-02-1424-levers/), at steps that vary
  from run to run. Fitted: 32 bytes
  per entry on torch's allocator, 18 with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which the
  planner sets without sleep mode (budget.allocator), and whose peak stays flat; 11 and 10 with liger.
  Without gradient checkpointing a colocated step keeps 1.35x (1.14x) the activations the trainer-side
  model, fitted on HF-generation runs, predicts.
- "graphs, sampler": what vLLM allocates outside its budget (CUDA graphs: 0.09 GiB captured for 7 sizes;
  the sampler's logits of a decode step): 0.19 GiB fitted with expandable segments; 3.1 GiB on torch's
  allocator, whose cached blocks sit here too. With sleep mode, ms-swift 3.6.4 empties torch's cache after
  vLLM sleeps but not before it wakes up (grpo_trainer.py:799-851), so the trainer's cached memory and
  vLLM's pool meet on the card at the next wake-up: -1.5 GiB fitted against torch's allocator awake, so
  SLEEP_LEVEL=1 saves little peak memory without OFFLOAD_MODEL / OFFLOAD_OPTIMIZER, and its pool refuses
  expandable segments (vllm 0.8.5.post1 device_allocator/cumem.py:146).
Fitted by bench/fit_memory.py (data/memory_coefficients.json) to bench/calibration/memory-calibration.json:
the runs the planner's own choices make (expandable segments; sleep mode) within 7 %, torch's allocator
without sleep mode (a recipe's opt-out) within 16 % (tests/plan/test_memory.py); the runs are
listed in bench/calibration/README.md.
vLLM refuses to start when its share leaves no room for one sequence of max_model_len in the KV cache
(`kv_budget`).

A dedicated rollout GPU holds ROLLOUT_GPU_MEMORY_UTILIZATION x the card (vLLM's own process there).
Every GPU also carries the CUDA context (CUDA_CONTEXT_GIB).

QLoRA (QUANT_METHOD=bnb QUANT_BITS=4, `Workload.quant_bits`): the decoder's linear weights are bitsandbytes
NF4 (QUANT_BYTES: half a byte per weight and double quantization's absmax codes) in both copies, the trainer's
(transformers' 4-bit loader) and vLLM's (its bitsandbytes loader quantizes the bf16 checkpoint while loading,
vllm 0.8.5.post1 model_executor/model_loader/loader.py:1038-1122); the embeddings, the lm_head (tied or not,
by config), the norms and biases stay bf16, and the LoRA adapter, its gradients and AdamW states are what they
are for bf16 LoRA. OFFLOAD_MODEL takes the whole 4-bit copy off the card with the hook offload_quant_states
(`TrainingEstimate.pinned` is 0): ms-swift's own offload moves each parameter's .data
(grpo_trainer.py:1457-1459), the packed 4-bit weights included (9.39 -> 0.21 GiB allocated, Qwen3-14B's
dimensions, random weights, an H200, bitsandbytes 0.45.5), but bitsandbytes' quantization states stayed in the
segments the load filled and torch kept 13.8 GiB reserved, which the 14B recipe's vLLM counted as used and
found no room for its KV cache (bench/gpu-tests/2026-12-05-0150-qlora-14b-first-attempt.tar.gz). Without the
hook (DISABLE_HOOKS) the load's reservation is counted as staying (QUANT_LOAD_RESERVED). With the hook,
countdown-14b-1x4090 on a physical 24 GiB card: 18.87 GiB against 18.38 planned
(docs/benchmarks/one-card-14b.md). vLLM's sleep level 1 frees its own copy and KV cache (measured there too).
The same measurements: vLLM loaded the 4-bit model with LoRA on in 9.39 GiB ("Model loading took"), the
trainer's loaded in 9.85; the model predicts 9.25 GiB of weights for each.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from entrypoint.recipe import swift_schema

GIB = 1024**3
DATA = Path(__file__).resolve().parents[1] / "data"
# Memory outside torch's allocator (CUDA context, cuBLAS/NCCL workspaces): NVML peak minus torch's max
# reserved was 1.93 GiB in the first benchmark runs on an H200 (git 6942c32) and 1.13-1.16 GiB in the four of
# 2026-12-02 (docs/benchmarks/countdown-throughput.json); the larger is kept, so this errs high.
CUDA_CONTEXT_GIB = 1.9
# The largest model the coefficients were fitted on (Qwen2.5-1.5B, bench/calibration/memory-calibration.json).
# Beyond it the estimate is extrapolated: the colocate calibration is left out and a predicted OOM warns.
CALIBRATED_MAX_PARAMS = 1.6e9
# An extrapolated prediction this far over the card is refused all the same: the fitted planner's largest
# error on measured runs was 12.4 % (docs/gpu-evidence.md), and twice that is allowed for the
# extrapolation. Case C09 (tests/cases.md): a 3B colocate run predicted at 38 GiB on a 24 GiB card.
EXTRAPOLATED_REFUSE_RATIO = 1.25
# The most of a card the planner gives a colocated vLLM: the last 5 % stay for the CUDA context and others.
VLLM_UTILIZATION_CEILING = 0.95
VLLM_NON_KV_GIB = 1.0  # vLLM activations, CUDA graphs, sampler buffers beside weights and KV cache
HEADROOM_WARNING = 0.10
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# Bytes per weight of a linear layer bitsandbytes holds quantized: NF4 packs two 4-bit codes in a byte, and
# double quantization keeps each 64-weight block's absmax as an 8-bit code plus an fp32 scale per 256 blocks,
# about 0.127 bits per weight (bitsandbytes 0.45.5 quantize_4bit, blocksize 64, compress_statistics; vLLM's
# loader the same: loader.py:1113-1117); LLM.int8 a byte per weight (its fp32 row scales are negligible).
QUANT_BYTES = {4: 0.5 + 0.127 / 8, 8: 1.0}
# torch's reserved over allocated after transformers' 4-bit load (layer by layer, the quantization states
# between the weights): 13.918 / 9.391 GiB, Qwen3-14B's dimensions, bitsandbytes 0.45.5 on an H200
# (bench/one-card/2026-12-05-0316-qlora-14b-7b.tar.gz, offload-probe-q14.json). ms-swift's offload leaves all
# of it reserved (13.797 GiB) unless the hook offload_quant_states moves the states too.
QUANT_LOAD_RESERVED = 13.918 / 9.391

# Fitted coefficients (bench/fit_memory.py writes them to data/memory_coefficients.json).
DEFAULT_COEFFICIENTS = {
    "act_hidden": 18.0,  # bytes per token per hidden unit per layer (no gradient checkpointing), / dtype
    "act_inter": 5.0,  # same, per MLP intermediate unit
    "gc_layer_input": 1.0,  # with checkpointing: stored layer inputs, x hidden x dtype per token per layer
    # bytes per completion token per vocabulary entry (bf16 logits, fp32 log-softmax, grad)
    "logit_bytes": 10.0,
    # the same with liger's fused loss: the reference model's bf16 logits / temperature
    "liger_logit_bytes": 4.0,
    "overhead": 1.10,  # allocator fragmentation / caching
    "constant_gib": 0.15,
    # vLLM colocate, card level (data/memory_coefficients.json holds the fitted values; "vLLM side" above),
    # with expandable segments (the planner's choice without sleep mode) ...
    "colocate_logit_bytes": 20.0,  # on the card, per completion token x vocabulary entry
    "colocate_liger_logit_bytes": 8.0,  # the same with liger's fused loss (the reference model's logits)
    "colocate_activation_factor": 1.0,  # activations without checkpointing, against the trainer-side model
    "colocate_constant_gib": 0.5,
    # what the process holds beside the trainer's weights when vLLM's V0 engine starts (CUDA context, cuBLAS
    # workspaces), on top of V0's share ("vLLM side")
    "colocate_v0_before_gib": 1.9,
    # ... and with torch's default allocator (sleep mode, or the recipe's own PYTORCH_CUDA_ALLOC_CONF)
    "colocate_torch_logit_bytes": 20.0,
    "colocate_torch_liger_logit_bytes": 8.0,
    "colocate_torch_activation_factor": 1.0,
    "colocate_torch_constant_gib": 0.5,
    "colocate_sleep_gib": 0.0,
}


@functools.cache
def coefficients() -> dict[str, float]:
    path = DATA / "memory_coefficients.json"
    if path.exists():
        return {**DEFAULT_COEFFICIENTS, **json.loads(path.read_text())["coefficients"]}
    return dict(DEFAULT_COEFFICIENTS)


@dataclasses.dataclass(frozen=True)
class ModelDims:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tie_embeddings: bool = True
    attention_bias: bool = False
    head_dim_override: int | None = None
    max_positions: int | None = None  # max_position_embeddings: vLLM's max_model_len when none is given

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.hidden // self.heads

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelDims:
        """From a transformers config.json (decoder-only models: llama, qwen2, mistral-like; the language
        model of a VL or Omni model: text_config, thinker_config.text_config). Raises KeyError for others."""
        text = config.get("text_config") or (config.get("thinker_config") or {}).get("text_config") or config
        return cls(
            hidden=int(text["hidden_size"]),
            intermediate=int(text["intermediate_size"]),
            layers=int(text["num_hidden_layers"]),
            heads=int(text["num_attention_heads"]),
            kv_heads=int(text.get("num_key_value_heads") or text["num_attention_heads"]),
            vocab=int(text["vocab_size"]),
            tie_embeddings=bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
            attention_bias=bool(text.get("attention_bias", text.get("model_type") == "qwen2")),
            head_dim_override=text.get("head_dim"),
            max_positions=text.get("max_position_embeddings"),
        )

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of every linear layer in one decoder block (attention + SwiGLU MLP)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        h, i = self.hidden, self.intermediate
        return [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]

    @property
    def params(self) -> int:
        per_layer = sum(a * b for a, b in self.linear_shapes()) + 2 * self.hidden
        if self.attention_bias:
            per_layer += self.heads * self.head_dim + 2 * self.kv_heads * self.head_dim
        embed = self.vocab * self.hidden * (1 if self.tie_embeddings else 2)
        return self.layers * per_layer + embed + self.hidden

    @property
    def linear_params(self) -> int:
        """Weights of the decoder's linear layers (attention and MLP): what bitsandbytes quantizes; the
        embeddings, lm_head, norms and biases stay in the model's dtype."""
        return self.layers * sum(a * b for a, b in self.linear_shapes())

    def weight_bytes(self, dtype_bytes: int, quant_bits: int = 0) -> tuple[float, float]:
        """(all, quantized) bytes of one copy of the weights: everything in `dtype_bytes`, or with
        `quant_bits` the linear layers in QUANT_BYTES and the rest in `dtype_bytes`."""
        if not quant_bits:
            return float(self.params * dtype_bytes), 0.0
        quantized = self.linear_params * QUANT_BYTES[quant_bits]
        return (self.params - self.linear_params) * dtype_bytes + quantized, quantized

    def lora_params(self, rank: int) -> int:
        """Trainable parameters of LoRA on all linear layers (TARGET_MODULES=all-linear)."""
        return self.layers * sum(rank * (a + b) for a, b in self.linear_shapes())

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * dtype_bytes


class _TextConfig(TypedDict, total=False):
    """The fields of a transformers config.json the planner reads (ModelDims.from_config, plan._engine's
    max_model_len, preflight's architectures), with the JSON types transformers writes."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None
    vocab_size: int
    tie_word_embeddings: bool
    attention_bias: bool
    head_dim: int | None
    max_position_embeddings: int | None
    model_type: str
    architectures: list[str] | None


class _Thinker(TypedDict, total=False):
    text_config: _TextConfig | None


class ModelConfig(_TextConfig, total=False):
    """A config.json as the planner reads it: the text model's fields at the top, or under text_config (VL
    models) or thinker_config.text_config (Omni)."""

    text_config: _TextConfig | None
    thinker_config: _Thinker | None


_MODEL_CONFIG = TypeAdapter(ModelConfig)


def config_problem(config: Any) -> str:
    """Why a config.json's content cannot be read by the planner ('' when it can), a phrase to follow its
    path: not an object, or a field the planner reads of another type ("has hidden_size = "896" (a number
    expected)"). Strict: a number written as text is refused, as transformers would write a number."""
    try:
        _MODEL_CONFIG.validate_python(config, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        where, value = [], config
        for part in err["loc"]:  # the path in the file (a union's member names are pydantic's, not keys)
            if isinstance(value, dict) and part in value or isinstance(value, list) and isinstance(part, int):
                where, value = [*where, str(part)], value[part]
        said = f"{json.dumps(value)[:60]} ({err['msg'][0].lower()}{err['msg'][1:]})"
        return f"has {'.'.join(where)} = {said}" if where else f"is {said}"
    return ""


def shipped_config(model: str) -> dict | None:
    """config.json fields of a known hub model (entrypoint/data/model_configs.json: the recipes' models and
    the ones this audience trains with GRPO), for planning without the model on disk; found by the exact id,
    else by ms-swift's model name (swift_schema.model_name: a ModelScope id finds its Hugging Face row). None
    for other models."""
    table = shipped_configs()
    if model in table:
        return table[model]
    name = swift_schema.model_name(model) if model else ""
    return next((v for k, v in table.items() if swift_schema.model_name(k) == name), None) if name else None


@functools.cache
def shipped_configs() -> dict[str, dict]:
    """The table of entrypoint/data/model_configs.json, by hub id (its `_comment` left out)."""
    return {
        k: v for k, v in json.loads((DATA / "model_configs.json").read_text()).items() if isinstance(v, dict)
    }


@dataclasses.dataclass(frozen=True)
class Workload:
    """What the planner needs of a run, per training process."""

    dims: ModelDims
    dtype_bytes: int
    full: bool  # TRAIN_TYPE=full
    lora_rank: int
    per_device: int  # completions per micro-batch
    generation_per_device: int  # completions generated per round on this process
    prompt_tokens: int
    completion_tokens: int
    gradient_checkpointing: bool = True
    reference_copy: bool = False  # full fine-tuning with BETA > 0 loads a reference model
    zero_stage: int = 0
    world: int = 1  # processes a ZeRO stage shards over
    hf_generation: bool = True  # generation inside the trainer (USE_VLLM=false)
    offload_optimizer: bool = False  # zero2_offload / zero3_offload: optimizer states in CPU memory
    offload_params: bool = False  # zero3_offload: parameters in CPU memory, gathered layer by layer
    vllm_tp: int = 1  # colocated vLLM's tensor parallel size (VLLM_TENSOR_PARALLEL_SIZE)
    liger: bool = False  # USE_LIGER_KERNEL: ms-swift's GRPO loss through liger's fused linear + loss
    quant_bits: int = 0  # QUANT_METHOD=bnb: 4 (QLoRA) or 8 bits for the linear weights; 0 not quantized
    # OFFLOAD_MODEL leaves the 4-bit load's segments reserved on the GPU: DISABLE_HOOKS=offload_quant_states
    quantized_stay: bool = False

    def vllm_weights_gib(self, tensor_parallel: int = 1) -> float:
        """vLLM's copy of the weights on one GPU (1/tensor_parallel of them): bitsandbytes 4-bit with QLoRA
        (the plan refuses vLLM with 8 bits), else the model's dtype."""
        return (
            self.dims.weight_bytes(self.dtype_bytes, 4 if self.quant_bits else 0)[0]
            / GIB
            / max(1, tensor_parallel)
        )


@dataclasses.dataclass(frozen=True)
class TrainingEstimate:
    weights: float
    optimizer: float
    activations: float
    logits: float
    kv_cache: float
    resident: float  # held between phases (weights, reference, optimizer states)
    peak: float  # torch max reserved, GiB
    logit_entries: float = 0.0  # completion tokens x vocabulary of one micro-batch, in units of 2**30
    checkpointed: bool = True  # gradient checkpointing: `activations` are the stored layer inputs
    pinned: float = 0.0  # of `weights`, what OFFLOAD_MODEL leaves on the GPU (Workload.quantized_stay)

    def components(self) -> dict[str, float]:
        return {k: round(v, 2) for k, v in dataclasses.asdict(self).items()}


def estimate_training(w: Workload, coef: Mapping[str, float] | None = None) -> TrainingEstimate:
    """Predicted training-side memory of one training process, in GiB."""
    c = coef or coefficients()
    d = w.dtype_bytes
    p = w.dims.params
    world = max(1, w.world)
    one, _quantized = w.dims.weight_bytes(d, w.quant_bits)
    weights = one * (2 if w.reference_copy else 1)
    if w.zero_stage >= 3:
        # ZeRO-3 keeps 1/world of the parameters on each GPU and gathers a layer at a time for compute
        # (DeepSpeed ZeRO docs, "ZeRO Stage 3"); zero3_offload keeps them in CPU memory
        layer = (p - w.dims.vocab * w.dims.hidden) / max(1, w.dims.layers) * d
        weights = (0.0 if w.offload_params else weights / world) + 2 * layer
    if w.full:
        if (
            w.offload_optimizer
        ):  # fp32 master weights and AdamW states in CPU memory; the grads' partition stays
            grads_states = d * p / world
            states = 0.0
        elif w.zero_stage >= 2:
            grads_states = (12 + d) * p / world  # fp32 master + 2 fp32 states + grads, sharded
            states = 12 * p / world
        else:
            grads_states = 3 * d * p  # grads + two AdamW states in the parameter dtype
            states = 2 * d * p
    else:
        lora = w.dims.lora_params(w.lora_rank)
        grads_states = lora * (d + 8 + 4)  # grads, fp32 states and master weights: small either way
        states = lora * 12
    tokens = w.per_device * (w.prompt_tokens + w.completion_tokens)
    h, i, layers = w.dims.hidden, w.dims.intermediate, w.dims.layers
    one_layer = tokens * (c["act_hidden"] * h + c["act_inter"] * i) * d / 2
    if w.gradient_checkpointing:
        activations = layers * tokens * h * d * c["gc_layer_input"] + one_layer
    else:
        activations = layers * one_layer
    # liger's fused loss never holds the micro-batch's logits (it runs lm_head and the loss a chunk at a time,
    # liger_kernel/chunked_loss); with BETA > 0 ms-swift still computes the reference log-probs from full
    # logits, without gradients, in the same training step (v3.6.4 grpo_trainer.py:1344-1360)
    logit_bytes = c["liger_logit_bytes"] if w.liger else c["logit_bytes"]
    logits = w.per_device * w.completion_tokens * w.dims.vocab * logit_bytes
    train = weights + grads_states + activations + logits
    kv = 0.0
    if w.hf_generation:
        kv = w.generation_per_device * (w.prompt_tokens + w.completion_tokens) * w.dims.kv_bytes_per_token(d)
    generation = weights + states + kv + w.generation_per_device * w.dims.vocab * 4 * 2
    peak = c["overhead"] * max(train, generation) / GIB + c["constant_gib"]
    return TrainingEstimate(
        weights=weights / GIB,
        optimizer=grads_states / GIB,
        activations=activations / GIB,
        logits=logits / GIB,
        kv_cache=kv / GIB,
        resident=(weights + states) / GIB,
        peak=peak,
        logit_entries=w.per_device * w.completion_tokens * w.dims.vocab / GIB,
        checkpointed=w.gradient_checkpointing,
        pinned=one * QUANT_LOAD_RESERVED / GIB if w.quant_bits and w.quantized_stay else 0.0,
    )


@dataclasses.dataclass(frozen=True)
class Colocate:
    """vLLM colocated on a training GPU, as the planner sees it."""

    utilization: float  # VLLM_GPU_MEMORY_UTILIZATION
    sleep_level: int  # SLEEP_LEVEL
    max_model_len: int  # tokens of the longest sequence vLLM must be able to hold
    round_tokens: int  # tokens this process generates in one round: its sequences x (prompt + completion)
    expandable: bool = False  # the trainer's allocator grows expandable segments (budget.allocator)
    liger: bool = False  # USE_LIGER_KERNEL (the trainer's logits)
    engine_v0: bool = False  # vLLM's V0 engine: VLLM_USE_V1=0 or VLLM_SCHEDULER_STEPS > 1
    offload_model: bool = False  # OFFLOAD_MODEL: the trainer's weights leave the GPU while vLLM generates
    # the trainer leaves before vLLM's weights wake (hooks/offload_before_wake.py); ms-swift's own order
    # (DISABLE_HOOKS=offload_before_wake) wakes them first, both copies on the card at once
    trainer_leaves_first: bool = True


def offload_phases(
    train: TrainingEstimate, card_gib: float, v: Colocate, coef=None
) -> dict[str, dict[str, float]]:
    """The two phases of a colocated card whose trainer is offloaded around each generation (OFFLOAD_MODEL /
    OFFLOAD_OPTIMIZER), by part: {"generation": ..., "training": ...}. The card's peak is the larger phase's
    sum, not the sum of both: the trainer leaves the GPU before vLLM's weights wake
    (entrypoint/child/hooks/offload_before_wake.py) and vLLM sleeps before the trainer comes back.

    generation: vLLM's share (V1 counts the process's context inside it; V0 sizes only itself, so the
    context comes on top), plus the trainer's weights when only the optimizer is offloaded.
    training: the trainer's weights, optimizer, activations and logits on torch's allocator (sleep mode
    refuses expandable segments) with that allocator's fitted colocate coefficients: bytes per logit entry
    and the constant (context, sleeping vLLM's pools, fragmentation), plus vLLM's whole share when it does not
    sleep. Checked on a physical 24 GiB card: Qwen2.5-7B at micro-batch 4, 3 steps, NVML 15.99 GiB between
    phases and a 23.80 GiB peak against 22.8 from this model (bench/one-card/, 2026-12-03 22:50)."""
    c = coef or coefficients()
    share = v.utilization * card_gib
    generation = {"vLLM": share}
    if v.engine_v0:
        generation["context"] = CUDA_CONTEXT_GIB
    if not v.offload_model:
        generation["weights (not offloaded)"] = train.weights
    else:
        if v.engine_v0 and train.pinned:  # V1 counts them inside its share (they were there when it started)
            generation["trainer's 4-bit weights (stay on the GPU)"] = train.pinned
        if not v.trainer_leaves_first:
            generation["trainer's weights (vLLM wakes before they leave)"] = train.weights - train.pinned
    logits = (
        train.logit_entries
        * c["colocate_torch_liger_logit_bytes" if v.liger else "colocate_torch_logit_bytes"]
    )
    activations = train.activations * (1.0 if train.checkpointed else c["colocate_torch_activation_factor"])
    training = {
        "weights": train.weights,
        "optimizer": train.optimizer,
        "activations": activations,
        "logits": logits,
        ("context, vLLM asleep, allocator" if v.sleep_level else "context, allocator"): c[
            "colocate_torch_constant_gib"
        ],
    }
    if v.sleep_level == 0:
        training["vLLM (awake)"] = share
    return {"generation": generation, "training": training}


def largest_one_copy_params(w: Workload, card_gib: float, v: Colocate, coef=None) -> float:
    """Parameters (billions) of the largest model of this workload's kind whose offloaded phases both leave
    HEADROOM_WARNING of a `card_gib` card free at micro-batch 1 (offload_phases; the rest of the workload,
    vocabulary, lengths and QUANT_BITS included, as given): what a card can train with one weight copy at a
    time. Training bounds it by the trainer's weights beside its step; generation by vLLM's weights (and what
    the trainer's offload leaves, TrainingEstimate.pinned) beside its context, non-KV memory and one
    max_model_len sequence at the planner's largest share. A model "of this kind" has this one's bytes per
    parameter in each copy."""
    one = dataclasses.replace(w, per_device=1)
    train = estimate_training(one, coef)
    training = offload_phases(train, card_gib, v, coef)["training"]
    beside = sum(training.values()) - training["weights"] - (training.get("vLLM (awake)") or 0.0)
    room_training = (
        (1 - HEADROOM_WARNING) * card_gib - beside - (v.utilization * card_gib if v.sleep_level == 0 else 0)
    )
    kv = kv_gib(w.dims, w.dtype_bytes, v.max_model_len, w.vllm_tp)
    room_generation = VLLM_UTILIZATION_CEILING * card_gib - CUDA_CONTEXT_GIB - VLLM_NON_KV_GIB - kv
    params = w.dims.params / 1e9
    per_training = train.weights / params  # GiB per billion parameters in each phase
    per_generation = (w.vllm_weights_gib(w.vllm_tp) + train.pinned) / params
    return max(0.0, min(room_training / per_training, room_generation / per_generation))


# RAM the trainer's process holds beside what it offloads (the interpreter, torch's and CUDA's host libraries,
# ms-swift, vLLM's engine, tokenizer and dataset): an estimate, not measured on a GPU run (on the CPU the
# smoke run's trainer holds about 7 GB with its 135M model in it: README, "Try it")
HOST_PROCESS_GIB = 6.0


def host_ram(
    train: TrainingEstimate, w: Workload, offload_model: bool, offload_optimizer: bool, sleep_level: int
) -> dict[str, float]:
    """GiB of RAM one colocated training process needs for what waits in CPU memory, by part ({} when nothing
    does): the trainer's weights while vLLM generates (OFFLOAD_MODEL, less what stays on the GPU:
    TrainingEstimate.pinned), its optimizer states (OFFLOAD_OPTIMIZER), vLLM's weights while it sleeps at
    level 1 (level 2 discards them), and the process around them. Both copies are counted: vLLM's CPU copy is
    freed only when it wakes, after the trainer's left (hooks/offload_before_wake.py), and the trainer's comes
    back after vLLM sleeps."""
    parts = {}
    if offload_model:  # the data moves even where torch keeps its segments reserved (pinned)
        parts["trainer's weights (offloaded)"] = train.weights
    if offload_optimizer:
        parts["optimizer states (offloaded)"] = train.resident - train.weights
    if sleep_level == 1:
        parts["vLLM's weights (asleep)"] = w.vllm_weights_gib(w.vllm_tp)
    if parts:
        parts["the process"] = HOST_PROCESS_GIB
    return parts


def colocate_peak(
    train: TrainingEstimate, card_gib: float, v: Colocate, coef=None, calibrated: bool = True
) -> dict[str, float]:
    """Card-level peak (GiB, what NVML sees) of a training GPU with vLLM colocated, by part ("vLLM side"
    above): {"vLLM": its share of the card, "training": what a step adds, fragmentation included, "graphs,
    sampler": vLLM beyond its budget [+ sleep-mode pools]}; their sum is the peak."""
    c = coef or coefficients()
    share = v.utilization * card_gib
    # V0 sizes only its own instance: what the process held when it started comes on top of its share
    context = c["colocate_v0_before_gib"] if calibrated else CUDA_CONTEXT_GIB
    before = {"context and weights before vLLM (V0)": context + train.weights} if v.engine_v0 else {}
    if not calibrated:  # a model larger than any measured one: no fitted terms
        return {"vLLM": share, **before, "training": train.peak - train.weights, "graphs, sampler": 0.0}
    # the allocator's own coefficients; sleep mode runs on torch's (its pool refuses expandable segments)
    k = "colocate_" if v.expandable and v.sleep_level == 0 else "colocate_torch_"
    logits = train.logit_entries * c[f"{k}liger_logit_bytes" if v.liger else f"{k}logit_bytes"]
    activations = train.activations * (1.0 if train.checkpointed else c[f"{k}activation_factor"])
    return {
        "vLLM": share,
        **before,
        "training": train.optimizer + activations + logits,
        "graphs, sampler": c[f"{k}constant_gib"] + (c["colocate_sleep_gib"] if v.sleep_level >= 1 else 0.0),
    }


def kv_budget(
    w: Workload,
    card_gib: float,
    utilization: float,
    resident_gib: float,
    tensor_parallel: int = 1,
    engine_v0: bool = False,
) -> float:
    """GiB left for vLLM's KV cache on a colocated card: vLLM's V1 engine counts everything the process
    already holds (CUDA context, the trainer's weights on the GPU: `resident_gib`) against utilization x card,
    then its own weights (Workload.vllm_weights_gib: 1/tensor_parallel of them per GPU, 4-bit with QLoRA) and
    activation peak (vllm 0.8.5.post1 v1/worker/gpu_worker.py:170-215). The V0 engine (`engine_v0`) counts
    only what it allocates itself from a snapshot taken when it starts (worker/worker.py:162-181, 225-264,
    utils.memory_profiling): its weights and activation peak, not the trainer's."""
    already = 0.0 if engine_v0 else CUDA_CONTEXT_GIB + resident_gib
    return utilization * card_gib - already - w.vllm_weights_gib(tensor_parallel) - VLLM_NON_KV_GIB


def rollout_share_with_headroom(card_gib: float) -> float:
    """The largest vLLM share of a dedicated rollout GPU (two decimals, at most ms-swift's default 0.9) that
    leaves HEADROOM_WARNING of the card free beside the CUDA context: vLLM takes utilization x card up front,
    so a display or another process on a fuller card makes it refuse to start. 0.82 on a 24 GiB card."""
    return max(
        0.1, min(0.9, math.floor((1 - HEADROOM_WARNING - CUDA_CONTEXT_GIB / card_gib) * 100 + 1e-9) / 100)
    )


def kv_gib(dims: ModelDims, dtype_bytes: int, tokens: int, tensor_parallel: int = 1) -> float:
    """GiB of KV cache for `tokens` tokens on one GPU: tensor parallelism splits the KV heads (a head is
    replicated when there are fewer heads than GPUs)."""
    share = max(1, dims.kv_heads // max(1, tensor_parallel)) / dims.kv_heads
    return tokens * dims.kv_bytes_per_token(dtype_bytes) * share / GIB


def estimate_prompt_tokens(rows: list[dict]) -> int:
    """Rough token count of the longest prompt: ~3.5 ASCII characters per token, one per other
    character (CJK), plus 8 template tokens per message. Errs high, as a planner should."""
    longest = 0
    for row in rows:
        if not isinstance(row, dict):
            continue
        messages = row.get("messages") or [{"content": str(row.get("query") or row.get("prompt") or "")}]
        total = 0
        for m in messages if isinstance(messages, list) else [messages]:
            text = str(m.get("content", "")) if isinstance(m, dict) else str(m)
            ascii_chars = sum(1 for ch in text if ord(ch) < 128)
            total += int(ascii_chars / 3.5) + (len(text) - ascii_chars) + 8
        longest = max(longest, total)
    return longest


@dataclasses.dataclass(frozen=True)
class GpuEstimate:
    gpu: int
    role: str  # "trainer", "trainer + vLLM (colocate)", "rollout (vLLM)"
    card_gib: float
    peak_gib: float
    parts: dict[str, float]

    @property
    def headroom(self) -> float:
        """The share of the card left free, to 1e-9: a share of 0.90 leaves exactly 10 %, not 9.99999 %."""
        return round((self.card_gib - self.peak_gib) / self.card_gib, 9)

    def render(self) -> str:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in self.parts.items() if abs(v) >= 0.05)
        return (
            f"GPU {self.gpu} {self.role}: {self.peak_gib:.1f} of {self.card_gib:.1f} GiB "
            f"({self.headroom:+.0%} headroom) [{parts}]"
        )
