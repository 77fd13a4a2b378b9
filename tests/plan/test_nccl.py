"""NCCL policy (case C01 in tests/cases.md, and the seeds' RTX 4090 advice)."""

from __future__ import annotations

import json

import pytest

from entrypoint.errors import BadInput
from entrypoint.facts.inventory import IBPort, Inventory
from entrypoint.plan import nccl
from entrypoint.recipe.load import Origin, Value
from tests.conftest import (
    FAKE_SWIFT,
    INVENTORIES,
    ROOT,
    build_plan,
    clean_env,
    load_inventory,
    load_recipe,
    refused,
    run_cli,
)

build = build_plan


def decide(inventory: Inventory, gpus, user=None, allow=False):
    return nccl.decide(inventory, gpus, user or {}, allow)


def test_c01_single_gpu_job_on_two_old_driver_4090s_gets_both_variables():
    """accelerate lists every GPU through nvidia-smi (ignoring CUDA_VISIBLE_DEVICES), so a one-GPU job
    on a 2 x 4090 host with driver 535 raises NotImplementedError unless both variables are set."""
    p = build("recipe=countdown-1x4090", inventory="2x4090-driver535")
    (trainer,) = p.processes
    assert trainer.env["CUDA_VISIBLE_DEVICES"] == "0"
    assert trainer.env["NCCL_P2P_DISABLE"] == "1" and trainer.env["NCCL_IB_DISABLE"] == "1"
    reasons = {d.variable: d.reason for d in p.nccl.decisions}
    assert "accelerate raises NotImplementedError" in reasons["NCCL_P2P_DISABLE"]
    assert "535.129.03 < 550.40.07" in reasons["NCCL_P2P_DISABLE"]
    assert "no ACTIVE InfiniBand/RoCE port" in reasons["NCCL_IB_DISABLE"]
    assert "NCCL_P2P_DISABLE=1 (2 GPUs visible" in p.render()


@pytest.mark.cli
def test_c01_reason_is_recorded_in_the_run_manifest(tmp_path):
    env = clean_env(GRPO_RIG_SWIFT=str(FAKE_SWIFT), FAKE_TRAINER="ok")
    proc = run_cli(
        "train",
        f"recipe={ROOT / 'tests/fakes/colocate.env'}",
        f"OUTPUT_DIR={tmp_path}",
        "RUN_NAME=c01",
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "c01" / "manifest.json").read_text())
    decisions = {d["variable"]: d for d in data["nccl"]}
    assert (
        decisions["NCCL_P2P_DISABLE"]["value"] == "1"
        and "accelerate" in decisions["NCCL_P2P_DISABLE"]["reason"]
    )
    assert decisions["NCCL_IB_DISABLE"]["value"] == "1"
    trainer = next(p for p in data["processes"] if p["role"] == "trainer")
    assert trainer["env"]["NCCL_P2P_DISABLE"] == "1" and trainer["env"]["NCCL_IB_DISABLE"] == "1"


@pytest.mark.parametrize(
    "typo", ["NCCL_P2P_DISSABLE", "NCCL_P2P_DISABLED", "NCCL_IB_DISSABLE", "NCCL_P2PDISABLE"]
)
def test_c01_typo_in_an_nccl_variable_is_refused_with_did_you_mean(typo):
    with pytest.raises(BadInput) as exc:
        load_recipe("recipe=countdown-1x4090", f"{typo}=1")
    assert "did you mean NCCL_" in str(exc.value) and typo in str(exc.value)


def test_c01_typo_in_the_environment_is_refused_too():
    with pytest.raises(BadInput, match="did you mean NCCL_P2P_DISABLE"):
        load_recipe("recipe=countdown-1x4090", environ={"NCCL_P2P_DISSABLE": "1"})


def test_unrelated_nccl_names_in_the_environment_pass_through():
    r = load_recipe("recipe=countdown-1x4090", environ={"NCCL_SOME_FUTURE_KNOB_XYZ": "1"})
    assert "NCCL_SOME_FUTURE_KNOB_XYZ" not in r.nccl


@pytest.mark.parametrize("value", ["0", "false"])
def test_c01_p2p_enabled_on_cards_without_p2p_is_refused(value):
    p = build("recipe=countdown-1x4090", f"NCCL_P2P_DISABLE={value}", inventory="2x4090-driver535")
    fatal = [x for x in p.problems if x.fatal]
    assert len(fatal) == 1 and "ALLOW_P2P_WITHOUT_SUPPORT=true" in fatal[0].fix
    # the opt-in keeps the user's value
    p = build(
        "recipe=countdown-1x4090",
        f"NCCL_P2P_DISABLE={value}",
        "ALLOW_P2P_WITHOUT_SUPPORT=true",
        inventory="2x4090-driver535",
    )
    assert not [x for x in p.problems if x.fatal]
    assert p.processes[0].env["NCCL_P2P_DISABLE"] == value


