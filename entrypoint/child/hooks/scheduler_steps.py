"""GRPO_RIG_VLLM_SCHEDULER_STEPS=N (N > 1, with VLLM_USE_V1=0; plan sets both from VLLM_SCHEDULER_STEPS, which
the planner chooses by predicted step time, entrypoint/plan/shape.py): ms-swift 3.6.4's colocated engine runs
vLLM's V0 engine with N decode steps per schedule (multi-step scheduling: the host schedules, and turns
the sampled tokens into Python objects, once per N steps). Measured with vLLM alone, a round of
32 x 256 tokens took 0.99 s against 1.40 s on V1 with top-k first
(bench/generation/2026-12-03-0828-engines/). GRPOTrainer.prepare_vllm passes a fixed set of
engine arguments; GRPOVllmEngine takes engine_kwargs, which this fills, with multi_step_stream_outputs
off: ms-swift reads only finished requests (VllmEngine._infer_full), which V0 still returns at the step
they finish (engine/llm_engine.py:1129-1168), so the outputs of unfinished ones are built once per N
steps instead of every step. V0's MultiStepModelRunner wraps the model runner without the `model`
attribute ms-swift's weight sync reads (VllmEngine.inner_model): it is given one, the wrapped runner's.

With DISABLE_HOOKS=scheduler_steps the plan gives the colocated engine vLLM's V1 engine, as with
VLLM_SCHEDULER_STEPS=1 (V0 without multi-step scheduling is slower than either).
"""

from __future__ import annotations

import functools

from entrypoint.child.hooks.base import After, Hook, Target

ENGINE = "swift.llm.infer.infer_engine.grpo_vllm_engine"
RUNNER = "vllm.worker.multi_step_model_runner"


def _scheduler_steps(grpo_vllm_engine, steps: int) -> None:
    cls = grpo_vllm_engine.GRPOVllmEngine
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        engine_kwargs = dict(kwargs.get("engine_kwargs") or {})
        engine_kwargs.setdefault("num_scheduler_steps", steps)
        engine_kwargs.setdefault("multi_step_stream_outputs", False)
        kwargs["engine_kwargs"] = engine_kwargs
        original(self, *args, **kwargs)

    cls.__init__ = __init__


def _multi_step_runner_model(multi_step_model_runner) -> None:
    cls = multi_step_model_runner.MultiStepModelRunner
    if "model" not in vars(cls):

        def set_model(self, model):
            self._base_model_runner.model = model

        cls.model = property(lambda self: self._base_model_runner.model, set_model)


def install(value: str, after: After) -> None:
    """On with a whole number > 1; anything else leaves the engine as it is (a measuring knob: a child's
    start-up must not fail on it)."""
    steps = int(value) if value.isdigit() else 1
    if steps > 1:
        after.patch(ENGINE, lambda engine: _scheduler_steps(engine, steps))
        after.patch(RUNNER, _multi_step_runner_model)


HOOK = Hook(
    name="scheduler_steps",
    variable="GRPO_RIG_VLLM_SCHEDULER_STEPS",
    recipe_key="VLLM_SCHEDULER_STEPS",
    targets=(
        Target(ENGINE, "GRPOVllmEngine.__init__", "a4645110c930542f"),
        # builds the engine with keyword arguments and no engine_kwargs of its own
        Target("swift.trainers.rlhf_trainer.grpo_trainer", "GRPOTrainer.prepare_vllm", "62ee11a2af9769af"),
        # the runner without a `model` attribute, and what ms-swift's weight sync reads through it
        Target(RUNNER, "MultiStepModelRunner.__init__", "468ddb70badcb6dc"),
        Target("swift.llm.infer.infer_engine.vllm_engine", "VllmEngine.inner_model", "136dae0b4ad5fa73"),
    ),
    upstream=("ms-swift==3.6.4", "vllm==0.8.5.post1"),
    why="ms-swift 3.6.4's colocated engine gets vLLM V0's multi-step scheduling (N decode steps per "
    "schedule, outputs of unfinished requests built once per N steps) through GRPOVllmEngine's "
    "engine_kwargs, which GRPOTrainer.prepare_vllm leaves empty; V0's MultiStepModelRunner is given the "
    "`model` attribute ms-swift's weight sync reads.",
    saves="a round of 32 x 256 tokens, vLLM alone, took 0.99 s against 1.40 s on V1 with top-k first "
    "(bench/generation/2026-12-03-0828-engines/)",
    delete_when="when the image's vLLM has no V0 engine (vLLM removed multi-step scheduling, then V0, after "
    "0.8.5): then re-measure V1 against the 0.99 s round and drop VLLM_SCHEDULER_STEPS; or when ms-swift's "
    "GRPO passes engine arguments for a colocated engine from its own arguments",
    install=install,
)
