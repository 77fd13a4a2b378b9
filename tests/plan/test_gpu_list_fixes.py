"""A refused TRAIN_GPUS or ROLLOUT_GPUS gets a fix that names GPUs the machine has, in a layout that plans:
`validate` with the fix written is refused for nothing (plan/layout._placing_fix tries each candidate).
Cases re-run: 'ROLLOUT_GPUS=cuda:2' on two GPUs was told to write 2, and 'leave ROLLOUT_GPUS empty' on one GPU
led into the refusal of the recipe's own rollout-server keys."""

from __future__ import annotations

import re

import pytest

from entrypoint import cli
from entrypoint.world import hardware
from tests.conftest import INVENTORIES


def validate(capsys, recipe: str, inventory: str, *pairs: str) -> tuple[int, str]:
    """`validate` in process: its exit status and what it printed."""
    status = cli.main(["validate", f"recipe={recipe}", f"INVENTORY={INVENTORIES / inventory}.json", *pairs])
    out = capsys.readouterr()
    return status, out.out + out.err


def fixes(text: str) -> dict[str, str]:
    """{key: its fix} for each refused GPU list."""
    found = re.findall(r"^error: (\w+_GPUS) \(.*?^  fix: ([^\n]*)$", text, re.MULTILINE | re.DOTALL)
    return dict(found)


def written(fix: str) -> list[str]:
    """The KEY=VALUE words a user types to follow a fix: 'leave K empty' is K=, 'write A=v as B=v' moves the
    value, 'remove A, B' unsets them."""
    words = [f"{k}=" for k in re.findall(r"leave ([A-Z_]+) empty", fix)]
    for old, new in re.findall(r"([A-Z_]+)=\S+ as ([A-Z_]+=[^\s,;()]+)", fix):
        words += [f"{old}=", new]
    removed = re.search(r"remove ([A-Z_, ]+)", fix)
    words += [f"{k.strip()}=" for k in removed.group(1).split(",")] if removed else []
    moved = {w.split("=")[0] for w in words}
    return words + [w for w in re.findall(r"\b[A-Z_]+=[^\s,;()]+", fix) if w.split("=")[0] not in moved]


@pytest.mark.parametrize(
    "recipe, inventory, pairs, key",
    [
        ("smoke-server", "2x4090-driver535", ["ROLLOUT_GPUS=cuda:2"], "ROLLOUT_GPUS"),
        ("smoke-server", "2x4090-driver535", ["ROLLOUT_GPUS=cuda:1,cuda:2"], "ROLLOUT_GPUS"),
        ("smoke-server", "2x4090-driver535", ["ROLLOUT_GPUS=cuda:0"], "ROLLOUT_GPUS"),  # the trainer's
        ("smoke-server", "2x4090-driver535", ["ROLLOUT_GPUS=cuda:1"], "ROLLOUT_GPUS"),
        ("smoke-server", "2x4090-driver535", ["TRAIN_GPUS=cuda:1"], "TRAIN_GPUS"),  # the rollout's
        ("smoke-server", "2x4090-driver535", ["TRAIN_GPUS=cuda:0", "ROLLOUT_GPUS=cuda:1"], "TRAIN_GPUS"),
        ("smoke-server", "2x4090-driver535", ["ROLLOUT_GPUS=GPU-9531985d"], "ROLLOUT_GPUS"),
        ("smoke-server", "2x4090-driver535", ["TRAIN_GPUS=3"], "TRAIN_GPUS"),
        ("smoke-server", "1x4090-driver535", [], "ROLLOUT_GPUS"),  # the recipe's GPU 1, and its ROLLOUT_ keys
        ("smoke-server", "5x4090-driver535", ["ROLLOUT_GPUS=5"], "ROLLOUT_GPUS"),
        ("smoke-gpu", "2x4090-driver535", ["TRAIN_GPUS=cuda:2"], "TRAIN_GPUS"),
    ],
)
def test_the_fix_of_a_refused_gpu_list_names_gpus_that_exist_and_plans(capsys, recipe, inventory, pairs, key):
    status, text = validate(capsys, recipe, inventory, *pairs)
    assert status == 2 and key in fixes(text), text
    gpus = {g.index for g in hardware.load(INVENTORIES / f"{inventory}.json").gpus}
    for fix in fixes(text).values():
        named = [int(n) for v in re.findall(r"\b\w+_GPUS=([\d,-]+)", fix) for n in re.findall(r"\d+", v)]
        assert set(named) <= gpus, f"the fix names a GPU the machine does not have: {fix}"
    # every GPU list's fix followed, as a user reading the refusal would
    followed = [w for fix in fixes(text).values() for w in written(fix)]
    status, text = validate(capsys, recipe, inventory, *pairs, *followed)
    assert status == 0 and "error:" not in text, f"following {followed}:\n{text}"


def test_torch_name_of_a_missing_gpu_says_so_in_one_refusal(capsys):
    status, text = validate(capsys, "smoke-server", "2x4090-driver535", "ROLLOUT_GPUS=cuda:2")
    assert status == 2
    assert (
        "error: ROLLOUT_GPUS (command line): 'cuda:2' uses torch's device names; GPU lists take the ordinals "
        "alone, and GPU 2 does not exist on the machine"
    ) in text
    assert "  fix: for example ROLLOUT_GPUS=1 with TRAIN_GPUS=0 (the list above; each needs its own)" in text
    assert "(2)" not in text


@pytest.mark.parametrize("inventory", ["1x4090-driver535", "2x4090-driver535"])
def test_both_lists_of_a_bigger_machines_recipe_get_fixes_that_place_it_together(capsys, inventory):
    """tcm-4x4090 (TRAIN_GPUS=0-3, ROLLOUT_GPUS=4, two ROLLOUT_ keys) on smaller machines: what is left after
    both fixes is the batch and the memory, never the placement."""
    dataset = "DATASET=examples/tcm/sample.jsonl"
    status, text = validate(capsys, "tcm-4x4090", inventory, dataset)
    assert status == 2 and set(fixes(text)) == {"TRAIN_GPUS", "ROLLOUT_GPUS"}, text
    followed = [w for fix in fixes(text).values() for w in written(fix)]
    status, text = validate(capsys, "tcm-4x4090", inventory, dataset, *followed)
    assert not re.search(r"^error: (TRAIN_GPUS|ROLLOUT_)", text, re.MULTILINE), (
        f"following {followed}:\n{text}"
    )
