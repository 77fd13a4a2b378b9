"""A refused key's fix names a key the recipe's mode accepts: in a recipe without a rollout server every
ROLLOUT_ key is refused (plan/layout._check_mode_keys), so the fix there is colocated vLLM's key, or removal
(recipe/load.in_mode). Case re-run: ROLLOUT_VLLM_GPU_MEMORY_UTILIZATION in a colocate recipe was told to
write ROLLOUT_GPU_MEMORY_UTILIZATION, which that recipe refuses in turn."""

from __future__ import annotations

import re

import pytest

from entrypoint import cli
from tests.conftest import INVENTORIES

COLOCATE = ("countdown-1x4090", "1x4090-driver535")  # USE_VLLM=true, no ROLLOUT_GPUS
SERVER = ("smoke-server", "2x4090-driver535")  # ROLLOUT_GPUS=1
NO_VLLM = ("smoke", "1x4090-driver535")  # USE_VLLM=false, on the CPU


def validate(capsys, recipe: str, inventory: str, *pairs: str) -> tuple[int, str]:
    """`validate` in process: its exit status and what it printed."""
    status = cli.main(["validate", f"recipe={recipe}", f"INVENTORY={INVENTORIES / inventory}.json", *pairs])
    out = capsys.readouterr()
    return status, out.out + out.err


def followed(fix: str, value: str) -> list[str]:
    """The KEY=VALUE word a user types to follow a key's fix (none for 'remove it')."""
    if fix.startswith("remove it"):
        return []
    key = re.match(r"(?:did you mean )?([A-Z_]+)", fix)
    assert key, fix
    return [f"{key.group(1)}={value}"]


@pytest.mark.parametrize(
    "setup, key, value, says",
    [
        (COLOCATE, "ROLLOUT_VLLM_GPU_MEMORY_UTILIZATION", "0.5", "fix: VLLM_GPU_MEMORY_UTILIZATION=<value>"),
        (COLOCATE, "ROLLOUT_VLLM_MAX_MODEL_LEN", "2304", "fix: VLLM_MAX_MODEL_LEN=<value>"),
        (COLOCATE, "ROLLOUT_VLLM_ENFORCE_EAGER", "true", "fix: VLLM_ENFORCE_EAGER=<value>"),
        (COLOCATE, "ROLLOUT_VLLM_MAX_NUM_SEQS", "8", "fix: remove it: this recipe runs no rollout server"),
        (COLOCATE, "ROLLOUT_GPU_MEMORY_UTILISATION", "0.5", "fix: did you mean VLLM_GPU_MEMORY_UTILIZATION"),
        (SERVER, "ROLLOUT_VLLM_GPU_MEMORY_UTILIZATION", "0.5", "fix: ROLLOUT_GPU_MEMORY_UTILIZATION=<value>"),
        (SERVER, "ROLLOUT_GPU_MEMORY_UTILISATION", "0.5", "fix: did you mean ROLLOUT_GPU_MEMORY_UTILIZATION"),
        (NO_VLLM, "ROLLOUT_VLLM_GPU_MEMORY_UTILIZATION", "0.5", "fix: remove it: this recipe runs no vLLM"),
    ],
)
def test_a_refused_keys_fix_is_a_key_the_recipes_mode_accepts(capsys, setup, key, value, says):
    status, text = validate(capsys, *setup, f"{key}={value}")
    assert status == 2, text
    (fix,) = re.findall(rf"^error: {key} \(command line\): [^\n]*\n  fix: ([^\n]*)$", text, re.MULTILINE)
    assert f"fix: {fix}".startswith(says), fix
    status, text = validate(capsys, *setup, *followed(fix, value))
    assert status == 0 and "error:" not in text, f"following '{fix}':\n{text}"
