"""The planner's batch shape (entrypoint/plan/shape.py): rules as tables on the pure chooser, with a stand-in
memory model, plus what `plan` prints."""

from __future__ import annotations

import pytest

from entrypoint.plan import budget, memory, shape, speed
from entrypoint.recipe.load import text_of
from tests.conftest import INVENTORIES, build_plan, clean_env, draft_plan, run_cli

COUNTDOWN = ("recipe=countdown-1x4090",)
PINNED = ("GRADIENT_CHECKPOINTING=true", "USE_LIGER_KERNEL=false", "VLLM_SCHEDULER_STEPS=1")


def linear(per_completion: float, base: float):
    """A stand-in memory model: peak = base + per_completion x micro-batch on every training card."""

    def estimate(w: memory.Workload, colocate) -> list[memory.GpuEstimate]:
        return [memory.GpuEstimate(0, "trainer", 24.0, base + per_completion * w.per_device, {})]

    return estimate


def chosen(*pairs: str, estimate=linear(2.0, 4.0), inventory="1x4090-driver535") -> dict[str, str]:
    """The planner's choices as the recipe writes them (their text)."""
    d, _ = draft_plan(*COUNTDOWN, *pairs, inventory=inventory)
    return {c.key: text_of(c.value) for c in shape.choose(d.recipe, d.layout, budget_of(d), estimate)}


def test_choices_are_typed():
    """The planner's values reach the recipe as the types their keys have, never as text."""
    d, _ = draft_plan(*COUNTDOWN, inventory="1x4090-driver535")
    typed = {c.key: c.value for c in shape.choose(d.recipe, d.layout, budget_of(d), linear(2.0, 4.0))}
    assert type(typed["PER_DEVICE_TRAIN_BATCH_SIZE"]) is int and type(typed["SLEEP_LEVEL"]) is int
    assert type(typed["VLLM_GPU_MEMORY_UTILIZATION"]) is float
    assert all(type(typed[k]) is bool for k in ("GRADIENT_CHECKPOINTING", "USE_LIGER_KERNEL") if k in typed)


def budget_of(d):
    """What plan.build's _budget stage computes for a draft."""
    return budget.compute(d.recipe, d.layout, d.inventory, d.facts, d.dataset_paths)


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        # 32 completions per step: the largest divisor whose peak (4 + 2 x pd) leaves 10 % of 24 GiB
        ((), {"PER_DEVICE_TRAIN_BATCH_SIZE": "8", "GRADIENT_ACCUMULATION_STEPS": "4"}),
        # the step's work is the recipe's: 64 completions, same micro-batch, twice the accumulation
        (
            ("GENERATION_BATCH_SIZE=64",),
            {"PER_DEVICE_TRAIN_BATCH_SIZE": "8", "GRADIENT_ACCUMULATION_STEPS": "8"},
        ),
        # the user's micro-batch stays; only the accumulation follows
        (("PER_DEVICE_TRAIN_BATCH_SIZE=2",), {"GRADIENT_ACCUMULATION_STEPS": "16"}),
        # the user's accumulation stays; the micro-batch follows
        (("GRADIENT_ACCUMULATION_STEPS=8",), {"PER_DEVICE_TRAIN_BATCH_SIZE": "4"}),
        # both set: the recipe's shape, untouched (its generation batch no longer defines the step)
        (("PER_DEVICE_TRAIN_BATCH_SIZE=1", "GRADIENT_ACCUMULATION_STEPS=32", "GENERATION_BATCH_SIZE="), {}),
        (("STEPS_PER_GENERATION=2",), {}),
        # switched off: ms-swift's micro-batch of one, the step's 32 completions kept
        (("AUTO_SHAPE=false",), {"PER_DEVICE_TRAIN_BATCH_SIZE": "1", "GRADIENT_ACCUMULATION_STEPS": "32"}),
    ],
)
def test_batch_shape(pairs, expected):
    got = chosen(*pairs)
    batch = {k: v for k, v in got.items() if k in expected or k.endswith(("_SIZE", "_STEPS"))}
    assert {k: v for k, v in batch.items() if k != "VLLM_SCHEDULER_STEPS"} == expected  # the engine: below


