"""The weight-sync probe (entrypoint/child/sync_probe.py) on the CPU: its verdict, and its measurement
against a stand-in for vLLM's engine that generates with the merged trained weights (a working sync) or
with the base weights (a sync that never happened). tests/gpu/test_weight_sync.py runs it for real."""

from __future__ import annotations

import contextlib
import copy
import sys
import types
from pathlib import Path

import pytest

from entrypoint.world import models

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

EMBEDDED = Path("~/.cache/grpo-rig/models").expanduser()


@pytest.fixture(scope="module")
def probe():
    from entrypoint.child import sync_probe

    return sync_probe


@pytest.mark.parametrize(
    ("distances", "synced", "why"),
    [
        ((0.02, 0.30, 0.31), True, "from the trained weights"),
        ((0.30, 0.02, 0.31), False, "closer to the base model"),  # the push never reached vLLM
        ((0.02, 0.03, 0.03), False, "not yet distinguishable"),  # the trainer barely moved: no evidence
    ],
)
def test_the_verdict_needs_vllm_near_the_trainer_and_the_trainer_away_from_the_base(
    probe, distances, synced, why
):
    record = dict(zip(("vllm_vs_trained", "vllm_vs_base", "trained_vs_base"), distances, strict=True))
    ok, text = probe.verdict(record)
    assert ok is synced and why in text, text


class FakeEngine:
    """vLLM's LLMEngine as the probe drives it (add_request, step, has_unfinished_requests), answering with
    HF greedy decoding of `model` under `context()`."""

    def __init__(self, model, context=contextlib.nullcontext):
        self.model, self.context, self.pending = model, context, []

    def add_request(self, request_id, prompt, params):
        self.pending.append((request_id, prompt["prompt_token_ids"], params))

    def has_unfinished_requests(self):
        return bool(self.pending)

    def step(self):
        import torch

        out = []
        for request_id, ids, params in self.pending:
            tokens, logprobs = list(ids), []
            with self.context(), torch.no_grad():
                for _ in range(params.max_tokens):
                    logp = torch.log_softmax(
                        self.model(input_ids=torch.tensor([tokens])).logits[0, -1].float(), -1
                    )
                    t = int(logp.argmax())
                    logprobs.append({t: types.SimpleNamespace(logprob=float(logp[t]))})
                    tokens.append(t)
            completion = types.SimpleNamespace(token_ids=tokens[len(ids) :], logprobs=logprobs)
            out.append(types.SimpleNamespace(request_id=request_id, finished=True, outputs=[completion]))
        self.pending = []
        return out


@pytest.fixture(scope="module")
def trained(monkeypatch_module, probe):
    """The embedded model with a LoRA adapter whose B matrices moved (as after a few GRPO steps)."""
    if not models.is_prepared(models.lookup(models.DEFAULT_MODEL), EMBEDDED):
        pytest.skip("the embedded model is not prepared: run `make model`")
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # vllm's SamplingParams is all the probe imports from vLLM: a stand-in keeps this test light
    monkeypatch_module.setitem(
        sys.modules, "vllm", types.SimpleNamespace(SamplingParams=types.SimpleNamespace)
    )
    # the CPU stand-in decodes without a KV cache: fewer, shorter answers keep this test in seconds
    monkeypatch_module.setattr(probe, "PROBE_TOKENS", 6)
    monkeypatch_module.setattr(probe, "PROMPTS", probe.PROMPTS[:2])
    path = EMBEDDED / "SmolLM2-135M-Instruct"
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.02)
    model.train()
    return tokenizer, model


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _trainer(tokenizer, model, engine):
    return types.SimpleNamespace(
        processing_class=tokenizer,
        engine=types.SimpleNamespace(engine=engine),
        accelerator=types.SimpleNamespace(unwrap_model=lambda m: m),
        model=model,
        state=types.SimpleNamespace(global_step=1),
    )


@pytest.mark.torch
def test_an_engine_on_the_trained_weights_is_seen_as_synced(probe, trained):
    tokenizer, model = trained
    merged = copy.deepcopy(model).merge_and_unload().eval()  # what ms-swift loads into vLLM
    record = probe.measure(_trainer(tokenizer, model, FakeEngine(merged)))
    assert record["synced"], record["why"]
    assert record["greedy_agreement"]["trained"] == 1.0  # fp32, same weights: the same greedy tokens
    assert model.training, "the probe must give the trainer its model back in training mode"


@pytest.mark.torch
def test_an_engine_left_on_the_base_weights_is_seen_as_stale(probe, trained):
    tokenizer, model = trained
    record = probe.measure(_trainer(tokenizer, model, FakeEngine(model, model.disable_adapter)))
    assert not record["synced"] and "closer to the base model" in record["why"], record["why"]


@pytest.mark.torch
def test_an_offloaded_4bit_trainer_scores_vllm_s_answers_at_the_next_loss_back_on_the_gpu(
    probe, trained, tmp_path
):
    """bitsandbytes multiplies 4-bit weights on the GPU only (the 14B QLoRA run's probe failed on the CPU):
    with sleep mode the probe asks vLLM at the generation, while the trainer's 4-bit model is offloaded, and
    scores the answers at the step's next compute_loss, when the model is back; a bf16 model scores at
    once."""
    import json

    import torch

    tokenizer, model = trained
    merged = copy.deepcopy(model).merge_and_unload().eval()
    calls = []

    class GRPOTrainer:
        vllm_mode = "colocate"

        def __init__(self):
            self.__dict__.update(vars(_trainer(tokenizer, model, FakeEngine(merged))))
            self.args = types.SimpleNamespace(sleep_level=1)

        def _move_model_to_vllm(self):
            calls.append("push")

        def _engine_infer(self):
            calls.append("generate")

        def compute_loss(self):
            calls.append("loss")

    path = tmp_path / "probe.jsonl"
    probe.install(GRPOTrainer, str(path), break_sync=False)
    trainer = GRPOTrainer()
    weight = next(p for n, p in model.named_parameters() if "q_proj.base_layer" in n)
    weight.quant_state = object()  # what a bitsandbytes Params4bit carries
    try:
        trainer._move_model_to_vllm()
        trainer._engine_infer()
        assert not path.exists(), "a 4-bit model on the CPU must not be scored there"
        trainer.compute_loss()
    finally:
        del weight.quant_state
    (record,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert record["synced"], record
    assert calls == ["push", "generate", "loss"]
    assert probe.offloaded_4bit(model) is False and torch.is_grad_enabled()
