"""The committed table of what vLLM loads in bitsandbytes 4-bit with LoRA is the installed vLLM's (the lock's
0.8.5.post1), read from its source with ast (entrypoint/facts/vllm_bnb.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from entrypoint.facts import vllm_bnb


@pytest.mark.cli  # parses vLLM's model files (~3 s)
def test_committed_table_matches_the_installed_vllm():
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vLLM is not installed in this environment")
    committed = json.loads(vllm_bnb.DATA_FILE.read_text())["architectures"]
    assert vllm_bnb.scan(Path(spec.origin).parent) == committed, (
        "regenerate: python -m entrypoint.facts.vllm_bnb --write"
    )


def test_the_table_knows_the_recipes_families_and_the_classes_vllm_refuses():
    for arch in (
        "Qwen3ForCausalLM",
        "Qwen2ForCausalLM",
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Gemma3ForCausalLM",
    ):
        assert vllm_bnb.why_not(arch) == vllm_bnb.SUPPORTED, arch
    assert vllm_bnb.why_not("Qwen3MoeForCausalLM") == vllm_bnb.NO_PACKED  # no packed_modules_mapping in 0.8.5
    assert vllm_bnb.why_not("FalconForCausalLM") == vllm_bnb.NO_LORA  # packed, but not SupportsLoRA
    assert vllm_bnb.why_not("NotAModelForCausalLM") is None