def levers(base: float, per_completion: float, no_checkpointing: float, liger: float):
    """A stand-in memory model with levers: each completion of a micro-batch costs `per_completion` GiB,
    plus `no_checkpointing` without gradient checkpointing, minus `liger` with liger's fused loss."""

    def estimate(w: memory.Workload, colocate) -> list[memory.GpuEstimate]:
        each = (
            per_completion + (0 if w.gradient_checkpointing else no_checkpointing) - (liger if w.liger else 0)
        )
        return [memory.GpuEstimate(0, "trainer", 24.0, base + each * w.per_device, {})]

    return estimate


def levers_chosen(*pairs: str, estimate) -> dict[str, str]:
    """The micro-batch and the levers the planner turned (a lever it writes at its default is left out)."""
    defaults = {"GRADIENT_CHECKPOINTING": "true", "USE_LIGER_KERNEL": "false"}
    return {
        k: v
        for k, v in chosen(*pairs, estimate=estimate).items()
        if k == "PER_DEVICE_TRAIN_BATCH_SIZE" or defaults.get(k, v) != v
    }


# The step-time model these cases are written against (the fit to the lever runs of 2026-12-02 14:24 UTC, in
# speed.py's form), so that a refit of data/speed_coefficients.json moves the planner's choices, not these
# cases.
STEP_TIMES = {
    "plain": (0.2695, 0.0),
    "plain, checkpointing": (0.4864, 0.0026),
    "liger": (0.372, 0.0),
    "liger, checkpointing": (0.599, 0.0029),
}


@pytest.fixture
def step_times(monkeypatch):
    monkeypatch.setattr(speed, "coefficients", lambda: STEP_TIMES)


@pytest.mark.usefixtures("step_times")
@pytest.mark.parametrize(
    ("pairs", "memory_model", "expected"),
    [
        # 0.5 GiB a completion: everything fits; one micro-batch of 32 without checkpointing (1 x 0.27 s)
        (
            (),
            levers(4.0, 0.5, 0.0, 0.0),
            {"PER_DEVICE_TRAIN_BATCH_SIZE": "32", "GRADIENT_CHECKPOINTING": "false"},
        ),
        # checkpointing off costs 0.8 GiB a completion more: it fits at 8 (4 x 0.27 s), faster than the
        # recipe's checkpointing, whose 16 does not fit (8: 4 x 0.50 s)
        (
            (),
            levers(4.0, 1.2, 0.8, 0.0),
            {"PER_DEVICE_TRAIN_BATCH_SIZE": "8", "GRADIENT_CHECKPOINTING": "false"},
        ),
        # liger saves 0.8 GiB a completion: liger with checkpointing fits one micro-batch of 32 (1 x 0.67 s)
        ((), levers(4.0, 1.2, 0.8, 0.8), {"PER_DEVICE_TRAIN_BATCH_SIZE": "32", "USE_LIGER_KERNEL": "true"}),
        # what the recipe sets stays: checkpointing on, liger off; the largest micro-batch that fits
        (PINNED, levers(4.0, 1.2, 0.8, 0.8), {"PER_DEVICE_TRAIN_BATCH_SIZE": "8"}),
        # OVERLONG_FILTER: ms-swift's liger path skips its mask, a different loss: never liger
        (
            ("OVERLONG_FILTER=true",),
            levers(4.0, 1.2, 0.8, 0.8),
            {"PER_DEVICE_TRAIN_BATCH_SIZE": "8", "GRADIENT_CHECKPOINTING": "false"},
        ),
        # DELTA (two-sided clipping): ms-swift refuses it with liger
        (
            ("DELTA=2.0",),
            levers(4.0, 1.2, 0.8, 0.8),
            {"PER_DEVICE_TRAIN_BATCH_SIZE": "8", "GRADIENT_CHECKPOINTING": "false"},
        ),
    ],
)
def test_the_planner_turns_the_lever_with_the_least_predicted_time_that_fits(pairs, memory_model, expected):
    """Micro-batch, gradient checkpointing and liger's fused loss, chosen together by predicted
    training time per step (entrypoint/plan/speed.py) among the shapes that leave 10 % of the card free."""
    assert levers_chosen(*pairs, estimate=memory_model) == expected


