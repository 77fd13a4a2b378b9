"""GPU tests: real GRPO runs through the entrypoint on an NVIDIA GPU, vLLM included.

Marked `gpu` and skipped where NVML lists no GPU (CI's CPU machine). Run them with
`pytest -m gpu tests/gpu` on a GPU host (`.github/workflows/gpu-smoke.yml` on self-hosted runners,
bench/device/gpu-work.sh on the lent H200). Models have random weights, built here from a shipped
architecture with `bench/make_random_model.py`:
- GRPO_RIG_TEST_MODEL: a model directory to use as it is (the lent machine passes its Qwen2.5-0.5B);
- else GRPO_RIG_TEST_TOKENIZER, or the embedded SmolLM2's tokenizer once `make model` has run: a
  Qwen2.5-0.5B architecture with that tokenizer's vocabulary.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from entrypoint.world import hardware, models
from tests.conftest import ROOT, clean_env


@functools.cache
def visible_gpus() -> int:
    return len(hardware.probe().gpus)


def pytest_runtest_setup(item):
    """Skip a test here unless NVML lists the GPUs it asks for (`@pytest.mark.gpus(2)`; default 1)."""
    needed = next((m.args[0] for m in item.iter_markers("gpus")), 1)
    if visible_gpus() < needed:
        pytest.skip(f"needs {needed} GPU(s); NVML lists {visible_gpus()}")


@pytest.fixture(scope="session")
def gpu_env() -> dict[str, str]:
    """The test environment, keeping a host's NCCL safety settings (the lent machine's multicast ban)."""
    keep = {k: os.environ[k] for k in ("NCCL_NVLS_ENABLE",) if k in os.environ}
    return clean_env(**keep)


@pytest.fixture(scope="session")
def gpu_model(tmp_path_factory) -> Path:
    """A random-weight Qwen2.5-0.5B architecture (see the module docstring for where it comes from)."""
    if os.environ.get("GRPO_RIG_TEST_MODEL"):
        return Path(os.environ["GRPO_RIG_TEST_MODEL"])
    tokenizer = os.environ.get("GRPO_RIG_TEST_TOKENIZER") or str(
        models.model_dir(
            models.lookup(models.DEFAULT_MODEL),
            Path(os.environ.get("EMBEDDED_MODEL_DIR", "~/.cache/grpo-rig/models")).expanduser(),
        )
    )
    if not Path(tokenizer, "tokenizer_config.json").is_file():
        pytest.skip(f"no tokenizer at {tokenizer}: run `make model` or set GRPO_RIG_TEST_TOKENIZER")
    out = tmp_path_factory.mktemp("gpu-model") / "q05"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "make_random_model.py"),
            "Qwen/Qwen2.5-0.5B-Instruct",
            str(out),
            "--tokenizer",
            tokenizer,
            "--vocab-from-tokenizer",
        ],
        check=True,
    )
    return out
