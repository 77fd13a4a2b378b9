"""GRPO_RIG_VLLM_TOP_K_FIRST=1: vLLM's top-k/top-p sampling without sorting the vocabulary.

Without FlashInfer (not in the image's stack), vLLM 0.8.5's V1 sampler sorts every row of the logits over
the whole vocabulary when a request sets top_p (v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p):
0.95 ms of a 4.5 ms decode step for 32 sequences over Qwen2.5's 151,936 tokens on the lent H200, where a
top-50 costs 0.13 ms (bench/generation/2026-12-02-1424-sampler/generation-sampler.json; ms-swift's GRPO
samples with top_k 50 and top_p 0.9). When every row has a top-k of at most 1024, the same mask comes
from the top k: the k-th largest logit is the threshold (ties with it kept, as vLLM keeps them), and
top-p is applied to the survivors in vLLM's ascending order (softmax, cumulative sum, masked where it
stays <= 1 - p, the largest always kept). The masked logits are vLLM's, so the same tokens are sampled
from the same random draws. It looks at twice the top k: logits computed in bf16 tie often at the k-th
value (with exactly k, nearly every GPU step went back to the sort: py-spy of the lever runs in
bench/calibration/2026-12-02-1733-levers-expandable-segments/). The largest k, k - 1 as an index and
1 - p come from where vLLM copies the batch's sampling settings to the GPU (once per change of the
batch): a step reads the GPU back once, for the ties' check, after all but its last two launches.

Rows whose ties run past that window, rows without top-k and larger k take vLLM's own path. Equal
logits at the top-p boundary are dropped in a stable sort's order (ascending token id), where vLLM
leaves the order to torch.sort (tests/child/test_hook_patches.py).
"""

from __future__ import annotations

import functools

from entrypoint.child.hooks.base import After, Hook, Target

SAMPLER = "vllm.v1.sample.ops.topk_topp_sampler"
INPUT_BATCH = "vllm.v1.worker.gpu_input_batch"

TOP_K_FIRST_LIMIT = 1024  # the largest top-k taken this way; beyond it a sort is no slower


def _k_index(k):
    """k [rows] -> [rows, 1] int64: the column of the k-th largest in a descending top-k."""
    return k.long().sub(1).unsqueeze(1)


def _keep_above(p):
    """p [rows] -> [rows, 1]: top-p drops an ascending cumulative probability at or below 1 - p."""
    return 1 - p.unsqueeze(1)


def top_k_first(original):
    """vLLM's apply_top_k_top_p(logits [rows, vocab] float, k [rows] int | None, p [rows] float | None) ->
    masked logits, computed from the top k instead of a sort over the vocabulary (module docstring);
    `original` (vLLM's) where that cannot give the same mask. A decode step is bound by the host's launches
    (py-spy of a trainer, bench/throughput/2026-12-03-0711-countdown-pyspy/: about 0.1 ms of one core per
    tensor operation here), so it launches as few operations as it can: what depends only on k and p comes
    from the batch (_top_k_from_the_host), and `logits` is overwritten in place, as vLLM's function may do."""

    def apply_top_k_top_p(logits, k, p):
        if k is None or p is None:
            return original(logits, k, p)
        k_max = getattr(k, "grpo_rig_max", None)
        if k_max is None:  # k not from vLLM's batch: read it back (waits for the GPU)
            k_max = int(k.max())
        # twice the top k: logits computed in bf16 often tie with the k-th, and vLLM keeps every tie (on the
        # GPU, taking exactly k_max sent nearly every step back to the sort: py-spy of the 2026-12-02 lever
        # runs)
        window = 2 * k_max
        if k_max > TOP_K_FIRST_LIMIT or window >= logits.shape[1]:
            return original(logits, k, p)
        k_index = getattr(k, "grpo_rig_index", None)
        if k_index is None:
            k_index = _k_index(k)
        keep_above = getattr(p, "grpo_rig_complement", None)
        if keep_above is None:
            keep_above = _keep_above(p)
        values, index = logits.topk(window, dim=1)  # descending
        threshold = values.gather(1, k_index)
        # ascending value, ties by ascending token id (a stable sort's order): top-p drops tied tokens at
        # its boundary in that order
        ids, by_id = index.sort(dim=1)
        ascending, position = values.gather(1, by_id).sort(dim=1, stable=True)
        ids = ids.gather(1, position)
        ascending = ascending.masked_fill(ascending < threshold, -float("inf"))
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        # the most likely token (the last column) always stays
        ascending[:, :-1].masked_fill_(cumulative[:, :-1] <= keep_above, -float("inf"))
        # ties with the k-th may run past the window; asked last, so the launches above overlap the model
        if bool((values[:, -1:] >= threshold).any()):
            return original(logits, k, p)
        return logits.fill_(-float("inf")).scatter_(1, ids, ascending)

    return apply_top_k_top_p


