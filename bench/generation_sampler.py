"""Where a colocated rollout's decode step goes: vLLM alone, in-process as ms-swift 3.6.4 colocates it.

    python bench/generation_sampler.py --model DIR --out FILE.json

One vLLM 0.8.5.post1 engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, as ms-swift's external
launcher runs it), countdown-1x4090's round: 32 sequences of 256 tokens (ignore_eos: a random-weight model's
completions all run to the limit, as in bench/countdown_throughput.py), CUDA graphs up to 32 sequences.
Each variant generates the round 3 times after one warm-up; reported: seconds per round and per decode
step (median). Variants: ms-swift's sampling (temperature 0.9, top_k 50, top_p 0.9: vLLM's PyTorch top-k/top-p
path, FlashInfer being absent), without top-k/top-p (no sort over the vocabulary), top-k only, top-p only,
without detokenization, and a round of 1 sequence (a decode step's fixed cost). Then the sampler's own
operations on a [32, vocabulary] logits tensor, timed with CUDA events: vLLM's apply_top_k_top_p, torch.sort,
torch.topk(50).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

ROUND, TOKENS = 32, 256
PROMPT = (
    "Using the numbers [12, 7, 3, 48], create an equation that equals 24. You can use basic arithmetic "
    "operations (+, -, *, /) and each number can only be used once. Show your work in <think> </think> tags. "
    "And return the final answer in <answer> </answer> tags."
)


def timed_rounds(llm, prompts, params, repeats=3) -> dict:
    llm.generate(prompts, params, use_tqdm=False)  # warm-up
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        seconds.append(time.perf_counter() - start)
    steps = max(len(o.outputs[0].token_ids) for o in outs)
    median = statistics.median(seconds)
    return {"round_s": round(median, 3), "all_s": [round(s, 3) for s in seconds], "decode_steps": steps,
            "ms_per_step": round(1000 * median / steps, 2), "sequences": len(prompts)}  # fmt: skip


def sampler_ops(vocab: int) -> dict:
    import torch
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

    logits = torch.randn(ROUND, vocab, device="cuda", dtype=torch.float32)
    k = torch.full((ROUND,), 50, device="cuda", dtype=torch.long)
    p = torch.full((ROUND,), 0.9, device="cuda", dtype=torch.float32)
    ops = {
        "apply_top_k_top_p (k 50, p 0.9)": lambda: apply_top_k_top_p(logits.clone(), k, p),
        "apply_top_k_top_p (k 50)": lambda: apply_top_k_top_p(logits.clone(), k, None),
        "torch.sort": lambda: logits.sort(dim=-1),
        "torch.topk(50)": lambda: logits.topk(50, dim=-1),
        "softmax": lambda: logits.softmax(dim=-1),
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
        out[name] = round(start.elapsed_time(end) / 100, 3)  # ms per call
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from vllm import LLM, SamplingParams

    llm = LLM(model=args.model, dtype="bfloat16", max_model_len=2304, gpu_memory_utilization=0.15,
              max_num_seqs=ROUND, enable_prefix_caching=True, seed=0,
              compilation_config={"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 24, 32]})  # fmt: skip
    prompts = [PROMPT.replace("24", str(20 + i // 8)) for i in range(ROUND)]
    base = dict(temperature=0.9, max_tokens=TOKENS, min_tokens=TOKENS, ignore_eos=True)
    variants = {
        "ms-swift's sampling (top_k 50, top_p 0.9)": SamplingParams(top_k=50, top_p=0.9, **base),
        "no top-k/top-p": SamplingParams(**base),
        "top_k 50 only": SamplingParams(top_k=50, **base),
        "top_p 0.9 only": SamplingParams(top_p=0.9, **base),
        "ms-swift's sampling without detokenization": SamplingParams(top_k=50, top_p=0.9, detokenize=False, **base),
    }  # fmt: skip
    result = {"vllm_multiprocessing": os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"], "rounds": {}}
    for name, params in variants.items():
        result["rounds"][name] = timed_rounds(llm, prompts, params)
        print(name, result["rounds"][name], flush=True)
    one = timed_rounds(llm, prompts[:1], variants["ms-swift's sampling (top_k 50, top_p 0.9)"])
    result["rounds"]["1 sequence, ms-swift's sampling"] = one
    print("1 sequence", one, flush=True)
    vocab = llm.llm_engine.model_config.get_vocab_size()
    result["sampler_ms"] = sampler_ops(vocab)
    print("sampler ms", result["sampler_ms"], flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
