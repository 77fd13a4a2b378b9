"""What adapter-only weight sync would cost: vLLM alone with its LoRA support, a new adapter every round.

    python bench/lora_probe.py --model DIR [--rank 8] [--rounds 4] [--share 0.75] --out probe.json

The candidate for one weight copy per card (bench/one-card/): the base weights are loaded into vLLM once
and never synced again; each GRPO step only writes the trained adapter (a few tens of MB) and generates
with it as a LoRARequest. This measures, on one engine with sleep mode as the colocated trainer runs it:
each round's sleep and wake-up, the generation of `--prompts` x `--tokens` with a fresh adapter (its load
included) against the same generation on the base weights, whether the adapter changed the tokens
(greedy), and the engine's GPU memory. Adapters are random (A and B non-zero) in PEFT's file layout, the
target modules ms-swift's `--target_modules all-linear` gives a Qwen2 model.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

GIB = 1024**3
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def shapes(config: dict) -> dict[str, tuple[int, int]]:
    """(in, out) features of each LoRA target of a Qwen2 decoder layer, from the model's config.json."""
    h, i = config["hidden_size"], config["intermediate_size"]
    kv = config["num_key_value_heads"] * (h // config["num_attention_heads"])
    return {
        "q_proj": (h, h),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (h, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def write_adapter(out: Path, config: dict, rank: int, seed: int) -> int:
    """A random LoRA adapter for every target of every layer, as PEFT saves it; returns its bytes."""
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for name, (fan_in, fan_out) in shapes(config).items():
            block = "self_attn" if name in TARGETS[:4] else "mlp"
            key = f"base_model.model.model.layers.{layer}.{block}.{name}"
            tensors[f"{key}.lora_A.weight"] = (
                torch.randn(rank, fan_in, generator=g) / fan_in**0.5
            ).bfloat16()
            tensors[f"{key}.lora_B.weight"] = (torch.randn(fan_out, rank, generator=g) * 0.02).bfloat16()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(
        json.dumps(
            {
                "peft_type": "LORA",
                "task_type": "CAUSAL_LM",
                "r": rank,
                "lora_alpha": 4 * rank,
                "lora_dropout": 0.0,
                "target_modules": list(TARGETS),
                "bias": "none",
                "fan_in_fan_out": False,
                "modules_to_save": None,
                "use_rslora": False,
                "use_dora": False,
                "base_model_name_or_path": None,
            }
        )
    )
    return (out / "adapter_model.safetensors").stat().st_size


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--share", type=float, default=0.75)
    p.add_argument("--adapters", type=Path, default=Path("/tmp/lora-probe"))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    config = json.loads((args.model / "config.json").read_text())
    started = time.time()
    llm = LLM(
        str(args.model),
        enable_lora=True,
        max_lora_rank=args.rank,
        max_loras=1,
        enable_sleep_mode=True,
        gpu_memory_utilization=args.share,
        max_model_len=2304,
        max_num_seqs=args.prompts,
        seed=0,
    )
    report = {
        "model": str(args.model),
        "rank": args.rank,
        "engine_start_s": round(time.time() - started, 1),
        "prompts": args.prompts,
        "tokens": args.tokens,
        "rounds": [],
    }
    params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
    prompts = [
        f"Task {i}: using the numbers {i}, {i + 3} and {2 * i + 1}, make {i + 17}."
        for i in range(args.prompts)
    ]

    def timed(fn, *a, **kw):
        torch.cuda.synchronize()
        t = time.time()
        value = fn(*a, **kw)
        torch.cuda.synchronize()
        return value, round(time.time() - t, 3)

    # this process's, under EMULATE_VRAM_GB's mem_get_info (entrypoint/child/hooks/emulate_vram.py)
    def used_gib():
        free, total = torch.cuda.mem_get_info()
        return round((total - free) / GIB, 2)

    for r in range(args.rounds):
        row = {"round": r}
        t = time.time()
        row["adapter_bytes"] = write_adapter(args.adapters / f"a{r}", config, args.rank, seed=r)
        row["adapter_write_s"] = round(time.time() - t, 3)
        _, row["sleep_s"] = timed(llm.sleep, level=1)
        row["asleep_used_gib"] = used_gib()
        _, row["wake_s"] = timed(llm.wake_up)
        request = LoRARequest(f"a{r}", r + 1, str(args.adapters / f"a{r}"))
        tuned, row["generate_new_adapter_s"] = timed(llm.generate, prompts, params, lora_request=request)
        _, row["generate_same_adapter_s"] = timed(llm.generate, prompts, params, lora_request=request)
        base, row["generate_base_s"] = timed(llm.generate, prompts, params)
        row["awake_used_gib"] = used_gib()
        row["adapter_changed_tokens"] = sum(
            a.outputs[0].token_ids != b.outputs[0].token_ids for a, b in zip(tuned, base, strict=True)
        )
        report["rounds"].append(row)
        print(json.dumps(row), flush=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"lora probe: {args.rounds} rounds -> {args.out}", flush=True)


if __name__ == "__main__":
    main()
