"""Golden outputs: `plan --json` of every shipped recipe on every example inventory, and `validate` of the
failure cases' inputs (tests/cases.md), recorded before the redesign ("One clear house") and compared after
it.

    python -m tests.golden.scenarios --write     # record (only when a change of output is intended)

Each scenario runs the CLI in a clean environment with fixed ports and run names; paths under the
checkout, the scenario's scratch directory and HOME are written as <ROOT>, <TMP> and <HOME>, so the files
are the same on every machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "files"
INV = "examples/inventories"
RECIPES = ("smoke", "smoke-gpu", "smoke-server", "countdown-1x4090", "tcm-4x4090")
INVENTORIES = ("1x4090-driver535", "2x4090-driver535", "5x4090-driver535", "2xA100-nvlink-ib")
FIXED = ("RUN_NAME=golden", "OUTPUT_DIR=<TMP>/out", "MASTER_PORT=29555")
SERVER_RECIPES = ("recipe=tcm-4x4090", "recipe=smoke-server")  # these also get a fixed ROLLOUT_PORT
TCM_DATA = "DATASET=examples/tcm/sample.jsonl"


def _scenarios() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for recipe in RECIPES:
        for inv in INVENTORIES:
            extra = [TCM_DATA] if recipe == "tcm-4x4090" else []
            out[f"plan-{recipe}-{inv}"] = [
                "plan",
                "--json",
                f"recipe={recipe}",
                f"INVENTORY={INV}/{inv}.json",
                *extra,
            ]
    v = lambda *pairs: ["validate", *pairs]  # noqa: E731
    one, two, five = (
        f"INVENTORY={INV}/{n}.json" for n in ("1x4090-driver535", "2x4090-driver535", "5x4090-driver535")
    )
    out.update(
        {
            # C01 accelerate's RTX 40 check; typo; NCCL_P2P_DISABLE=0 on cards without P2P
            "c01-single-gpu-on-2x4090": v("recipe=countdown-1x4090", two),
            "c01-typo": v("recipe=countdown-1x4090", two, "NCCL_P2P_DISSABLE=1"),
            "c01-p2p-on-without-support": v("recipe=countdown-1x4090", two, "NCCL_P2P_DISABLE=0"),
            # C02 small /dev/shm: from the inventory file written for it
            "c02-small-shm": v("recipe=tcm-4x4090", "INVENTORY=<TMP>/small-shm.json", TCM_DATA),
            # C03 no GPU visible
            "c03-no-gpu": v("recipe=countdown-1x4090", "INVENTORY=<TMP>/no-gpu.json"),
            "c03-old-driver": v("recipe=countdown-1x4090", "INVENTORY=<TMP>/driver525.json"),
            # C04 server mode that would silently become colocate
            "c04-base-url-only": v(
                "recipe=countdown-1x4090", one, "VLLM_SERVER_BASE_URL=http://10.0.0.2:8000"
            ),
            "c04-host-misspelled": v("recipe=countdown-1x4090", one, "VLLM_SERVER_HOTS=10.0.0.2"),
            # C05 the trainer sees exactly its GPUs
            "c05-3-gpus": [
                "plan",
                "--json",
                "recipe=tcm-4x4090",
                f"INVENTORY={INV}/5x4090-driver535.json",
                TCM_DATA,
                "TRAIN_GPUS=0,1",
                "ROLLOUT_GPUS=2",
            ],
            "c05-same-gpu-twice": v("recipe=tcm-4x4090", five, TCM_DATA, "TRAIN_GPUS=0-3", "ROLLOUT_GPUS=3"),
            # C06 host numbering
            "c06-missing-ordinal": v("recipe=tcm-4x4090", two, TCM_DATA, "TRAIN_GPUS=0", "ROLLOUT_GPUS=2"),
            # C07 removed / renamed / abbreviated arguments
            "c07-old-names": v(
                "recipe=countdown-1x4090",
                one,
                "vllm_device=cuda:1",
                "num_infer_workers=1",
                "vllm_max_num_seqs=64",
            ),
            "c07-new-names": v(
                "recipe=tcm-4x4090",
                five,
                TCM_DATA,
                "ROLLOUT_VLLM_GPU_MEMORY_UTILIZATION=0.9",
                "TUNER_TYPE=lora",
            ),
            "c07-seed-names": v("recipe=smoke", "load_in_4bit=true"),
            "c07-abbreviation": v("recipe=smoke", "vllm_server_ho=10.0.0.2"),
            # C08 dataset against rewards
            "c08-answer-column": v(
                "recipe=smoke",
                "DATASET_GENERATOR=",
                "DATASET=<TMP>/answer.jsonl",
                "REWARD_FUNCS=accuracy format",
            ),
            "c08-not-json": v(
                "recipe=smoke", "DATASET_GENERATOR=", "DATASET=<TMP>/broken.jsonl", "REWARD_FUNCS=format"
            ),
            "c08-two-types": v(
                "recipe=smoke", "DATASET_GENERATOR=", "DATASET=<TMP>/types.jsonl", "REWARD_FUNCS=format"
            ),
            "c08-too-few-prompts": v(
                "recipe=smoke", "DATASET_GENERATOR=", "DATASET=<TMP>/two.jsonl", "REWARD_FUNCS=format"
            ),
            # C09 colocated vLLM taking the card
            "c09-3b-default-share": v(
                "recipe=countdown-1x4090",
                one,
                "MODEL=Qwen/Qwen2.5-3B-Instruct",
                "VLLM_GPU_MEMORY_UTILIZATION=0.9",
                "NUM_GENERATIONS=8",
                "MAX_COMPLETION_LENGTH=1024",
                "PER_DEVICE_TRAIN_BATCH_SIZE=8",
                "GRADIENT_ACCUMULATION_STEPS=1",
                "GENERATION_BATCH_SIZE=",
            ),
            # valid runs
            "valid-smoke": v("recipe=smoke"),
            "valid-countdown": v("recipe=countdown-1x4090", one),
            "valid-tcm": v("recipe=tcm-4x4090", five, TCM_DATA),
        }
    )
    return out


SCENARIOS = _scenarios()


def _write_inputs(tmp: Path) -> None:
    inv = json.loads((ROOT / INV / "5x4090-driver535.json").read_text())
    (tmp / "small-shm.json").write_text(json.dumps({**inv, "shm_bytes": 64 * 1024**2}))
    (tmp / "no-gpu.json").write_text(
        json.dumps({**inv, "gpus": [], "p2p": [], "nvml_error": "NVML Shared Library Not Found"})
    )
    one = json.loads((ROOT / INV / "1x4090-driver535.json").read_text())
    (tmp / "driver525.json").write_text(json.dumps({**one, "driver_version": "525.60.13"}))
    row = lambda i: {"messages": [{"role": "user", "content": f"What is {i}+{i}?"}]}  # noqa: E731
    (tmp / "answer.jsonl").write_text(
        "".join(json.dumps({**row(i), "answer": str(2 * i)}) + "\n" for i in range(64))
    )
    (tmp / "broken.jsonl").write_text(json.dumps(row(1)) + "\n{not json\n")
    (tmp / "types.jsonl").write_text(
        "".join(json.dumps({**row(i), "meta": {"a": i} if i % 2 else [i]}) + "\n" for i in range(64))
    )
    (tmp / "two.jsonl").write_text("".join(json.dumps(row(i)) + "\n" for i in range(1)))


def run(name: str, tmp: Path) -> str:
    """The scenario's exit status and output, normalised."""
    fixed = [*FIXED, *(["ROLLOUT_PORT=8123"] if any(r in SCENARIOS[name] for r in SERVER_RECIPES) else [])]
    args = [a.replace("<TMP>", str(tmp)) for a in [*SCENARIOS[name], *fixed]]
    if args[0] == "plan" and "--json" in args:  # options before the pairs
        args.remove("--json")
        args.insert(1, "--json")
    env = {
        k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "TMPDIR")
    }
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"
    # a checkout whose .venv links to another's (a git worktree) shows the venv's real path in the plan
    venv = (str((ROOT / ".venv").resolve()), "<ROOT>/.venv")
    for path, mark in (venv, (str(tmp), "<TMP>"), (str(ROOT), "<ROOT>"), (str(Path.home()), "<HOME>")):
        text = text.replace(path, mark)
    return text


def main() -> None:
    # the goldens are what the locked stack prints: another interpreter (no ms-swift, no vLLM) rewrote them
    # with its own refusals, silently
    from entrypoint.world import host

    if not host.swift_worker({}):
        sys.exit(
            f"{sys.executable} is not the locked stack (no ms-swift): run .venv/bin/python -m {__spec__.name}"
        )
    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        _write_inputs(tmp)
        for name in SCENARIOS:
            (GOLDEN / f"{name}.txt").write_text(run(name, tmp))
            print(name)


if __name__ == "__main__" and "--write" in sys.argv:
    main()
