"""Both models' completions for `evaluate`: the engine (vLLM when a GPU and vLLM are here, else HF
`generate`), the prompts rendered with the tokenizer's chat template, EVAL_GENERATIONS sampled completions
per prompt with the same seeds for the base model and the adapter, and the progress lines meanwhile."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from entrypoint.errors import BadInput, Problem
from entrypoint.recipe.settings import Settings
from entrypoint.supervise.console import Progress


class Engines(NamedTuple):
    """What `evaluate` may generate with here."""

    gpu: bool  # NVML sees a GPU
    vllm: bool  # vLLM is installed


def gpu_and_vllm(environ: Mapping[str, str]) -> Engines:
    """Whether a GPU is visible and vLLM is installed, a GPU asked of NVML: torch.cuda.is_available() would
    initialise CUDA here, and vLLM's engine process, forked from this one, then fails ("Cannot re-initialize
    CUDA in forked subprocess"; seen on the lent H200)."""
    import importlib.util

    from entrypoint.world import hardware

    return Engines(hardware.gpu_visible(environ), importlib.util.find_spec("vllm") is not None)


def choose_engine(requested: str, gpu: bool, vllm_installed: bool) -> str:
    """ "hf" or "vllm" for EVAL_ENGINE `requested`, given whether torch sees a GPU and vLLM imports.
    Raises BadInput for `vllm` where it cannot run."""
    if requested == "vllm" and not (gpu and vllm_installed):
        why = "torch sees no GPU" if not gpu else "vLLM is not installed here"
        raise BadInput(
            [
                Problem(
                    "EVAL_ENGINE",
                    f"vllm was asked for, but {why}",
                    "leave EVAL_ENGINE=auto (HF generate), or evaluate inside the GPU image",
                )
            ]
        )
    if requested == "hf":
        return "hf"
    return "vllm" if gpu and vllm_installed else "hf"


class Quantized(NamedTuple):
    """How the run's trainer loaded the base (QUANT_METHOD=bnb): the adapter was trained on those weights, so
    both models are evaluated on them too. ms-swift's bitsandbytes config: `bits` 4 or 8, `quant_type` nf4 or
    fp4, double quantization on, bf16 compute (v3.6.4:swift/llm/argument/base_args/quant_args.py:42-62)."""

    bits: int
    quant_type: str = "nf4"

    @classmethod
    def of(cls, bnb_bits: int, quant_type: str) -> Quantized | None:
        """From TrainerArgs.bnb_bits (0: not quantized) and bnb_4bit_quant_type."""
        return cls(bnb_bits, quant_type) if bnb_bits else None


def engine_for(engine: str, quantized: Quantized | None, gpu: bool) -> str:
    """The engine a quantized run is evaluated with, or BadInput before any model loads: bitsandbytes'
    kernels need a GPU, and vLLM 0.8.5 quantizes a checkpoint in flight to 4 bits only
    (model_loader/loader.py BitsAndBytesModelLoader), so an 8-bit run is evaluated with HF generate."""
    if quantized is None:
        return engine
    if not gpu:
        raise BadInput(
            [
                Problem(
                    "evaluate",
                    f"the run trained its adapter on a {quantized.bits}-bit base (QUANT_METHOD=bnb), which "
                    "bitsandbytes computes on a GPU only; on this machine there is none",
                    "evaluate on the GPU machine the run trained on (docker compose run --rm train evaluate "
                    "run=<name>)",
                )
            ]
        )
    return "hf" if quantized.bits != 4 else engine


def vllm_quantization(quantized: Quantized | None) -> dict[str, Any]:
    """vLLM's LLM(...) arguments that load the base as the trainer did: its bitsandbytes loader quantizes the
    bf16 checkpoint to 4 bits as it loads (the rollout's own way: child/hooks/adapter_sync.py)."""
    if quantized is None:
        return {}
    return {"quantization": "bitsandbytes", "load_format": "bitsandbytes"}


