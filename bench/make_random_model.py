"""Build a model with random weights from a shipped config (no hub needed), with a given tokenizer.

    python bench/make_random_model.py Qwen/Qwen2.5-0.5B-Instruct OUT_DIR --tokenizer TOKENIZER_DIR

Dimensions come from entrypoint/data/model_configs.json (the hub config.json values). Weights are bf16,
initialised on the GPU when there is one. The tokenizer should be the model's own (for Qwen2.5:
bench/qwen_tokenizer.py), whose vocabulary the embedding covers. A foreign tokenizer much smaller than
the model's vocabulary is handled one of two ways:
- `--vocab-from-tokenizer`: the model's vocabulary shrinks to the tokenizer's (GPU tests: quick to load,
  but the logits, and so the memory, are not the real model's);
- otherwise it is padded with added tokens `<rN>` up to the model's vocabulary: ms-swift decodes each
  completion and encodes it again for the training pass, and ids the tokenizer does not know would vanish
  there. 100k added tokens make every load of that tokenizer take minutes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

DATA = Path(__file__).resolve().parent.parent / "entrypoint" / "data" / "model_configs.json"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model_id")
    p.add_argument("out", type=Path)
    p.add_argument("--tokenizer", type=Path, required=True)
    p.add_argument(
        "--vocab-from-tokenizer", action="store_true", help="shrink the vocabulary to the tokenizer's"
    )
    args = p.parse_args()
    fields = {k: v for k, v in json.loads(DATA.read_text())[args.model_id].items() if not k.startswith("_")}
    model_type = fields.pop("model_type")
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    foreign = len(tokenizer) < fields["vocab_size"] - 1024  # real checkpoints keep a few hundred spare rows
    if foreign and args.vocab_from_tokenizer:
        fields["vocab_size"] = -(-len(tokenizer) // 64) * 64
    elif foreign:
        tokenizer.add_tokens([f"<r{i}>" for i in range(len(tokenizer), fields["vocab_size"])])
    fields.setdefault("max_position_embeddings", 32768)
    config = AutoConfig.for_model(model_type, **fields, torch_dtype="bfloat16")
    config.eos_token_id, config.pad_token_id, config.bos_token_id = (
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        tokenizer.bos_token_id,
    )
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(
        f"{args.model_id}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters -> {args.out}"
    )


if __name__ == "__main__":
    main()
