"""GRPO_RIG_ADAPTER_SYNC=R (R: the run's LoRA rank; the plan sets it for a colocated LoRA run with
SLEEP_LEVEL=1 and OFFLOAD_MODEL, and for every colocated QLoRA run, entrypoint/plan/build.py): the colocated
vLLM engine keeps the base weights it loaded once, and before each generation it is given only the trained
LoRA adapter, as a LoRARequest.

ms-swift 3.6.4's GRPOTrainer._move_model_to_vllm (swift/trainers/rlhf_trainer/grpo_trainer.py:491-552)
merges the adapter into the base weights and copies every merged tensor into vLLM each step. With the
trainer offloaded (one weight copy on the GPU at a time, hooks/offload_before_wake.py) that merge runs on
the CPU: 24-26 s of a 30 s step for Qwen2.5-7B. Here the step writes the adapter (PEFT's files, 40 MB for
a rank-8 7B adapter, 0.2-0.3 s) and vLLM loads it with the next generation; its LoRA kernels cost about
14 % of the generation (bench/one-card/, the vLLM LoRA probe). The engine is built with vLLM's LoRA
support on (GRPOVllmEngine's enable_lora, max_lora_rank); the generation passes the adapter through
ms-swift's own AdapterRequest (VllmEngine._add_request).

Only where the base weights vLLM holds stay the base model's: sleep level 0 or 1 (level 2 discards them,
and ms-swift's merge is what brings them back), LoRA training, a colocated engine. vLLM 0.8.5's V0
multi-step runner refuses LoRA (worker/multi_step_model_runner.py:285-287): the plan gives this path
vLLM's V1 engine.

GRPO_RIG_ADAPTER_SYNC=R:bitsandbytes (QLoRA: the trainer's base is bitsandbytes 4-bit, QUANT_METHOD=bnb
QUANT_BITS=4): the engine loads the same base in 4-bit too, with vLLM's own bitsandbytes quantization of the
checkpoint as it loads (vllm 0.8.5 model_loader/loader.py BitsAndBytesModelLoader: quantization and
load_format "bitsandbytes"), and serves the adapter on it. ms-swift 3.6.4 has no 4-bit rollout: its merge
would write the trainer's packed 4-bit tensors into vLLM's bf16 weights. Only the adapter crosses, so the
two 4-bit copies never need a merge (TRL's merge into 4-bit weights changed generations: trl#3466).
"""

from __future__ import annotations

import atexit
import functools
import importlib
import shutil
import tempfile
from pathlib import Path

from entrypoint.child import runtime
from entrypoint.child.hooks.base import After, Hook, Target

ENGINE = "swift.llm.infer.infer_engine.grpo_vllm_engine"
GRPO_TRAINER = "swift.trainers.rlhf_trainer.grpo_trainer"
# vLLM 0.8.5's LoRAConfig accepts only these ranks (vllm/config.py:2677)
VLLM_MAX_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def vllm_max_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM 0.8.5 accepts that holds a LoRA of rank `rank`; ValueError past 512."""
    for r in VLLM_MAX_RANKS:
        if rank <= r:
            return r
    raise ValueError(f"vLLM 0.8.5 serves LoRA ranks up to {VLLM_MAX_RANKS[-1]}, not {rank}")


def write_adapter(model, directory: Path) -> int:
    """Write the PEFT model's active adapter as PEFT saves it (adapter_model.safetensors, adapter_config.json:
    what vLLM's LoRAModel.from_local_checkpoint reads) into `directory`; returns the tensors' bytes. Works
    with the model on the CPU (offloaded) or a GPU."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    state = get_peft_model_state_dict(model)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    model.peft_config[model.active_adapter].save_pretrained(str(directory))
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _request_types():
    """(ms-swift's AdapterRequest, vLLM's LoRARequest): imported in the trainer when the first adapter is
    written (by name: the plan imports this module, and the plan's layers never import ms-swift)."""
    from vllm.lora.request import LoRARequest

    return importlib.import_module("swift.llm.infer.infer_engine.utils").AdapterRequest, LoRARequest


def _applies(trainer) -> bool:
    from accelerate.utils import is_peft_model

    return trainer.vllm_mode == "colocate" and trainer.args.sleep_level <= 1 and is_peft_model(trainer.model)


QUANTIZED = "bitsandbytes"  # the one quantized base this path serves (vLLM's name for it)


def parse(value: str) -> tuple[int, str] | None:
    """(LoRA rank, "" or QUANTIZED) from the variable's value "R" or "R:bitsandbytes"; None when off."""
    rank, _, quantized = value.partition(":")
    if not rank.isdigit() or int(rank) < 1 or quantized not in ("", QUANTIZED):
        return None
    return int(rank), quantized


def _engine_with_lora(grpo_vllm_engine, rank: int, quantized: str = "") -> None:
    cls = runtime.need(grpo_vllm_engine, "GRPOVllmEngine", ENGINE)
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=vllm_max_rank(rank))
        if quantized:  # the base in 4-bit as the trainer holds it, quantized by vLLM as it loads
            kwargs["quantization"] = quantized
            kwargs["engine_kwargs"] = {**(kwargs.get("engine_kwargs") or {}), "load_format": quantized}
        original(self, *args, **kwargs)

    cls.__init__ = __init__


