"""A colocated vLLM engine builds only the output ms-swift reads: the first of the two patches of the lean
hook (entrypoint/child/hooks/lean.py declares it, with the upstream definitions it relies on, and installs
both).

ms-swift 3.6.4's colocate generation (VllmEngine.infer without streaming, vllm_engine.py:486-500) keeps each
request's finished RequestOutput and decodes its token ids itself (template.decode(output.token_ids),
:387); vLLM 0.8.5's V1 engine builds a RequestOutput for every request at every decode step unless the
request asks for FINAL_ONLY (v1/engine/output_processor.py:144-160). A request with n=1 and no logprobs
asks for FINAL_ONLY here: the same tokens, text and finish reason reach ms-swift, once.
"""

from __future__ import annotations

import functools

ENGINE = "vllm.v1.engine.llm_engine"


def final_outputs_only(v1_llm_engine) -> None:
    """Patch vLLM's V1 LLMEngine.add_request: a plain request (n=1, cumulative, no logprobs) asks for
    FINAL_ONLY."""
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
