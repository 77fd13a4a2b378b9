"""GRPO_RIG_VLLM_LEAN=1: a colocated engine builds only the outputs ms-swift reads, and the trainer's start-up
heap leaves the garbage collector's view.

ms-swift 3.6.4's colocate generation (VllmEngine.infer without streaming, vllm_engine.py:486-500) keeps each
request's finished RequestOutput and decodes its token ids itself (template.decode(output.token_ids),
:387); vLLM 0.8.5's V1 engine builds a RequestOutput for every request at every decode step unless the
request asks for FINAL_ONLY (v1/engine/output_processor.py:144-160). A request with n=1 and no logprobs
asks for FINAL_ONLY here: the same tokens, text and finish reason reach ms-swift, once. Then, once
GRPOTrainer is built (model, reference, vLLM engine loaded), the heap is collected once and frozen
(gc.freeze, as later vLLM versions do after their engine starts): the oldest generation's collections no
longer walk the millions of objects torch, transformers and vLLM left at start-up, pauses that land inside
a decode loop. Each phase event records the collector's seconds inside it (`gc_seconds`, hooks/events.py).
"""

from __future__ import annotations

import functools

from entrypoint.child import runtime
from entrypoint.child.hooks.base import After, Hook, Target

ENGINE = "vllm.v1.engine.llm_engine"
GRPO_TRAINER = "swift.trainers.rlhf_trainer.grpo_trainer"


def _final_outputs_only(v1_llm_engine) -> None:
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    cls = v1_llm_engine.LLMEngine
    original = cls.add_request

    @functools.wraps(original)
    def add_request(self, request_id, prompt, params, *args, **kwargs):
        if (
            isinstance(params, SamplingParams)
            and params.n == 1
            and params.output_kind == RequestOutputKind.CUMULATIVE
            and params.logprobs is None
            and params.prompt_logprobs is None
        ):
            params.output_kind = RequestOutputKind.FINAL_ONLY
        return original(self, request_id, prompt, params, *args, **kwargs)

    cls.add_request = add_request


def _freeze_startup_heap(grpo) -> None:
    import gc

    def freeze(trainer):
        gc.collect()
        gc.freeze()

    runtime.once_built(grpo.GRPOTrainer, freeze, "lean")


def install(value: str, after: After) -> None:
    """On with "1" (the plan sets it for a colocated trainer)."""
    if value == "1":
        after.patch(ENGINE, _final_outputs_only)
        after.patch(GRPO_TRAINER, _freeze_startup_heap)


HOOK = Hook(
    name="lean",
    variable="GRPO_RIG_VLLM_LEAN",
    targets=(
        Target(ENGINE, "LLMEngine.add_request", "0125b1a178260755"),
        # where V1 builds an output per request per step unless FINAL_ONLY
        Target("vllm.v1.engine.output_processor", "RequestState.make_request_output", "c7e2cef88473a183"),
        # ms-swift's sampling parameters (FINAL_ONLY only for n > 1) and its non-streaming generation
        Target(
            "swift.llm.infer.infer_engine.vllm_engine",
            "VllmEngine._prepare_generation_config",
            "dd68d21f7cea968d",
        ),
        Target("swift.llm.infer.infer_engine.vllm_engine", "VllmEngine.infer", "8053e8366f6ed41e"),
        Target(GRPO_TRAINER, "GRPOTrainer.__init__", "3a0e5d68a4fc474d"),
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