def test_levers_are_chosen_only_where_they_were_measured():
    """Outside colocate (vLLM on its own GPU here) the planner keeps the recipe's levers."""
    d, _ = draft_plan("recipe=smoke-server", inventory="2x4090-driver535")
    keys = {c.key for c in shape.choose(d.recipe, d.layout, budget_of(d), levers(4.0, 1.0, 1.0, 0.5))}
    assert not keys & {"GRADIENT_CHECKPOINTING", "USE_LIGER_KERNEL"}


@pytest.mark.usefixtures("step_times")
def test_a_lever_s_reason_names_the_predicted_time_against_the_levers_left_alone():
    d, _ = draft_plan(*COUNTDOWN, inventory="1x4090-driver535")
    reasons = {
        c.key: c.reason for c in shape.choose(d.recipe, d.layout, budget_of(d), levers(4.0, 1.2, 0.8, 0.0))
    }
    why = reasons["PER_DEVICE_TRAIN_BATCH_SIZE"]
    assert why.startswith(
        "the least predicted training time per step (forward and backward; the generation round, the same "
        "for every shape, aside), 1.1 s (4 x 0.27 s (plain))"
    )
    assert "20.0 of 24.0 GiB" in why
    assert why.endswith(
        "without turning a lever (checkpointing and liger as the recipe or ms-swift has them), micro-batch "
        "8: 2.0 s (4 x 0.50 s (plain, checkpointing))"
    )
    assert reasons["GRADIENT_CHECKPOINTING"].startswith("the fastest shape that fits")
    # the lever it keeps is written and explained too
    assert reasons["USE_LIGER_KERNEL"].startswith("the fastest shape that fits")


def test_nothing_fits_gives_the_smallest_micro_batch():
    got = chosen(estimate=linear(2.0, 30.0))
    assert got["PER_DEVICE_TRAIN_BATCH_SIZE"] == "1" and got["GRADIENT_ACCUMULATION_STEPS"] == "32"


def test_reasons_name_the_peak_and_the_next_size_up():
    # the recipe's levers fixed: the largest micro-batch that fits (lever choice: the tests below)
    d, _ = draft_plan(*COUNTDOWN, *PINNED, inventory="1x4090-driver535")
    reasons = {c.key: c.reason for c in shape.choose(d.recipe, d.layout, budget_of(d), linear(2.0, 4.0))}
    assert "20.0 of 24.0 GiB" in reasons["PER_DEVICE_TRAIN_BATCH_SIZE"]
    assert "16 would need 36.0 GiB" in reasons["PER_DEVICE_TRAIN_BATCH_SIZE"]
    assert "one generation round per step" in reasons["GRADIENT_ACCUMULATION_STEPS"]


@pytest.mark.parametrize(
    ("pairs", "sleep"),
    [((), "0"), (("OFFLOAD_MODEL=true",), "1"), (("SLEEP_LEVEL=1",), None)],
)
def test_sleep_level(pairs, sleep):
    assert chosen(*pairs).get("SLEEP_LEVEL") == sleep


@pytest.mark.parametrize(
    ("pairs", "v0"), [(("VLLM_SCHEDULER_STEPS=1",), False), (("VLLM_SCHEDULER_STEPS=8",), True)]
)
def test_vllm_share_is_the_smallest_whose_kv_cache_holds_the_round(pairs, v0):
    """V1 counts the CUDA context and the trainer's weights against its share, V0 only its own
    (memory.kv_budget): 0.25 and 0.10 of a 24 GiB card for countdown-1x4090's round."""
    d, _ = draft_plan(*COUNTDOWN, *pairs, inventory="1x4090-driver535")
    w = budget_of(d).workload
    util = float(chosen(*pairs)["VLLM_GPU_MEMORY_UTILIZATION"])
    resident = memory.estimate_training(w).weights
    tokens = 32 * (w.prompt_tokens + w.completion_tokens)
    need = shape.KV_MARGIN * memory.kv_gib(w.dims, w.dtype_bytes, max(2304, tokens))
    assert memory.kv_budget(w, 24.0, util, resident, engine_v0=v0) >= need
    smaller = util - shape.UTILIZATION_STEP
    assert (
        smaller < shape.UTILIZATION_FLOOR or memory.kv_budget(w, 24.0, smaller, resident, engine_v0=v0) < need
    )
    assert util == (0.10 if v0 else 0.25)
    assert "VLLM_GPU_MEMORY_UTILIZATION" not in chosen(*pairs, "VLLM_GPU_MEMORY_UTILIZATION=0.4")


