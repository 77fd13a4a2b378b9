"""Does vLLM generate from the weights the trainer trained? A check inside the trainer (GRPO_RIG_SYNC_PROBE,
installed by hooks/sync_probe.py).

In colocate mode ms-swift 3.6.4 merges the LoRA adapter into the policy, copies the merged weights into
the colocated vLLM engine (`llm_model.load_weights`) and unmerges, before every generation round
(GRPOTrainer._move_model_to_vllm); with hooks/adapter_sync.py the engine is given the adapter instead, and
the probe generates with it. Should that copy not reach the engine, every rollout comes from the
base model: training goes on, the loss moves, nothing fails, and the run learns from stale samples. So,
once, at the first weight push after an optimizer step (global_step >= 1), rank 0:

1. lets vLLM's engine answer a few fixed prompts greedily (temperature 0, PROBE_TOKENS tokens), with the
   log-probability of each token it chose;
2. scores the same tokens, teacher-forced, with the trainer's own model (adapter on, eval mode) and with
   the base model (the same model, adapter disabled);
3. appends one JSON line to GRPO_RIG_SYNC_PROBE: the tokens, the three log-probability lists and the
   mean absolute differences between them, `verdict()` of those.

Same weights give the same log-probabilities up to bf16 kernel noise (vLLM's and HF's kernels differ):
vLLM should sit much closer to the trainer's model than to the base model, and the trainer should have
moved away from the base model by more than that noise, or the comparison proves nothing. With
GRPO_RIG_SYNC_PROBE_BREAK=1 the push itself is skipped (vLLM keeps the base weights): the fault the check
must see, used by tests/gpu/test_weight_sync.py to show that it does.

Only with a colocated engine; with sleep mode the probe runs at the generation after that push (install).
"""

from __future__ import annotations

import json
import statistics
import time

PROMPTS = (
    "What is 17 + 25?",
    "Write one sentence about the sea.",
    "Numbers: [3, 4, 2]. Target: 14. Use each number once with + - * /.",
    "Name three colours.",
)
PROBE_TOKENS = 16
# A sync is seen when vLLM is at most half as far from the trainer's model as from the base model, and the
# trainer moved at least twice as far from the base model as vLLM is from the model it holds (the bf16
# noise between vLLM's and HF's kernels; the GPU test's runs print all three distances).
CLOSER_BY = 2.0


def mean_abs(a: list[float], b: list[float]) -> float:
    """Mean absolute difference of two equally long lists (nan-free inputs)."""
    return statistics.fmean(abs(x - y) for x, y in zip(a, b, strict=True)) if a else 0.0


def verdict(record: dict) -> tuple[bool, str]:
    """(synced, why) from a probe record's distances: `vllm_vs_trained`, `vllm_vs_base`, `trained_vs_base`
    (mean absolute log-probability differences per token)."""
    d_sync, d_stale, d_moved = record["vllm_vs_trained"], record["vllm_vs_base"], record["trained_vs_base"]
    numbers = f"vLLM vs trained {d_sync:.4f}, vLLM vs base {d_stale:.4f}, trained vs base {d_moved:.4f}"
    noise = min(d_sync, d_stale)  # vLLM against whichever model it really holds: kernel noise
    if d_moved < CLOSER_BY * noise:
        return False, f"the trained model is not yet distinguishable from the base model ({numbers})"
    if CLOSER_BY * d_sync <= d_stale:
        return True, f"vLLM generates from the trained weights ({numbers})"
    if d_stale < d_sync:
        return (
            False,
            f"vLLM generates from weights closer to the base model than to the trained one ({numbers})",
        )
    return False, f"vLLM's weights are neither clearly the trained nor the base model's ({numbers})"


def _vllm_greedy(
    engine, prompt_ids: list[list[int]], lora_request=None
) -> list[tuple[list[int], list[float]]]:
    """(tokens, log-probabilities) of a greedy answer per prompt from a vLLM LLMEngine (V0 or V1), with the
    adapter of `lora_request` (vLLM's LoRARequest) when the engine serves the trained adapter itself
    (hooks/adapter_sync.py)."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=PROBE_TOKENS, logprobs=1)
    ids = [f"grpo-rig-probe-{i}" for i in range(len(prompt_ids))]
    for request_id, prompt in zip(ids, prompt_ids, strict=True):
        adapter = {"lora_request": lora_request} if lora_request is not None else {}
        engine.add_request(request_id, {"prompt_token_ids": prompt}, params, **adapter)
    done = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                done[output.request_id] = output
    out = []
    for request_id in ids:
        completion = done[request_id].outputs[0]
        tokens = list(completion.token_ids)
        out.append((tokens, [step[t].logprob for step, t in zip(completion.logprobs, tokens, strict=True)]))
    return out


def teacher_forced(model, prompt: list[int], tokens: list[int]) -> tuple[list[float], list[int]]:
    """(log-probability of each of `tokens` after `prompt`, the model's argmax at each position)."""
    import torch

    device = next(model.parameters()).device
    ids = torch.tensor([prompt + tokens], device=device)
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    target = torch.tensor(tokens, device=device)
    return logp.gather(1, target[:, None])[:, 0].tolist(), logp.argmax(dim=-1).tolist()


def vllm_answers(trainer) -> tuple[list[list[int]], list[tuple[list[int], list[float]]]]:
    """(the probe's prompts as token ids, vLLM's greedy answer to each with its log-probabilities): step 1 of
    the module docstring, from the trainer's engine (awake) and tokenizer."""
    tokenizer = trainer.processing_class
    prompts = [
        tokenizer(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            ),
            add_special_tokens=False,
        )["input_ids"]
        for p in PROMPTS
    ]
    answers = _vllm_greedy(trainer.engine.engine, prompts, getattr(trainer, "_grpo_rig_lora_request", None))
    return prompts, answers