def hf_quantization(quantized: Quantized | None, torch) -> dict[str, Any]:
    """from_pretrained's arguments that load the base as ms-swift's trainer did (Quantized says which), on GPU
    0: a bitsandbytes model is placed while it loads and cannot be moved after."""
    if quantized is None:
        return {}
    from transformers import BitsAndBytesConfig

    config = BitsAndBytesConfig(
        load_in_4bit=quantized.bits == 4,
        load_in_8bit=quantized.bits == 8,
        bnb_4bit_quant_type=quantized.quant_type,
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    return {"quantization_config": config, "device_map": {"": 0}}


def _render(tokenizer, prompts: list[list[dict]]) -> list[str]:
    # the chat template's text, tokenized without extra special tokens: what ms-swift's template feeds
    return [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in prompts]


class Answers(NamedTuple):
    """Both models' completions: per prompt, EVAL_GENERATIONS texts each."""

    base: list[list[str]]
    tuned: list[list[str]]  # the adapter's


def generate_vllm(
    model_path: str,
    adapter: Path,
    prompts: list[list[dict]],
    sample: Mapping[str, Any],
    settings: Settings,
    progress: Progress | None = None,
    say: Callable[[str], None] = lambda line: None,
    quantized: Quantized | None = None,
) -> Answers:
    """Base and adapter completions, `settings.EVAL_GENERATIONS` per prompt from one vLLM engine, the
    adapter served as a LoRA request; the same per-request seeds for both. `say` gets a line per model."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    progress = progress or Progress(2 * len(prompts))
    progress.now("starting vLLM (the model's weights, the KV cache)")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in _render(tokenizer, prompts)]
    rank = int(json.loads((adapter / "adapter_config.json").read_text()).get("r", 8))
    max_new = sample["max_new_tokens"]
    llm = LLM(
        model=model_path,
        enable_lora=True,
        max_lora_rank=_vllm_lora_rank(rank),
        max_loras=1,
        seed=settings.EVAL_SEED,
        gpu_memory_utilization=settings.EVAL_GPU_MEMORY_UTILIZATION,
        max_model_len=max(len(i) for i in ids) + max_new,
        enforce_eager=True,  # a one-off job: CUDA graph capture costs more than it saves
        **vllm_quantization(quantized),
    )
    params = [
        SamplingParams(
            n=settings.EVAL_GENERATIONS,
            temperature=sample["temperature"],
            top_p=sample["top_p"],
            top_k=sample["top_k"] if sample["top_k"] > 0 else -1,
            max_tokens=max_new,
            seed=settings.EVAL_SEED + i,
        )
        for i in range(len(ids))
    ]
    requests = [{"prompt_token_ids": i} for i in ids]

    def texts(outputs) -> list[list[str]]:
        return [[c.text for c in o.outputs] for o in outputs]

    n = len(requests)
    try:
        progress.now(f"base model: answering {n} prompts", timed=True)
        base = texts(llm.generate(requests, params, use_tqdm=False))
        say(progress.advance(n, f"base model: {n} of {n} prompts answered"))
        lora = LoRARequest("adapter", 1, str(adapter))
        progress.now(f"adapter: answering {n} prompts", timed=True)
        tuned = texts(llm.generate(requests, params, use_tqdm=False, lora_request=lora))
        say(progress.advance(n, f"adapter: {n} of {n} prompts answered"))
    finally:
        # Without this the V1 engine's core process outlives the answer and the command never exits
        # (seen on the lent H200 with vLLM 0.8.5.post1).
        core = getattr(llm.llm_engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
    return Answers(base, tuned)


def _vllm_lora_rank(rank: int) -> int:
    # vLLM 0.8.5 accepts only these max_lora_rank values (vllm/config.py LoRAConfig.possible_max_ranks)
    return next((r for r in (8, 16, 32, 64, 128, 256, 320, 512) if r >= rank), rank)


def generate(
    model_path: str,
    adapter: Path | None,
    prompts: list[list[dict]],
    sample: Mapping[str, Any],
    settings: Settings,
    say: Callable[[str], None] = lambda line: None,
    progress: Progress | None = None,
    quantized: Quantized | None = None,
) -> list[list[str]]:
    """`settings.EVAL_GENERATIONS` sampled completions per prompt from the base model (adapter None) or base +
    adapter. Same seed, so both models draw the same random numbers. `say` gets a progress line per batch,
    with the ETA of `progress` (both models' prompts, evaluate's)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    label = "adapter" if adapter is not None else "base model"
    progress = progress or Progress(len(prompts))
    progress.now(f"{label}: loading the model")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(
        model_path,
        torch_dtype=torch.float32 if device == "cpu" else torch.bfloat16,
        **hf_quantization(quantized, torch),
    )
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    if quantized is None:
        model.to(device)
    model.eval()
    torch.manual_seed(settings.EVAL_SEED)
    out: list[list[str]] = []
    texts = _render(tokenizer, prompts)
    for start in range(0, len(texts), 8):
        progress.now(
            f"{label}: answering prompts {start + 1}-{min(start + 8, len(texts))} of {len(texts)}", timed=True
        )
        batch = tokenizer(
            texts[start : start + 8], return_tensors="pt", padding=True, add_special_tokens=False
        ).to(device)
        with torch.no_grad():
            ids = model.generate(
                **batch,
                do_sample=True,
                num_return_sequences=settings.EVAL_GENERATIONS,
                **sample,
                pad_token_id=tokenizer.pad_token_id,
            )
        decoded = tokenizer.batch_decode(ids[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        out += [
            decoded[i : i + settings.EVAL_GENERATIONS]
            for i in range(0, len(decoded), settings.EVAL_GENERATIONS)
        ]
        say(
            progress.advance(
                len(decoded) // settings.EVAL_GENERATIONS,
                f"{label}: {len(out)} of {len(texts)} prompts answered",
            )
        )
    return out


@contextlib.contextmanager
def heartbeat(progress: Progress, say: Callable[[str], None], every: float = 1.0) -> Iterator[None]:
    """While the block runs, `say` the progress's heartbeat whenever it is due (console.HEARTBEAT_SECONDS
    of quiet, checked every `every` seconds): on 2 loaded cores a batch of 8 prompts took minutes (once 16
    minutes, with four lines printed in all)."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every):
            line = progress.due()
            if line:
                say(line)

    thread = threading.Thread(target=tick, name="evaluate-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
