"""An INVENTORY file's fields are checked for the form the decisions read: a malformed one is refused in one
line naming the field, its value and the form expected (facts/inventory.py, commands/edge.inventory_for).
Case re-run: a hand-written file with driver_version "garbage" validated silently, every driver check off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest

from entrypoint import cli
from entrypoint.facts import inventory
from entrypoint.world import hardware
from tests.conftest import INVENTORIES

EXAMPLE = INVENTORIES / "2x4090-driver535.json"


def changed(tmp_path: Path, change) -> Path:
    """The 2x4090 example with `change` applied to its JSON, written to tmp_path."""
    data = json.loads(EXAMPLE.read_text())
    change(data)
    path = tmp_path / "machine.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "change, says",
    [
        (
            lambda d: d.update(driver_version="garbage"),
            "driver_version: 'garbage' is not a driver version (expected digits and dots, like 535.129.03)",
        ),
        (
            lambda d: d.update(cuda_driver_version="twelve"),
            "cuda_driver_version: 'twelve' is not a CUDA version (expected major.minor, like 12.2)",
        ),
        (
            lambda d: d["gpus"][0].update(memory_total_gib="lots"),
            "gpus.0.memory_total_gib: 'lots' (expected a valid number",
        ),
        (
            lambda d: d["gpus"][0].update(memory_total_gib=-5),
            "gpus.0.memory_total_gib: -5 (expected greater than 0)",
        ),
        (
            lambda d: d["gpus"][1].update(memory_free_gib=99),
            "gpus.1: memory_free_gib 99.0 is above memory_total_gib 23.988 (expected free <= total, GiB)",
        ),
        (lambda d: d["gpus"][1].update(index=-1), "gpus.1.index: -1 (expected greater than or equal to 0)"),
        (
            lambda d: d["gpus"][1].update(index=0),
            "gpus: index 0 is listed twice (expected one entry per ordinal)",
        ),
        (
            lambda d: d["gpus"][1].update(compute_capability=[-8, 9]),
            "gpus.1.compute_capability.0: -8 (expected greater than or equal to 1)",
        ),
        (
            lambda d: d["p2p"][0].update(read="maybe"),
            "p2p.0.read: 'maybe' (expected 'ok', 'chipset_not_supported'",
        ),
        (lambda d: d["p2p"][0].update(b=7), "p2p: the link 0-7 is not between two listed GPUs"),
        (lambda d: d.update(shm_bytes=-1), "shm_bytes: -1 (expected greater than or equal to 0)"),
        (lambda d: d.update(ram_total_bytes=-3), "ram_total_bytes: -3 (expected greater than or equal to 0)"),
        (
            lambda d: d.update(ram_total_bytes=10, ram_available_bytes=20),
            "ram_available_bytes 20 is above ram_total_bytes 10 (expected available <= total)",
        ),
    ],
)
def test_a_malformed_field_is_refused_in_one_line_naming_it(capsys, tmp_path, change, says):
    path = changed(tmp_path, change)
    status = cli.main(["validate", "recipe=smoke-server", f"INVENTORY={path}"])
    err = capsys.readouterr().err
    assert status == 2, err
    line = f"error: INVENTORY (command line): {path} is not an inventory: {says}"
    assert any(x.startswith(line) for x in err.splitlines()), err
    assert err.count("error:") == 1, err


@pytest.mark.parametrize("example", sorted(INVENTORIES.glob("*.json")), ids=lambda p: p.stem)
def test_every_example_inventory_and_what_save_writes_of_it_still_loads(tmp_path, example):
    saved = tmp_path / example.name
    hardware.save(hardware.load(example), saved)
    assert hardware.load(saved).gpus == hardware.load(example).gpus


def test_unknown_driver_fields_stay_allowed(capsys, tmp_path):
    """null is how `doctor --save-inventory` writes what NVML could not say: valid, never refused."""
    path = changed(
        tmp_path, lambda d: d.update(driver_version=None, cuda_driver_version=None, shm_bytes=None)
    )
    assert cli.main(["validate", "recipe=smoke-server", f"INVENTORY={path}"]) == 0, capsys.readouterr().err


def test_the_link_vocabulary_is_nvmls():
    assert set(get_args(inventory.P2PStatus)) == set(inventory.P2P_STATUS.values())
