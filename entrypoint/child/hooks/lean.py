"""GRPO_RIG_VLLM_LEAN=1: a colocated engine builds only the outputs ms-swift reads
(entrypoint/child/final_only.py), and the trainer's start-up heap leaves the garbage collector's view
(entrypoint/child/heap_freeze.py).

Two patches, each in its own module of entrypoint/child/ (as the sync probe's is), under one switch: the plan
turns both on together, for a colocated trainer only (entrypoint/plan/build.py), and both serve one end,
fewer host-side pauses inside a colocated decode loop. A variable each would change the environment of every
colocated plan, and DISABLE_HOOKS=lean, which recipes may already name, would stop turning both off.
"""

from __future__ import annotations

from entrypoint.child import final_only, heap_freeze
from entrypoint.child.hooks.base import After, Hook, Target

NAME = "lean"
ENGINE = final_only.ENGINE
GRPO_TRAINER = "swift.trainers.rlhf_trainer.grpo_trainer"
VLLM_ENGINE = "swift.llm.infer.infer_engine.vllm_engine"


def install(value: str, after: After) -> None:
    """On with "1" (the plan sets it for a colocated trainer)."""
    if value == "1":
        after.patch(ENGINE, final_only.final_outputs_only)
        after.patch(GRPO_TRAINER, lambda grpo: heap_freeze.freeze_startup_heap(grpo, NAME))


HOOK = Hook(
    name=NAME,
    variable="GRPO_RIG_VLLM_LEAN",
    targets=(
        # final_only.py: the engine call it patches
        Target(ENGINE, "LLMEngine.add_request", "ceea054d33eae900"),
        # where V1 builds an output per request per step unless FINAL_ONLY
        Target("vllm.v1.engine.output_processor", "RequestState.make_request_output", "cd4b5a19cf1957ac"),
        # ms-swift's sampling parameters (FINAL_ONLY only for n > 1) and its non-streaming generation
        Target(VLLM_ENGINE, "VllmEngine._prepare_generation_config", "2872b9c30a67d7ea"),
        Target(VLLM_ENGINE, "VllmEngine.infer", "dcd592c3bd55a4e2"),
        # heap_freeze.py: the trainer's construction, after which the heap is frozen
        Target(GRPO_TRAINER, "GRPOTrainer.__init__", "3e6bb12909c57536"),
    ),
    upstream=("vllm==0.8.5.post1", "ms-swift==3.6.4"),
    why="ms-swift's colocated generation reads only each request's finished output, but vLLM's V1 engine "
    "builds a RequestOutput per request per decode step unless it asks for FINAL_ONLY; and the trainer's "
    "start-up heap (millions of objects of torch, transformers, vLLM) is walked by every oldest-generation "
    "collection, pauses inside decode loops. Plain requests ask for FINAL_ONLY; the heap is frozen once "
    "GRPOTrainer is built.",
    saves="not measured apart from the other levers: the per-step outputs are work the host no longer does "
    "in a launch-bound decode step; the collector ran 0.00-0.10 s per round before the freeze (gc_seconds, "
    "bench/gpu-evidence/notes.md, 2026-12-02 14:24 UTC), so the freeze bounds pauses rather than the mean "
    "step",
    delete_when="when ms-swift's colocated engine asks vLLM for FINAL_ONLY on every non-streaming request "
    "(VllmEngine._prepare_generation_config does it only for n > 1) and the image's vLLM freezes the heap "
    "after its engine starts in-process (vllm-project/vllm#27896 moved gc.freeze to EngineCore.__init__, "
    "which the external launcher runs)",
    install=install,
)
