"""GRPO_RIG_OFFLOAD_QUANT_STATES=1 (the plan sets it for a colocated QLoRA run with OFFLOAD_MODEL): ms-swift's
offload of the trainer's model also moves bitsandbytes' quantization states and the model's buffers to the
CPU, and its load brings them back, so the 4-bit weights really leave the card while vLLM starts and
generates.

ms-swift 3.6.4's GRPOTrainer.offload_model (swift/trainers/rlhf_trainer/grpo_trainer.py:1457-1460) moves each
parameter's `.data` to the CPU, and load_model (:1462-1466) brings it back. A bitsandbytes 4-bit weight
(Params4bit) is a parameter of packed uint8 codes, but its QuantState (each 64-weight block's absmax, the
double quantization's codes and scales: bitsandbytes 0.45.5 functional.py QuantState) is not a parameter and
stays. Those absmax tensors (0.21 GiB for Qwen3-14B) were allocated between the weights as the model was
quantized layer by layer, so each of torch's segments keeps one and empty_cache returns none: after the
offload 0.21 GiB was allocated and 13.8 GiB still reserved, and vLLM, which counts a process's reserved
memory as used (vllm 0.8.5.post1 v1/worker/gpu_worker.py:190-208), found no room for its KV cache at
start-up. QuantState.to (bitsandbytes' own) moves a state in place, so the weight and its Linear4bit module,
which share it, both see it move.
"""

from __future__ import annotations

from entrypoint.child import runtime
from entrypoint.child.hooks.base import After, Hook, Target

GRPO_TRAINER = "swift.trainers.rlhf_trainer.grpo_trainer"


def move_quant_states(model, device) -> int:
    """Move every bitsandbytes QuantState of `model`'s parameters and every buffer of `model` to `device`
    (a torch.device or its name), in place; returns how many tensors' owners were moved (states + buffers).
    The parameters themselves are ms-swift's to move (offload_model / load_model)."""
    seen: set[int] = set()
    moved = 0
    for param in model.parameters():
        state = getattr(param, "quant_state", None)
        if state is not None and id(state) not in seen:
            seen.add(id(state))
            state.to(device)
            moved += 1
    for module in model.modules():  # as nn.Module.to replaces them (module._apply)
        for name, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[name] = buffer.to(device)
                moved += 1
    return moved


def _with_states(grpo_trainer) -> None:
    trainer_cls = runtime.need(grpo_trainer, "GRPOTrainer", GRPO_TRAINER)
    offload = runtime.need(trainer_cls, "offload_model", f"{GRPO_TRAINER}.GRPOTrainer")
    load = runtime.need(trainer_cls, "load_model", f"{GRPO_TRAINER}.GRPOTrainer")
    torch = runtime.need(grpo_trainer, "torch", GRPO_TRAINER)
    device_of = runtime.need(grpo_trainer, "get_current_device", GRPO_TRAINER)

    def offload_model(self, model):
        offload(self, model)
        with torch.no_grad():
            move_quant_states(model, torch.device("cpu"))

    def load_model(self, model):
        with torch.no_grad():
            move_quant_states(model, device_of())
        load(self, model)

    offload_model.__wrapped__ = offload
    load_model.__wrapped__ = load
    trainer_cls.offload_model = offload_model
    trainer_cls.load_model = load_model
    runtime.say("the trainer's offload moves bitsandbytes' quantization states and buffers too")


def install(value: str, after: After) -> None:
    """On with "1" (the plan sets it for a colocated QLoRA run with OFFLOAD_MODEL)."""
    if value == "1":
        after.patch(GRPO_TRAINER, _with_states)


HOOK = Hook(
    name="offload_quant_states",
    variable="GRPO_RIG_OFFLOAD_QUANT_STATES",
    targets=(
        # extended: each moves the parameters' data only
        Target(GRPO_TRAINER, "GRPOTrainer.offload_model", "655af9cc72699ca6"),
        Target(GRPO_TRAINER, "GRPOTrainer.load_model", "2306a85345e3b1a2"),
        # what moves the states, in place: absmax, code, and the nested state's
        Target("bitsandbytes.functional", "QuantState.to", "fb01019a41662538"),
    ),
    upstream=("ms-swift==3.6.4", "bitsandbytes==0.45.5", "vllm==0.8.5.post1"),
    why="ms-swift's offload_model moves each parameter's data but not bitsandbytes' quantization states, "
    "which pin the segments the 4-bit load filled: after the offload of a 4-bit Qwen3-14B torch kept "
    "13.8 GiB reserved for 0.21 GiB allocated, and the colocated vLLM, counting that as used, found no room "
    "for its KV cache (bench/gpu-tests/2026-12-05-0150-qlora-14b-first-attempt.tar.gz)",
    saves="the trainer's whole 4-bit copy while vLLM starts and generates: for Qwen3-14B 13.80 GiB reserved "
    "after ms-swift's offload, 0.002 with the hook (bench/qlora_offload_probe.py); with it "
    "countdown-14b-1x4090 completed 10 steps on a physical 24 GiB card at 18.87 GiB "
    "(docs/benchmarks/one-card-14b.md)",
    delete_when="when ms-swift's offload_model moves bitsandbytes' quantization states with the weights "
    "(3.6.4 moves parameters only; its QLoRA GRPO support arrived in 4.1)",
    install=install,
)
