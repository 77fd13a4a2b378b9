"""GRPO_RIG_OFFLOAD_BEFORE_WAKE=1: with vLLM colocated, sleep mode and OFFLOAD_MODEL, the trainer's weights
leave the GPU before vLLM's weights come back, so one copy of the weights is on the GPU at a time.

ms-swift 3.6.4's GRPOTrainer._fast_infer (swift/trainers/rlhf_trainer/grpo_trainer.py:799-851) wakes vLLM's
weights and loads the merged LoRA weights into them, and only then enters offload_context, which moves the
trainer's model and optimizer to the CPU for the generation. Between the two, both bf16 copies are on the
GPU: 28.4 GiB for Qwen2.5-7B, which no 24 GiB card holds. Here the order is: offload the trainer, wake
vLLM's weights, load the merged weights (the adapter is merged into the base on the CPU, and vLLM's weight
loaders copy each tensor to the GPU), wake the KV cache, generate, sleep, bring the trainer back.
Everything else is ms-swift's own code (the merge, the sync, the offload and the sleep are its methods).
"""

from __future__ import annotations

from entrypoint.child import runtime
from entrypoint.child.hooks.base import After, Hook, Target

GRPO_TRAINER = "swift.trainers.rlhf_trainer.grpo_trainer"


def _applies(trainer) -> bool:
    """ms-swift's order is kept where it is not the two-copies one: server mode, no sleep, no model offload,
    async generation (whose queue this hook does not reorder)."""
    args = trainer.args
    return (
        trainer.vllm_mode == "colocate"
        and args.sleep_level > 0
        and bool(args.offload_model)
        and not trainer.async_generate
    )


def _offload_first(grpo_trainer) -> None:
    trainer_cls = runtime.need(grpo_trainer, "GRPOTrainer", GRPO_TRAINER)
    original = runtime.need(trainer_cls, "_fast_infer", f"{GRPO_TRAINER}.GRPOTrainer")
    for name in (
        "_move_model_to_vllm",
        "offload_context",
        "multi_turn_completion_length_context",
        "_infer_single_or_multi_turn",
    ):
        runtime.need(trainer_cls, name, f"{GRPO_TRAINER}.GRPOTrainer")
    empty_cache = runtime.need(grpo_trainer, "empty_cache", GRPO_TRAINER)
    torch = runtime.need(grpo_trainer, "torch", GRPO_TRAINER)

    def _fast_infer(self, inputs):
        if not _applies(self):
            return original(self, inputs)
        engine = self.engine.engine
        with self.offload_context():  # the trainer's weights and optimizer to the CPU first
            # the copies are non-blocking: their GPU blocks return to the card only once they are done
            # (without this, the first wake-up of a 7B run on a 24 GiB card overlapped them by 6.8 GiB)
            torch.cuda.synchronize()
            empty_cache()
            if self.engine.inner_model_executor.is_sleeping:
                engine.wake_up(tags=["weights"])
            if self.state.global_step != self._last_loaded_step:
                self._move_model_to_vllm()  # merged on the CPU, copied into vLLM's weights tensor by tensor
                self._last_loaded_step = self.state.global_step
            if self.engine.inner_model_executor.is_sleeping:
                engine.wake_up(tags=["kv_cache"])
            with self.multi_turn_completion_length_context():
                outputs = self._infer_single_or_multi_turn(inputs, self.request_config)
            engine.reset_prefix_cache()  # ms-swift#5143: no stale prefix cache after the next wake-up
            engine.sleep(level=self.args.sleep_level)
            empty_cache()
        return inputs, outputs

    _fast_infer.__wrapped__ = original
    trainer_cls._fast_infer = _fast_infer
    runtime.say(
        "the trainer leaves the GPU before vLLM's weights wake (one weight copy on the GPU at a time)"
    )


def install(value: str, after: After) -> None:
    """On with "1" (the plan sets it for a colocated trainer with SLEEP_LEVEL >= 1 and OFFLOAD_MODEL)."""
    if value == "1":
        after.patch(GRPO_TRAINER, _offload_first)


HOOK = Hook(
    name="offload_before_wake",
    variable="GRPO_RIG_OFFLOAD_BEFORE_WAKE",
    targets=(
        # the order replaced: wake weights, sync, then offload_context around the generation
        Target(GRPO_TRAINER, "GRPOTrainer._fast_infer", "a58fe1a22d016fbf"),
        # what the new order calls, unchanged: the merge and sync, the offload and reload
        Target(GRPO_TRAINER, "GRPOTrainer._move_model_to_vllm", "dce3819a920054cb"),
        Target(GRPO_TRAINER, "GRPOTrainer.offload_context", "9c23839aa68f9c57"),
        Target(GRPO_TRAINER, "GRPOTrainer.offload_model", "655af9cc72699ca6"),
    ),
    upstream=("ms-swift==3.6.4", "vllm==0.8.5.post1"),
    why="ms-swift wakes vLLM's weights and syncs the merged weights into them before it offloads the "
    "trainer, so with sleep mode and OFFLOAD_MODEL both bf16 weight copies are on the GPU at once (28.4 GiB "
    "for a 7B model): on a physical 24 GiB card the first wake-up of Qwen2.5-7B ran out of memory "
    "(cumem_allocator.cpp:62). The trainer now leaves the GPU first.",
    saves="one weight copy at the generation's start (14.2 GiB for Qwen2.5-7B): on a physical 24 GiB card "
    "of the lent H200 Qwen2.5-7B with sleep and both offloads completed 3 steps at a 23.8 GiB peak, where "
    "without the hook it ran out of memory at the first wake-up (docs/gpu-evidence.md, 2026-12-03 22:50; "
    "bench/one-card/). Its price there: the merge on the CPU, 24-26 s of a 30 s step",
    delete_when="when ms-swift's _fast_infer offloads the trainer before it wakes vLLM's weights (upstream "
    "grpo_trainer.py still wakes first as of 3.6.4); with adapter_sync the order is still needed (vLLM's "
    "base weights wake while the trainer's would still be on the GPU)",
    install=install,
)