def test_user_values_are_kept_never_overwritten():
    policy = decide(
        load_inventory("5x4090-driver535"),
        [0, 1],
        {
            "NCCL_P2P_DISABLE": Value("1", Origin.COMMAND_LINE),
            "NCCL_IB_DISABLE": Value("0", Origin.RECIPE_FILE, "recipes/x.env:3"),
        },
    )
    assert policy.env == {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "0"}
    assert {d.set_by for d in policy.decisions} == {"command line", "recipes/x.env:3"}


def test_environment_values_are_inherited_not_copied():
    policy = decide(
        load_inventory("5x4090-driver535"), [0, 1], {"NCCL_IB_DISABLE": Value("1", Origin.ENVIRONMENT)}
    )
    assert "NCCL_IB_DISABLE" not in policy.env
    assert any(d.variable == "NCCL_IB_DISABLE" and d.set_by == "environment" for d in policy.decisions)


def test_p2p_capable_gpus_with_active_ib_get_nothing_disabled():
    policy = decide(load_inventory("2xA100-nvlink-ib"), [0, 1])
    assert policy.env == {}
    reasons = " ".join(d.reason for d in policy.decisions)
    assert "NVML reports P2P between all GPUs in use" in reasons and "mlx5_0" in reasons


def test_new_driver_4090s_without_p2p_still_disable_p2p_for_multi_gpu_runs():
    inv = load_inventory("2x4090-driver535").model_copy(update={"driver_version": "560.35.03"})
    assert not nccl.accelerate_rtx40_check_fires(inv)
    assert decide(inv, [0, 1]).env["NCCL_P2P_DISABLE"] == "1"  # NVML still says no P2P
    assert "NCCL_P2P_DISABLE" not in decide(inv, [0]).env  # one GPU, new driver: nothing to do


def test_unknown_p2p_status_counts_as_missing():
    inv = load_inventory("2x4090-driver535").model_copy(update={"p2p": [], "driver_version": "560.35.03"})
    assert decide(inv, [0, 1]).env["NCCL_P2P_DISABLE"] == "1"


def test_active_ib_with_accelerate_check_keeps_ib_on_but_present():
    inv = load_inventory("2x4090-driver535").model_copy(
        update={"infiniband": [IBPort(device="mlx5_0", port=1, state="4: ACTIVE", link_layer="Ethernet")]}
    )
    assert decide(inv, [0]).env == {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "0"}


def test_accelerate_check_mirrors_its_conditions():
    inv = load_inventory("2x4090-driver535")
    assert nccl.accelerate_rtx40_check_fires(inv)
    assert not nccl.accelerate_rtx40_check_fires(load_inventory("1x4090-driver535"))  # one GPU listed
    assert not nccl.accelerate_rtx40_check_fires(inv.model_copy(update={"driver_version": "550.40.07"}))
    ada = inv.model_copy(
        update={"gpus": [g.model_copy(update={"name": "NVIDIA RTX 4000 Ada Generation"}) for g in inv.gpus]}
    )
    assert nccl.accelerate_rtx40_check_fires(ada)  # "RTX 40" substring: workstation cards match too


def test_cpu_run_sets_nothing():
    assert decide(load_inventory("2x4090-driver535"), []).env == {}


# Multi-node without InfiniBand: NCCL_SOCKET_IFNAME unset ---------------------------------------------------


@pytest.mark.parametrize(
    ("interfaces", "fatal", "text"),
    [
        (["lo", "docker0", "eth0"], False, "NCCL will likely use eth0"),
        (["lo", "ib0", "eth0"], False, "NCCL will likely use ib0"),
        (["lo", "docker0"], True, "only docker0, which cannot reach another node"),
        (["lo", "eth0", "eth1"], True, "eth0, eth1 at once"),
        (None, False, "does not list the interfaces"),
    ],
)
def test_unset_socket_ifname_warns_unless_the_choice_is_wrong_or_ambiguous(interfaces, fatal, text):
    from entrypoint.plan.nccl import decide_multi_node

    inventory = load_inventory("2x4090-driver535").model_copy(
        update={"interfaces": interfaces, "infiniband": []}
    )
    _, _, problems = decide_multi_node(inventory, {}, gloo_user_set=False)
    assert len(problems) == 1 and problems[0].fatal is fatal, problems
    assert text in problems[0].message
    if not fatal and interfaces:
        assert problems[0].fix.startswith("set NCCL_SOCKET_IFNAME=")


@pytest.mark.cli
@pytest.mark.parametrize("value", ["true", "yes", ""])
def test_p2p_disable_values_nccl_reads_as_zero_are_refused_on_cards_without_p2p(tmp_path, value):
    err = refused(
        tmp_path,
        "recipe=countdown-1x4090",
        f"INVENTORY={INVENTORIES / '2x4090-driver535.json'}",
        f"NCCL_P2P_DISABLE={value}",
    )
    assert "it reads integers: write 1" in err
