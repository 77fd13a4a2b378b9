"""The step-time model (entrypoint/plan/speed.py) against the lever runs it was fitted to."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from entrypoint.plan import memory, speed
from tests.conftest import ROOT

CALIBRATION = ROOT / "bench" / "calibration" / "speed-calibration.json"


def test_every_lever_run_is_within_25_percent_of_the_fitted_micro_batch_time():
    """Each lever's time is measured (median micro-batch of a 5-step run on the lent H200); runs of
    the same configuration differ by up to 25 % there (0.41 and 0.54 s for countdown-1x4090's shape)."""
    points = json.loads(CALIBRATION.read_text())["points"]
    assert {p["lever"] for p in points} == set(speed.LEVERS)
    c = speed.coefficients()
    for p in points:
        base, per_ktoken = c[p["lever"]]
        predicted = base + per_ktoken * p["tokens_per_micro_batch"] / 1000
        assert abs(predicted / p["measured_s"] - 1) <= 0.25, p["name"]


def test_a_step_costs_its_micro_batches_and_checkpointing_costs_time():
    dims = memory.ModelDims.from_config(memory.shipped_config("Qwen/Qwen2.5-0.5B-Instruct"))
    w = memory.Workload(
        dims=dims,
        dtype_bytes=2,
        full=False,
        lora_rank=8,
        per_device=8,
        generation_per_device=32,
        prompt_tokens=125,
        completion_tokens=256,
    )
    shipped = speed.training_time(w, 32)
    assert shipped.micro_batches == 4 and shipped.lever == "plain, checkpointing"
    assert shipped.seconds == 4 * shipped.per_micro_batch
    for liger in (False, True):
        on = speed.training_time(memory.dataclasses.replace(w, liger=liger), 32)
        off = speed.training_time(
            memory.dataclasses.replace(w, liger=liger, gradient_checkpointing=False), 32
        )
        assert off.seconds < on.seconds
    one = speed.training_time(memory.dataclasses.replace(w, per_device=32), 32)
    assert one.micro_batches == 1 and one.seconds < shipped.seconds


GENERATION = ROOT / "bench" / "calibration" / "generation-calibration.json"


def archived_manifest(run: str) -> bool:
    """Whether a run named as its archive extracted in place (bench/QUESTION/ARCHIVE/RUN) has its
    manifest.json in bench/QUESTION/ARCHIVE.tar.gz."""
    question, archive, *member = Path(run).relative_to("bench").parts
    with tarfile.open(ROOT / "bench" / question / f"{archive}.tar.gz") as tar:
        return "/".join([archive, *member, "manifest.json"]) in tar.getnames()


def test_every_measured_generation_round_is_within_10_percent_of_its_engine_s_fit():
    """The generation round of each engine the planner chooses between (ms-swift's V1; vLLM's V0
    with 8 decode steps per schedule) is measured in the trainer on an H200 (runs archived under bench/), and
    the committed coefficients are bench/fit_generation.py's fit of those points."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from fit_generation import fit

    points = json.loads(GENERATION.read_text())["points"]
    assert {speed.engine(1), speed.engine(8)} <= {p["engine"] for p in points}
    c = speed.generation_coefficients()
    assert fit(points).items() <= c.items()
    for p in points:
        assert archived_manifest(p["run"]), p["run"]
        predicted = p["decode_steps"] * c[p["engine"]]
        assert abs(predicted / p["round_s"] - 1) <= 0.10, p["run"]


def test_a_round_is_its_decode_steps_at_the_engine_s_seconds_per_step():
    dims = memory.ModelDims.from_config(memory.shipped_config("Qwen/Qwen2.5-0.5B-Instruct"))
    w = memory.Workload(
        dims=dims,
        dtype_bytes=2,
        full=False,
        lora_rank=8,
        per_device=8,
        generation_per_device=32,
        prompt_tokens=125,
        completion_tokens=256,
    )
    coef = {"v1": 0.008, "v0": 0.007, "v0, 8 steps": 0.005}
    assert speed.generation_time(w, 1, coef=coef).seconds == 256 * 0.008
    assert speed.generation_time(w, 1, v0=True, coef=coef).engine == "v0"
    assert speed.generation_time(w, 8, coef=coef).seconds == 256 * 0.005
    assert speed.generation_time(w, 4, coef=coef) is None  # never measured: no prediction