def scored(trainer, prompts: list[list[int]], answers: list[tuple[list[int], list[float]]]) -> dict:
    """The probe's record: vLLM's `answers` scored, teacher-forced, by the trainer's model with its adapter on
    and off (steps 2-3 of the module docstring), wherever the model is."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    training = model.training
    model.eval()
    try:
        trained = [teacher_forced(model, p, tokens) for p, (tokens, _) in zip(prompts, answers, strict=True)]
        with model.disable_adapter():
            base = [teacher_forced(model, p, tokens) for p, (tokens, _) in zip(prompts, answers, strict=True)]
    finally:
        model.train(training)
    lp_vllm = [x for _, lps in answers for x in lps]
    lp_trained = [x for lps, _ in trained for x in lps]
    lp_base = [x for lps, _ in base for x in lps]
    record = {
        "t": round(time.time(), 3),
        "step": trainer.state.global_step,
        "prompts": list(PROMPTS),
        "tokens": [toks for toks, _ in answers],
        "logprobs": {"vllm": lp_vllm, "trained": lp_trained, "base": lp_base},
        "vllm_vs_trained": mean_abs(lp_vllm, lp_trained),
        "vllm_vs_base": mean_abs(lp_vllm, lp_base),
        "trained_vs_base": mean_abs(lp_trained, lp_base),
        # how often each HF model's own greedy choice is vLLM's token (teacher-forced positions)
        "greedy_agreement": {"trained": agreement(trained, answers), "base": agreement(base, answers)},
    }
    record["synced"], record["why"] = verdict(record)
    return record


def measure(trainer) -> dict:
    """The probe's record for the trainer's current weights (module docstring)."""
    return scored(trainer, *vllm_answers(trainer))


def offloaded_4bit(model) -> bool:
    """Whether `model` holds bitsandbytes 4-bit weights (a parameter with a quant_state) and is in CPU memory
    (OFFLOAD_MODEL): bitsandbytes 0.45.5 multiplies 4-bit weights on the GPU only, so it cannot score
    there."""
    params = list(model.parameters())
    return (
        bool(params)
        and params[0].device.type == "cpu"
        and any(getattr(p, "quant_state", None) is not None for p in params)
    )


def agreement(
    scored: list[tuple[list[float], list[int]]], answers: list[tuple[list[int], list[float]]]
) -> float:
    """The share of positions where a model's argmax (teacher_forced's second list) is vLLM's token."""
    pairs = [
        (a, t)
        for (_, argmax), (tokens, _) in zip(scored, answers, strict=True)
        for a, t in zip(argmax, tokens, strict=True)
    ]
    return statistics.fmean(a == t for a, t in pairs) if pairs else 0.0


def _failed(trainer, exc: Exception, break_sync: bool) -> dict:
    """The record of a probe that could not be taken (the probe never ends the run it observes)."""
    return {"step": trainer.state.global_step, "error": repr(exc), "sync_skipped": break_sync}


def _record(trainer, break_sync: bool, step=measure, *args) -> dict:
    """The probe's record now (`step(trainer, *args)`), or why it could not be taken (_failed)."""
    try:
        record = step(trainer, *args)
    except Exception as exc:
        return _failed(trainer, exc, break_sync)
    record["sync_skipped"] = break_sync
    return record


def install(trainer_cls, path: str, break_sync: bool) -> None:
    """Wrap trainer_cls._move_model_to_vllm: the probe after the first push that follows an optimizer step;
    with `break_sync`, no push at all (vLLM keeps the weights it had). With sleep mode, vLLM's KV cache is
    still asleep at the push, so the probe asks vLLM at the generation that follows
    (trainer_cls._engine_infer), where the whole engine is awake; the trainer's model may then be offloaded to
    the CPU, where it scores the probe's tokens, except 4-bit weights (offloaded_4bit), which score them at
    the step's next compute_loss, back on the GPU, before the step's optimizer update (the weights vLLM was
    given)."""
    push = trainer_cls._move_model_to_vllm
    engine_infer = trainer_cls._engine_infer
    compute_loss = trainer_cls.compute_loss

    def write(record: dict) -> None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def _move_model_to_vllm(self, *args, **kwargs):
        if not break_sync:
            push(self, *args, **kwargs)
        if self.state.global_step < 1 or getattr(self, "_grpo_rig_probed", False):
            return
        self._grpo_rig_probed = True
        if getattr(self, "vllm_mode", None) != "colocate":
            write(
                {
                    "step": self.state.global_step,
                    "skipped": "the probe needs a colocated vLLM",
                    "sync_skipped": break_sync,
                }
            )
        elif getattr(self.args, "sleep_level", 0) > 0:
            self._grpo_rig_probe_pending = True
        else:
            write(_record(self, break_sync))

    def _engine_infer(self, *args, **kwargs):
        if getattr(self, "_grpo_rig_probe_pending", False):
            self._grpo_rig_probe_pending = False
            if offloaded_4bit(self.accelerator.unwrap_model(self.model)):
                try:
                    self._grpo_rig_probe_answers = vllm_answers(self)
                except Exception as exc:
                    write(_failed(self, exc, break_sync))
            else:
                write(_record(self, break_sync))
        return engine_infer(self, *args, **kwargs)

    def _compute_loss(self, *args, **kwargs):
        answers = getattr(self, "_grpo_rig_probe_answers", None)
        if answers is not None:
            self._grpo_rig_probe_answers = None
            write(_record(self, break_sync, scored, *answers))
        return compute_loss(self, *args, **kwargs)

    trainer_cls._move_model_to_vllm = _move_model_to_vllm
    trainer_cls._engine_infer = _engine_infer
    trainer_cls.compute_loss = _compute_loss
