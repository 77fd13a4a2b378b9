"""`import` of ms-swift <= 3.5's --vllm_device: the rollout gets a server of its own only where a GPU is left
beside the trainers, else vLLM is colocated, and no note renders an empty GPU list as "-"
(recipe/importer._vllm_device). Case re-run: `--vllm_device cuda:1` with no CUDA_VISIBLE_DEVICES wrote
"beside the trainers on GPU -", and `CUDA_VISIBLE_DEVICES=0 ... --vllm_device cuda:0` a server on the
training GPU, which validate refused."""

from __future__ import annotations

import re
import shlex

import pytest

from entrypoint import cli
from tests.conftest import INVENTORIES

BASE = (
    "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --dataset AI-MO/NuminaMath-TIR "
    "--use_vllm true --reward_funcs accuracy"
)


@pytest.mark.parametrize(
    "command, inventory, says, gpus",
    [
        (
            f"{BASE} --vllm_device cuda:1",
            "2x4090-driver535",
            "server on GPU 1, beside the trainers on GPU 0",
            ["TRAIN_GPUS=0", "ROLLOUT_GPUS=1"],
        ),
        (
            f"CUDA_VISIBLE_DEVICES=0 {BASE} --vllm_device cuda:0",
            "1x4090-driver535",
            "no GPU is left beside the trainers, so vLLM runs colocated",
            ["TRAIN_GPUS=0"],
        ),
        (
            f"{BASE} --vllm_device cuda:0",
            "1x4090-driver535",
            "no GPU is left beside the trainers, so vLLM runs colocated",
            ["TRAIN_GPUS=0"],
        ),
        (
            f"CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 {BASE} --vllm_device cuda:1",
            "2x4090-driver535",
            "server on GPU 1, beside the trainers on GPU 0",
            ["TRAIN_GPUS=0", "ROLLOUT_GPUS=1"],
        ),
        (
            f"{BASE} --vllm_device auto",
            "1x4090-driver535",
            "the script lists no GPUs (CUDA_VISIBLE_DEVICES), so vLLM runs colocated",
            ["TRAIN_GPUS=0"],
        ),
    ],
)
def test_vllm_device_becomes_a_layout_that_validates_and_a_note_without_dashes(
    capsys, command, inventory, says, gpus
):
    status = cli.main(["import", f"INVENTORY={INVENTORIES / inventory}.json", "--", *shlex.split(command)])
    out = capsys.readouterr()
    assert status == 0, out.err
    (note,) = [line for line in out.out.splitlines() if line.startswith("# --vllm_device")]
    assert says in note, note
    assert not re.search(r"GPUs?(\(s\))? -(\W|$)", out.out + out.err), out.out
    assert [line for line in out.out.splitlines() if re.match(r"(TRAIN|ROLLOUT)_GPUS=", line)] == gpus
