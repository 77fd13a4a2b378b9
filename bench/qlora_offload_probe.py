"""Where a QLoRA trainer's weights are while vLLM generates: ms-swift's OFFLOAD_MODEL on a 4-bit model.

    python bench/qlora_offload_probe.py --model DIR [--rank 8] --out probe.json

The planner (entrypoint/plan/memory.py, `TrainingEstimate.pinned`) counts the trainer's 4-bit copy as gone
while vLLM generates only with the hook offload_quant_states. ms-swift 3.6.4 offloads: `param.data =
param.data.to("cpu")` for every parameter (grpo_trainer.py:1457-1459, `offload_model`), which reaches
bitsandbytes' packed uint8 data too. This loads the model as ms-swift does for QUANT_METHOD=bnb QUANT_BITS=4
(BitsAndBytesConfig nf4, double quantization, bf16 compute: swift/llm/argument/base_args/quant_args.py), adds
LoRA on every linear layer (peft, as `--target_modules all-linear`), then measures torch's allocated and
reserved GiB and NVML's used GiB: loaded, after ms-swift's offload (with empty_cache, as offload_context
does), after the hook offload_quant_states also moved bitsandbytes' quantization states and the buffers
(entrypoint/child/hooks/offload_quant_states.py), after load_model back, and after one forward and backward of
`--tokens` tokens (the reloaded 4-bit layers still compute). Needs a CUDA GPU and bitsandbytes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

GIB = 1024**3


def measure(torch, pynvml, handle) -> dict[str, float]:
    """This process's torch allocator (allocated, reserved) and the card's NVML used memory, GiB."""
    torch.cuda.synchronize()
    return {
        "allocated_gib": round(torch.cuda.memory_allocated() / GIB, 3),
        "reserved_gib": round(torch.cuda.memory_reserved() / GIB, 3),
        "nvml_used_gib": round(pynvml.nvmlDeviceGetMemoryInfo(handle).used / GIB, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a model folder (config.json and safetensors)")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    import pynvml
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from entrypoint.child.hooks.offload_quant_states import move_quant_states
    from entrypoint.evaluation import generation

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    report: dict = {"model": args.model, "rank": args.rank, "stages": {}}
    stages = report["stages"]
    stages["empty"] = measure(torch, pynvml, handle)
    start = time.monotonic()
    # ms-swift's bitsandbytes config, as `evaluate` loads a QLoRA run's base, on GPU 0
    quant = generation.hf_quantization(generation.Quantized(4), torch)
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.bfloat16, **quant)
    model = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=32, target_modules="all-linear"))
    report["load_seconds"] = round(time.monotonic() - start, 1)
    stages["loaded"] = measure(torch, pynvml, handle)

    # ms-swift 3.6.4's offload_model and load_model (grpo_trainer.py:1457-1466), then offload_context's
    # empty_cache
    with torch.no_grad():
        for param in model.parameters():
            param.data = param.data.to(torch.device("cpu"), non_blocking=True)
    torch.cuda.empty_cache()
    stages["offloaded (ms-swift)"] = measure(torch, pynvml, handle)
    on_gpu = [(n, p.numel()) for n, p in model.named_parameters() if p.data.is_cuda]
    report["parameters_left_on_gpu"] = len(on_gpu)
    # what ms-swift leaves behind: bitsandbytes' quantization states (absmax, codes: not parameters) and the
    # buffers, scattered over the segments the load filled, keep those segments reserved; the hook
    # offload_quant_states moves them with the weights (its own function, as the trainer runs it)
    with torch.no_grad():
        report["moved_states_and_buffers"] = move_quant_states(model, torch.device("cpu"))
    torch.cuda.empty_cache()
    stages["offloaded with quantization states and buffers"] = measure(torch, pynvml, handle)
    with torch.no_grad():
        move_quant_states(model, torch.device("cuda", torch.cuda.current_device()))
    with torch.no_grad():
        for param in model.parameters():
            param.data = param.data.to(torch.device("cuda"), non_blocking=True)
    torch.cuda.empty_cache()
    stages["loaded back"] = measure(torch, pynvml, handle)

    ids = torch.randint(0, model.config.vocab_size, (1, args.tokens), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    report["loss_after_reload"] = float(loss)
    report["lora_grad_norm"] = float(
        sum(p.grad.float().norm() ** 2 for n, p in model.named_parameters() if p.grad is not None) ** 0.5
    )
    stages["after forward and backward"] = measure(torch, pynvml, handle)
    stages["peak"] = {"allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 3)}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