def test_the_engine_with_the_least_predicted_step_is_chosen_and_the_reason_compares_both():
    """vLLM's V0 engine with multi-step scheduling (VLLM_SCHEDULER_STEPS=8) against ms-swift's V1
    engine, by predicted step time (generation round + training) among shapes that fit: with the fitted
    rounds (8.5 and 5.0 ms a decode step) V0 x 8 wins; were V1's rounds the faster, V1 would."""
    assert chosen()["VLLM_SCHEDULER_STEPS"] == "8"
    d, _ = draft_plan(*COUNTDOWN, inventory="1x4090-driver535")
    reasons = {c.key: c.reason for c in shape.choose(d.recipe, d.layout, budget_of(d), linear(0.3, 4.0))}
    why = reasons["VLLM_SCHEDULER_STEPS"]
    assert why.startswith("the least predicted step time of the engines whose shape fits: vLLM's V0 engine")
    assert "against ms-swift's V1 engine (1 decode step(s) per schedule)" in why
    assert "256 decode steps x" in why


def test_a_faster_v1_round_keeps_the_v1_engine(monkeypatch):
    monkeypatch.setattr(speed, "generation_coefficients", lambda: {"v1": 0.003, "v0, 8 steps": 0.005})
    assert chosen()["VLLM_SCHEDULER_STEPS"] == "1"


@pytest.mark.parametrize(
    ("pairs", "inventory"),
    [
        (("VLLM_SCHEDULER_STEPS=1",), "1x4090-driver535"),  # the recipe's engine stays
        (("VLLM_USE_V1=1",), "1x4090-driver535"),  # the recipe's engine stays
        (("VLLM_USE_V1=0",), "1x4090-driver535"),  # V0 without multi-step: the recipe's choice
        (("SLEEP_LEVEL=1",), "1x4090-driver535"),  # V0's sleep mode: never measured
        (("OFFLOAD_MODEL=true",), "1x4090-driver535"),
        (("TRAIN_GPUS=0,1",), "2x4090-driver535"),  # two colocated engines: never measured on V0
    ],
)
def test_the_engine_is_left_alone_where_the_recipe_sets_it_or_it_was_not_measured(pairs, inventory):
    assert "VLLM_SCHEDULER_STEPS" not in chosen(*pairs, inventory=inventory)


def test_a_v0_engine_s_peak_counts_what_the_process_held_before_it():
    """memory.colocate_peak: V0 sizes its own share only; the CUDA context and the trainer's weights come on
    top (fitted: bench/calibration/memory-calibration.json, the V0 runs of 2026-12-03)."""
    v1 = build_plan(
        *COUNTDOWN,
        "VLLM_SCHEDULER_STEPS=1",
        "VLLM_GPU_MEMORY_UTILIZATION=0.25",
        "EMULATE_VRAM_GB=24",
        inventory="1x4090-driver535",
    )
    v0 = build_plan(
        *COUNTDOWN,
        "VLLM_USE_V1=0",
        "VLLM_GPU_MEMORY_UTILIZATION=0.25",
        "EMULATE_VRAM_GB=24",
        "PER_DEVICE_TRAIN_BATCH_SIZE=32",
        "GRADIENT_CHECKPOINTING=true",
        "USE_LIGER_KERNEL=true",
        inventory="1x4090-driver535",
    )
    (e1,), (e0,) = v1.budget.estimates(v1.layout), v0.budget.estimates(v0.layout)
    before = e0.parts["context and weights before vLLM (V0)"]
    assert "context and weights before vLLM (V0)" not in e1.parts
    assert before == pytest.approx(memory.coefficients()["colocate_v0_before_gib"] + 0.92, abs=0.05)
    assert e0.peak_gib == pytest.approx(e1.peak_gib + before, abs=0.01)