def _sample_top_k_first(sampler_ops):
    sampler_ops.apply_top_k_top_p = top_k_first(sampler_ops.apply_top_k_top_p)


def _top_k_from_the_host(gpu_input_batch):
    """Where vLLM copies the batch's top-k and top-p to the GPU (InputBatch._make_sampling_metadata, once per
    change of the batch, not per step), the largest k is read from its host copy and what top_k_first
    derives from k and p is computed once, kept on the GPU tensors themselves (the metadata hands the same
    objects to every step until the batch changes)."""
    cls = gpu_input_batch.InputBatch
    original = cls._make_sampling_metadata

    @functools.wraps(original)
    def _make_sampling_metadata(self):
        metadata = original(self)
        k, p = metadata.top_k, metadata.top_p
        if k is not None and self.num_reqs > 0:
            k.grpo_rig_max = int(self.top_k_cpu[: self.num_reqs].max())
            k.grpo_rig_index = _k_index(k)
        if p is not None:
            p.grpo_rig_complement = _keep_above(p)
        return metadata

    cls._make_sampling_metadata = _make_sampling_metadata


def install(value: str, after: After) -> None:
    """On with "1" (the plan sets it wherever a vLLM engine samples)."""
    if value == "1":
        after.patch(SAMPLER, _sample_top_k_first)
        after.patch(INPUT_BATCH, _top_k_from_the_host)


HOOK = Hook(
    name="top_k_first",
    variable="GRPO_RIG_VLLM_TOP_K_FIRST",
    targets=(
        Target(SAMPLER, "apply_top_k_top_p", "fc6850af6a55f82a"),  # the mask it must equal
        # calls apply_top_k_top_p through the module's global name, which is what the patch replaces
        Target(SAMPLER, "TopKTopPSampler.forward_native", "162c86cdf454214f"),
        # chooses forward_native where FlashInfer is absent
        Target(SAMPLER, "TopKTopPSampler.__init__", "3f9bb42eab891930"),
        Target(INPUT_BATCH, "InputBatch._make_sampling_metadata", "2cad8da1e0b2f58c"),
    ),
    upstream=("vllm==0.8.5.post1",),
    why="Without FlashInfer, vLLM 0.8.5's V1 sampler sorts every row of the logits over the whole vocabulary "
    "when a request sets top_p; with a top-k of at most 1024 (ms-swift's GRPO samples with top_k 50, top_p "
    "0.9) the same masked logits come from the top 2k, so the same tokens are sampled from the same draws.",
    saves="the sort was 0.95 ms of a 4.5 ms decode step (32 sequences over Qwen2.5's 151,936 tokens on the "
    "lent H200) where a top-50 costs 0.13 ms "
    "(bench/generation/2026-12-02-1424-sampler/generation-sampler.json)",
    delete_when="when vLLM's sampler stops sorting the vocabulary for top-p with a top-k set: FlashInfer's "
    "sampler in the image (TopKTopPSampler picks forward_cuda), or a vLLM whose apply_top_k_top_p takes the "
    "top k before sorting (proposed upstream: vllm-project/vllm#32234, vllm-project/vllm#48913)",
    install=install,
)