def _sync_adapter_only(grpo_trainer) -> None:
    trainer_cls = runtime.need(grpo_trainer, "GRPOTrainer", GRPO_TRAINER)
    push = runtime.need(trainer_cls, "_move_model_to_vllm", f"{GRPO_TRAINER}.GRPOTrainer")
    engine_infer = runtime.need(trainer_cls, "_engine_infer", f"{GRPO_TRAINER}.GRPOTrainer")
    profiling_context = runtime.need(grpo_trainer, "profiling_context", GRPO_TRAINER)
    root = Path(
        tempfile.mkdtemp(prefix="grpo-rig-adapter-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
    )
    atexit.register(shutil.rmtree, root, True)

    def _move_model_to_vllm(self, skip_async_check=False):
        if not _applies(self):
            return push(self, skip_async_check)
        AdapterRequest, LoRARequest = _request_types()
        number = getattr(self, "_grpo_rig_adapters", 0) + 1
        self._grpo_rig_adapters = number
        directory = root / f"step-{self.state.global_step}-{number}"
        write_adapter(self.accelerator.unwrap_model(self.model), directory)
        previous = getattr(self, "_grpo_rig_adapter", None)
        if previous is not None:  # vLLM loaded it at its generation; it is never asked for again
            self.engine._adapters_pool.pop(previous.name, None)
            shutil.rmtree(previous.path, ignore_errors=True)
        name = directory.name
        self._grpo_rig_lora_request = LoRARequest(
            lora_name=name, lora_int_id=number, lora_path=str(directory)
        )
        self.engine._adapters_pool[name] = self._grpo_rig_lora_request  # ms-swift's _add_request reuses it
        # the adapter has no tokenizer of its own: vLLM would look for one in its folder at every new adapter
        # and warn (transformers_utils/tokenizer_group.py:69-81); it is the base model's
        group = getattr(self.engine.engine, "tokenizer", None)
        if hasattr(group, "lora_tokenizers"):
            group.lora_tokenizers.put(number, group.tokenizer)
        self._grpo_rig_adapter = AdapterRequest(name, str(directory))
        self.engine.engine.reset_prefix_cache()

    def _engine_infer(self, infer_requests, request_config=None, *, use_tqdm=False):
        adapter = getattr(self, "_grpo_rig_adapter", None)
        if self.vllm_mode != "colocate" or adapter is None:
            return engine_infer(self, infer_requests, request_config, use_tqdm=use_tqdm)
        with profiling_context(self, "generate"):
            return self.engine.infer(
                infer_requests, request_config, use_tqdm=use_tqdm, adapter_request=adapter
            )

    _move_model_to_vllm.__wrapped__ = push
    _engine_infer.__wrapped__ = engine_infer
    trainer_cls._move_model_to_vllm = _move_model_to_vllm
    trainer_cls._engine_infer = _engine_infer
    runtime.say("vLLM keeps its base weights; each step it gets only the trained LoRA adapter")


def install(value: str, after: After) -> None:
    """On with the LoRA rank (a whole number >= 1), ":bitsandbytes" after it for a 4-bit base (parse);
    anything else leaves ms-swift's merged-weight sync."""
    parsed = parse(value)
    if parsed is not None:
        rank, quantized = parsed
        after.patch(ENGINE, lambda engine: _engine_with_lora(engine, rank, quantized))
        after.patch(GRPO_TRAINER, _sync_adapter_only)


HOOK = Hook(
    name="adapter_sync",
    variable="GRPO_RIG_ADAPTER_SYNC",
    targets=(
        # replaced for a colocated LoRA run: the merge of the adapter and the copy of every merged tensor
        Target(GRPO_TRAINER, "GRPOTrainer._move_model_to_vllm", "dce3819a920054cb"),
        # replaced: the colocated generation, now with the adapter's request
        Target(GRPO_TRAINER, "GRPOTrainer._engine_infer", "d60da8d8272500c1"),
        # builds the engine with keyword arguments: enable_lora, max_loras and max_lora_rank are added
        Target(GRPO_TRAINER, "GRPOTrainer.prepare_vllm", "62ee11a2af9769af"),
        Target(ENGINE, "GRPOVllmEngine.__init__", "a4645110c930542f"),
        # how an AdapterRequest becomes vLLM's LoRARequest, through the pool this hook fills
        Target("swift.llm.infer.infer_engine.vllm_engine", "VllmEngine._add_request", "244bbcc16a9a45a0"),
    ),
    upstream=("ms-swift==3.6.4", "vllm==0.8.5.post1", "peft==0.15.2"),
    why="ms-swift merges the LoRA adapter into the base weights and copies all of them into the colocated "
    "vLLM engine every step; with the trainer offloaded (one weight copy on the GPU) that merge runs on the "
    "CPU, 24-26 s of a 30 s step for Qwen2.5-7B. vLLM can serve the adapter itself on the base weights it "
    "loaded once.",
    saves="the merge and the full copy each step: on a physical 24 GiB card, Qwen2.5-7B's sync took 0.15 s "
    "against 22-26 s and its step 14.3 s against 32 s (docs/benchmarks/one-card-7b.md); vLLM's LoRA kernels "
    "cost about 14 % of a generation (bench/one-card/, the vLLM LoRA probe)",
    delete_when="when ms-swift's colocated GRPO syncs only the adapter itself (ms-swift 3.10 added "
    "--vllm_enable_lora for this); then pass that flag instead",
    install=install,
)