def test_a_bigger_card_gets_a_bigger_micro_batch():
    """With the real memory model: 24 GB against an 80 GB A100 (EMULATE_VRAM_GB caps a card), for a round
    that does not fit one micro-batch on 24 GB (the recipe's levers, 512-token prompts)."""
    heavy = (*COUNTDOWN, *PINNED, "PROMPT_TOKENS=512")
    small = build_plan(*heavy, "EMULATE_VRAM_GB=24", inventory="2xA100-nvlink-ib")
    big = build_plan(*heavy, inventory="2xA100-nvlink-ib")
    assert (
        small.recipe.trainer_args.per_device_train_batch_size
        < big.recipe.trainer_args.per_device_train_batch_size
    )


def test_cpu_runs_keep_the_step_with_microbatches_of_one():
    got = chosen("TRAIN_GPUS=none", "USE_VLLM=false", "VLLM_MAX_MODEL_LEN=")
    assert got == {"PER_DEVICE_TRAIN_BATCH_SIZE": "1", "GRADIENT_ACCUMULATION_STEPS": "32"}


@pytest.mark.cli
def test_plan_prints_each_choice_and_the_manifest_source_is_the_planner():
    proc = run_cli("plan", *COUNTDOWN, f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}", env=clean_env())
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "batch shape, chosen by the planner" in out
    for key in (
        "PER_DEVICE_TRAIN_BATCH_SIZE",
        "GRADIENT_ACCUMULATION_STEPS",
        "VLLM_GPU_MEMORY_UTILIZATION",
        "SLEEP_LEVEL",
    ):
        assert f"  {key}=" in out
    plan = build_plan(*COUNTDOWN, inventory="1x4090-driver535")
    assert plan.recipe.source("PER_DEVICE_TRAIN_BATCH_SIZE").startswith(
        "planner: the least predicted training time"
    )
    assert plan.recipe.source("NUM_GENERATIONS").startswith(
        "recipes/countdown-1x4090.env:"
    )  # the recipe's, kept


@pytest.mark.parametrize(
    "fixed",
    [("PER_DEVICE_TRAIN_BATCH_SIZE=4", "GRADIENT_ACCUMULATION_STEPS=8"), ("STEPS_PER_GENERATION=1",)],
)
def test_vllm_share_is_sized_when_the_recipe_fixes_the_batch(fixed):
    """Cases re-run: with the micro-batch and accumulation both set, the planner returned before sizing
    vLLM's share, which stayed at ms-swift's 0.9 on a 24 GiB card (the trainer left 2 GiB)."""
    plan = build_plan("recipe=countdown-1x4090", *fixed, inventory="1x4090-driver535")
    assert plan.recipe.source("VLLM_GPU_MEMORY_UTILIZATION").startswith("planner:")
    assert plan.recipe.trainer_args.vllm_gpu_memory_utilization < 0.5
    assert not plan.recipe.source("PER_DEVICE_TRAIN_BATCH_SIZE").startswith("planner:")  # the user's batch
    assert not [p for p in plan.problems if p.fatal]


def test_a_colocated_trainer_without_sleep_mode_gets_expandable_segments_with_the_reason():
    """Torch's caching allocator grew the colocated peak by whole working sets during a run; the
    planner writes expandable segments where vLLM's sleep-mode pool does not forbid them, and keeps a value
    any layer sets (budget.allocator)."""
    key = "PYTORCH_CUDA_ALLOC_CONF"
    plan = build_plan(*COUNTDOWN, inventory="1x4090-driver535")
    (trainer,) = plan.processes
    assert trainer.env[key] == "expandable_segments:True"
    assert plan.recipe.source(key).startswith(
        "planner: vLLM's KV cache and the trainer's tensors share one process"
    )
    # OFFLOAD_MODEL: the planner itself chooses SLEEP_LEVEL=1, whose memory pool refuses expandable segments
    for pairs in (("SLEEP_LEVEL=1",), ("AUTO_SHAPE=false",), ("OFFLOAD_MODEL=true",)):
        assert key not in build_plan(*COUNTDOWN, *pairs, inventory="1x4090-driver535").processes[0].env, pairs
    mine = build_plan(*COUNTDOWN, f"{key}=garbage_collection_threshold:0.6", inventory="1x4090-driver535")
    assert mine.processes[0].env[key] == "garbage_collection_threshold:0.6"
    server = build_plan("recipe=smoke-server", inventory="2x4090-driver535")
    assert all(key not in p.env for p in server.processes)
