"""Where a colocated rollout's decode step goes: vLLM alone, in-process as ms-swift 3.6.4 colocates it.

    python bench/generation_sampler.py --model DIR --out FILE.json [--engine v1|v0] [--scheduler-steps N]

One vLLM 0.8.5.post1 engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, as ms-swift's external
launcher runs it), countdown-1x4090's round: 32 sequences of 256 tokens (ignore_eos: a random-weight model's
completions all run to the limit, as in bench/countdown_throughput.py), CUDA graphs up to 32 sequences,
ms-swift's sampling (temperature 0.9, top_k 50, top_p 0.9). The variants take turns, round by round (one
warm-up round each, then --repeats rounds each), so that a drift of the host's speed falls on all of them;
reported per variant: seconds per round (median, all), per decode step, and the seconds of this thread's CPU
per round (a decode step bound by the host's launches uses one core all through).

--engine v1 (vLLM 0.8.5's default, what ms-swift colocates): the top-k/top-p step as vLLM does it (a sort
over the vocabulary; FlashInfer is absent), as the top-k-first hook (entrypoint/child/hooks/top_k_first.py)
did it at git 999dc10 (`top_k_first_with_read_backs` below, labelled "top-k first, with read-backs"; the
archived results of bench/generation/2026-12-03-0828-engines name it by the last run that used it), as it does
it now (k from the batch's host copy, fewer launches), and without top-k/top-p (what the sampler costs at
all). Then the sampler's operations on a [32, vocabulary] logits tensor, GPU time by CUDA events.
--engine v0 (VLLM_USE_V1=0, vLLM's previous engine: whole-model CUDA graphs for decode) with
--scheduler-steps N (its multi-step scheduling): vLLM's sort and no top-k/top-p.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROUND, TOKENS = 32, 256
PROMPT = (
    "Using the numbers [12, 7, 3, 48], create an equation that equals 24. You can use basic arithmetic "
    "operations (+, -, *, /) and each number can only be used once. Show your work in <think> </think> tags. "
    "And return the final answer in <answer> </answer> tags."
)
ROOT = Path(__file__).resolve().parents[1]


def top_k_first_with_read_backs(original):
    """The top-k-first hook as the throughput runs of 2026-12-02 22:03 to 2026-12-03 07:11 ran it (git
    999dc10, then in sitecustomize.py): k's max and the ties' check read back from the GPU, 22 launches; kept
    here for the comparison only."""
    import torch

    def apply_top_k_top_p(logits, k, p):
        if k is None or p is None:
            return original(logits, k, p)
        k_max = int(k.max())
        window = 2 * k_max
        if k_max > 1024 or window >= logits.shape[1]:
            return original(logits, k, p)
        values, index = logits.topk(window, dim=1)
        threshold = values.gather(1, k.long().sub(1).unsqueeze(1))
        if bool((values[:, -1:] >= threshold).any()):
            return original(logits, k, p)
        by_id = index.argsort(dim=1)
        ascending, position = values.gather(1, by_id).sort(dim=1, stable=True)
        ids = index.gather(1, by_id).gather(1, position)
        ascending = ascending.masked_fill(ascending < threshold, -float("inf"))
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        outside = cumulative <= 1 - p.unsqueeze(1)
        outside[:, -1] = False
        masked = torch.full_like(logits, -float("inf"))
        return masked.scatter_(1, ids, ascending.masked_fill(outside, -float("inf")))

    return apply_top_k_top_p


def load_site():
    """The top_k_first hook's module (entrypoint/child/hooks/top_k_first.py), imported, nothing installed: its
    top_k_first and _top_k_from_the_host are applied below by hand."""
    if importlib.util.find_spec("entrypoint") is None:
        sys.path.append(str(ROOT))
    from entrypoint.child.hooks import top_k_first

    return top_k_first


def one_round(llm, prompts, params) -> tuple[float, float, int]:
    """(wall seconds, this thread's CPU seconds, decode steps) of one round."""
    start, cpu = time.perf_counter(), time.thread_time()
    outs = llm.generate(prompts, params, use_tqdm=False)
    return (
        time.perf_counter() - start,
        time.thread_time() - cpu,
        max(len(o.outputs[0].token_ids) for o in outs),
    )


def interleaved(llm, prompts, variants: dict, repeats: int) -> dict:
    """variants: {name: (SamplingParams, setup callable)}; each round calls setup() first."""
    seconds = {name: [] for name in variants}
    cpu = {name: [] for name in variants}
    steps = {}
    for r in range(repeats + 1):
        for name, (params, setup) in variants.items():
            setup()
            wall, used, steps[name] = one_round(llm, prompts, params)
            if r:  # the first round of each is its warm-up
                seconds[name].append(wall)
                cpu[name].append(used)
    out = {}
    for name in variants:
        median = statistics.median(seconds[name])
        out[name] = {
            "round_s": round(median, 3),
            "all_s": [round(s, 3) for s in seconds[name]],
            "cpu_s": round(statistics.median(cpu[name]), 3),
            "decode_steps": steps[name],
            "ms_per_step": round(1000 * median / steps[name], 2),
            "sequences": len(prompts),
        }
        print(name, out[name], flush=True)
    return out


def sampler_ops(vocab: int, site) -> dict:
    """GPU milliseconds per call, by CUDA events over 100 back-to-back calls."""
    import torch
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

    logits = torch.randn(ROUND, vocab, device="cuda", dtype=torch.float32)
    k = torch.full((ROUND,), 50, device="cuda", dtype=torch.long)
    p = torch.full((ROUND,), 0.9, device="cuda", dtype=torch.float32)
    old, lean = top_k_first_with_read_backs(apply_top_k_top_p), site.top_k_first(apply_top_k_top_p)
    ops = {
        "vLLM's apply_top_k_top_p (k 50, p 0.9)": lambda: apply_top_k_top_p(logits.clone(), k, p),
        "top-k first, with read-backs": lambda: old(logits.clone(), k, p),
        "top-k first, now": lambda: lean(logits.clone(), k, p),
        "torch.topk(100)": lambda: logits.topk(100, dim=-1),
        "clone": lambda: logits.clone(),
    }
    out = {}
    for name, op in ops.items():
        for _ in range(5):
            op()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(100):
            op()
        end.record()
        torch.cuda.synchronize()
        out[name] = round(start.elapsed_time(end) / 100, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--engine", choices=["v1", "v0"], default="v1")
    parser.add_argument("--scheduler-steps", type=int, default=1, help="V0's multi-step scheduling")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ["VLLM_USE_V1"] = "1" if args.engine == "v1" else "0"
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    site = load_site()
    from vllm import LLM, SamplingParams

    extra = {"num_scheduler_steps": args.scheduler_steps} if args.scheduler_steps > 1 else {}
    llm = LLM(
        model=args.model,
        dtype="bfloat16",
        max_model_len=2304,
        gpu_memory_utilization=0.15,
        max_num_seqs=ROUND,
        enable_prefix_caching=True,
        seed=0,
        compilation_config={"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 24, 32]},
        **extra,
    )
    prompts = [PROMPT.replace("24", str(20 + i // 8)) for i in range(ROUND)]
    base = dict(temperature=0.9, max_tokens=TOKENS, ignore_eos=True)
    swift, plain = SamplingParams(top_k=50, top_p=0.9, **base), SamplingParams(**base)
    result = {"engine": args.engine, "scheduler_steps": args.scheduler_steps, "repeats": args.repeats}

    def nothing():
        pass

    if args.engine == "v1":
        from vllm.v1.sample.ops import topk_topp_sampler as ops
        from vllm.v1.worker import gpu_input_batch

        site._top_k_from_the_host(gpu_input_batch)  # only marks k and p; vLLM's own path ignores the marks
        vllm_own = ops.apply_top_k_top_p
        old, lean = top_k_first_with_read_backs(vllm_own), site.top_k_first(vllm_own)

        def using(fn):
            return lambda: setattr(ops, "apply_top_k_top_p", fn)

        variants = {
            "vLLM's sort (top_k 50, top_p 0.9)": (swift, using(vllm_own)),
            "top-k first, with read-backs": (swift, using(old)),
            "top-k first, now": (swift, using(lean)),
            "no top-k/top-p": (plain, using(vllm_own)),
        }
    else:
        variants = {"vLLM's sort (top_k 50, top_p 0.9)": (swift, nothing), "no top-k/top-p": (plain, nothing)}
    print("rounds start", flush=True)  # bench/device/gpu-work.sh's py-spy waits for this line
    result["rounds"] = interleaved(llm, prompts, variants, args.repeats)
    if args.engine == "v1":
        result["sampler_ms"] = sampler_ops(llm.llm_engine.model_config.get_vocab_size(), site)
        print("sampler ms", result["sampler_ms"], flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
