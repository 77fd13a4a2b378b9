"""GRPO_RIG_VLLM_GRAPHS_UP_TO_MAX_SEQS=1: vLLM captures CUDA graphs only for batch sizes it can run.

vLLM 0.8.5's V1 engine captures 67 sizes, 1 to 512 sequences, whatever max_num_seqs says (vllm/config.py
VllmConfig._set_cudagraph_sizes; its V0 branch stops at the first size >= max_num_seqs, which is the
rule used here). A colocated engine runs at most per_device_train_batch_size x steps_per_generation
sequences (ms-swift 3.6.4 GRPOTrainer.prepare_vllm), 32 for countdown-1x4090: 7 sizes instead of 67,
whose capture took 39 of the engine's 61 s on an H200 (bench/throughput/2026-12-01-1622-countdown-first/).
A decode step of more sequences than max_num_seqs never happens, so no step loses its graph. A recipe
that sets its own capture sizes (compilation_config) keeps them.
"""

from __future__ import annotations

import functools

from entrypoint.child import runtime
from entrypoint.child.hooks.base import After, Hook, Target

CAPTURE_SIZES = [1, 2, 4] + list(range(8, 513, 8))  # vLLM 0.8.5's candidates (vllm/config.py)


def graph_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """The batch sizes to capture: the candidates up to the first one >= max_num_seqs (vLLM's V0 rule)."""
    cap = next((size for size in CAPTURE_SIZES if size >= max_num_seqs), CAPTURE_SIZES[-1])
    return [size for size in CAPTURE_SIZES if size <= min(cap, max_num_batched_tokens)]


def _graphs_up_to_max_seqs(config) -> None:
    cls = config.VllmConfig
    original = cls._set_cudagraph_sizes

    @functools.wraps(original)
    def _set_cudagraph_sizes(self):
        compilation, scheduler, model = self.compilation_config, self.scheduler_config, self.model_config
        parallel = self.parallel_config
        if (
            compilation.cudagraph_capture_sizes is None
            and scheduler is not None
            and model is not None
            and not model.enforce_eager
            and not (
                parallel.tensor_parallel_size > 1 and compilation.pass_config.enable_sequence_parallelism
            )
        ):
            sizes = graph_sizes(scheduler.max_num_seqs, scheduler.max_num_batched_tokens)
            compilation.cudagraph_capture_sizes = sizes
            runtime.say(
                f"vLLM captures CUDA graphs for {len(sizes)} batch sizes up to {sizes[-1]} "
                f"(max_num_seqs {scheduler.max_num_seqs}), not 67 up to 512"
            )
        original(self)

    cls._set_cudagraph_sizes = _set_cudagraph_sizes


def install(value: str, after: After) -> None:
    """On with "1" (the plan sets it wherever a vLLM engine starts with CUDA graphs)."""
    if value == "1":
        after.patch("vllm.config", _graphs_up_to_max_seqs)


HOOK = Hook(
    name="graphs_up_to_max_seqs",
    variable="GRPO_RIG_VLLM_GRAPHS_UP_TO_MAX_SEQS",
    targets=(Target("vllm.config", "VllmConfig._set_cudagraph_sizes", "39924721510d3965"),),
    upstream=("vllm==0.8.5.post1",),
    why="vLLM 0.8.5's V1 engine captures CUDA graphs for 67 batch sizes up to 512 sequences whatever "
    "max_num_seqs says; an engine that runs at most max_num_seqs sequences per step needs only the sizes up "
    "to the first candidate >= max_num_seqs (vLLM's own V0 rule), so no decode step loses its graph.",
    saves="countdown-1x4090's colocated engine captures 7 sizes instead of 67, whose capture took 39 of the "
    "engine's 61 s of start-up on an H200 (bench/throughput/2026-12-01-1622-countdown-first/)",
    delete_when="when the image's vLLM bounds its default capture sizes by max_num_seqs itself (later vLLM's "
    "_set_cudagraph_sizes derives max_cudagraph_capture_size from max_num_seqs x decode query length x 2; "
    "vllm/config/vllm.py), so that an engine of 32 sequences no longer captures 67 sizes",
    install=install,
)
