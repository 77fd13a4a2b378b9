"""Rebuild the real Qwen2.5 tokenizer without a model hub, for random-weight benchmark models.

    python bench/qwen_tokenizer.py OUT_DIR [--wheel dashscope-2.0.2-py3-none-any.whl]

Qwen2 and Qwen2.5 use Qwen's byte-level BPE of 151,643 tokens, the same ranks as `qwen.tiktoken`, which
the PyPI wheel `dashscope` ships for local token counting (sha256-checked below; only that file is read,
nothing is installed). Added here, as in Qwen2.5's tokenizer.json: the pre-tokenizer pattern (single
digits), NFC normalisation and the 22 special tokens 151643-151664; `<|im_end|>` ends a turn,
`<|endoftext|>` pads, and there is no BOS token. The model's embedding has 151,936 rows, more than the
tokenizer, as the real checkpoints do.

Why not pad another tokenizer up to the model's vocabulary (bench/make_random_model.py does that for a
foreign tokenizer): 100k added tokens make every tokenizer load take minutes, which then shows up as
start-up time that a real model does not have.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import tempfile
import urllib.request
import zipfile
from pathlib import Path

WHEEL = "dashscope-2.0.2-py3-none-any.whl"
# PyPI's content-addressed path (from https://pypi.org/simple/dashscope/): the short
# packages/py3/d/dashscope/... form answers 404, which made tests/world/test_prompts.py skip
WHEEL_URL = (
    "https://files.pythonhosted.org/packages/cc/19/"
    "3f729e67baa11da71b426eb83a2f591966042294337f8326aa4841071126/"
    "dashscope-2.0.2-py3-none-any.whl"
)
WHEEL_SHA256 = "0602d1800f7433bdb7953560986eaf5146454ed3988636c0a91963ba24e74258"
RANKS = "dashscope/resources/qwen.tiktoken"
PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
SPECIAL = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
]  # fmt: skip
FIRST_SPECIAL_ID = 151643
# Qwen2.5's chat template without the tool-calling branch (ms-swift's qwen2_5 template does the same).
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def ranks_file(wheel: Path | None, work: Path) -> Path:
    """qwen.tiktoken from the dashscope wheel (downloaded when not given), after checking its sha256."""
    if wheel is None:
        wheel = work / WHEEL
        urllib.request.urlretrieve(WHEEL_URL, wheel)  # noqa: S310 - a fixed https URL, checked below
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise SystemExit(f"{wheel}: sha256 {digest}, expected {WHEEL_SHA256}")
    out = work / "qwen.tiktoken"
    with zipfile.ZipFile(wheel) as z:
        out.write_bytes(z.read(RANKS))
    return out


def vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """BPE vocabulary and merges from tiktoken ranks: a token's merges are the splits into two known
    tokens, in rank order (the algorithm of transformers' TikTokenConverter, which needs `blobfile` to
    read a local file)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_encoder = bytes_to_unicode()

    def text(b: bytes) -> str:
        return "".join(byte_encoder[ord(ch)] for ch in b.decode("latin-1"))

    vocab, merges = {}, []
    for token, rank in ranks.items():
        vocab[text(token)] = rank
        if len(token) == 1:
            continue
        local = [(token[:i], token[i:], rank) for i in range(1, len(token))]
        local = [m for m in local if m[0] in ranks and m[1] in ranks]
        merges += sorted(local, key=lambda m: (ranks[m[0]], ranks[m[1]]))
    merges.sort(key=lambda m: m[2])
    return vocab, [(text(a), text(b)) for a, b, _ in merges]


def build(out: Path, wheel: Path | None = None) -> None:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    with tempfile.TemporaryDirectory() as tmp:
        lines = ranks_file(wheel, Path(tmp)).read_bytes().splitlines()
    ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in lines if line)}
    vocab, merges = vocab_and_merges(ranks)
    backend = Tokenizer(BPE(vocab, merges, fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    backend.normalizer = normalizers.NFC()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    assert backend.token_to_id(SPECIAL[0]) == FIRST_SPECIAL_ID, backend.token_to_id(SPECIAL[0])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL[1:],
        clean_up_tokenization_spaces=False,
        model_max_length=131072,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    print(f"Qwen2.5 tokenizer: {len(tokenizer)} tokens -> {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--wheel", type=Path, help="a local copy of the dashscope wheel (no download)")
    args = p.parse_args()
    build(args.out, args.wheel)


if __name__ == "__main__":
    main()
