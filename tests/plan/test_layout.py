"""GPU layout (cases C04, C05, C06 in tests/cases.md)."""

from __future__ import annotations

import json
import re

import pytest

from entrypoint.errors import BadInput
from entrypoint.facts.inventory import Inventory
from entrypoint.plan import build as plan_mod
from entrypoint.plan import layout
from tests.conftest import INVENTORIES, ROOT, clean_env, facts_for, load_inventory, load_recipe, run_cli


def inventory(n: int) -> Inventory:
    five = load_inventory("5x4090-driver535")
    return five.model_copy(
        update={"gpus": five.gpus[:n], "p2p": [x for x in five.p2p if x.a < n and x.b < n]}
    )


def plan_for(*pairs, gpus=3, environ=None):
    r = load_recipe(*pairs, environ=environ)
    return plan_mod.build(r, inventory(gpus), facts_for(r, environ))


def fatal(p):
    return [x for x in p.problems if x.fatal]


def test_c05_trainer_sees_exactly_its_gpus_and_the_rollout_its_own():
    p = plan_for("recipe=tcm-4x4090", "TRAIN_GPUS=0,1", "ROLLOUT_GPUS=2", gpus=3)
    assert not fatal(p)
    rollout, trainer = p.processes
    assert trainer.env["CUDA_VISIBLE_DEVICES"] == "0,1" and trainer.env["NPROC_PER_NODE"] == "2"
    assert rollout.env["CUDA_VISIBLE_DEVICES"] == "2"


def test_c05_all_means_every_gpu_not_given_to_the_rollout():
    p = plan_for("recipe=tcm-4x4090", "TRAIN_GPUS=all", "ROLLOUT_GPUS=2", gpus=3)
    assert p.layout.train_gpus == (0, 1) and p.layout.rollout_gpus == (2,)


def test_c05_single_gpu_colocate_recipe_on_a_two_gpu_machine_sees_one_gpu():
    p = plan_for("recipe=countdown-1x4090", gpus=2)
    (trainer,) = p.processes
    # one visible GPU for one process: without torchrun ms-swift sets LOCAL_WORLD_SIZE=1 itself
    assert trainer.env["CUDA_VISIBLE_DEVICES"] == "0" and trainer.env.get("NPROC_PER_NODE", "1") == "1"


def test_c05_same_gpu_for_rollout_and_training_is_refused():
    p = plan_for("recipe=tcm-4x4090", "TRAIN_GPUS=0,1", "ROLLOUT_GPUS=1", gpus=3)
    (problem,) = fatal(p)
    assert "GPU 1 is listed for both training and the rollout server" in problem.message


def test_rollout_gpu_list_on_a_single_gpu_machine_is_refused():
    p = plan_for("recipe=tcm-4x4090", "TRAIN_GPUS=all", "ROLLOUT_GPUS=0", gpus=1)
    assert any("leaves no GPU for training" in x.message for x in fatal(p))


def test_c06_container_ordinal_that_does_not_exist_is_refused_with_the_mapping():
    """Compose exposed host GPUs 1 and 2; inside they are 0 and 1; the recipe asks for GPU 2."""
    p = plan_for("recipe=tcm-4x4090", "TRAIN_GPUS=0", "ROLLOUT_GPUS=2", gpus=2)
    (problem,) = fatal(p)
    text = problem.render()
    assert (
        "GPU 2 does not exist on the machine" in text
    )  # an inventory file here; NVML's: "in this container"
    inv = inventory(2)
    for gpu in inv.gpus:  # ordinal, UUID, name and PCI bus id of what exists
        assert f"GPU {gpu.index}: {gpu.name}, {gpu.uuid}, PCI {gpu.pci_bus_id}" in text
    assert "Docker numbers the GPUs it exposes from 0" in text
    # a layout that fits (new-user trial: "0..1" for both keys led straight into the overlap refusal)
    assert "ROLLOUT_GPUS=1 with TRAIN_GPUS=0" in problem.fix
    (one,) = [
        x
        for x in fatal(plan_for("recipe=tcm-4x4090", "TRAIN_GPUS=0", "ROLLOUT_GPUS=4", gpus=1))
        if x.where.startswith("ROLLOUT_GPUS")
    ]
    assert one.fix.startswith("leave ROLLOUT_GPUS empty: with one GPU vLLM runs colocated on it")


def test_c04_base_url_alone_is_refused():
    with pytest.raises(BadInput) as exc:
        load_recipe("recipe=tcm-4x4090", "ROLLOUT_GPUS=", "VLLM_SERVER_BASE_URL=http://10.0.0.5:8000")
    assert "a base URL alone does not enable server mode" in str(exc.value)


@pytest.mark.parametrize(
    "key", ["VLLM_SERVER_HOTS=10.0.0.5", "VLLM_SEVER_HOST=10.0.0.5", "vllm_server_hst=10.0.0.5"]
)
def test_c04_misspelled_host_key_is_refused(key):
    with pytest.raises(BadInput) as exc:
        load_recipe("recipe=tcm-4x4090", key)
    text = str(exc.value)
    assert "did you mean VLLM_SERVER_HOST" in text and "set ROLLOUT_GPUS" in text


def test_c04_entrypoint_composes_the_server_flags_and_the_plan_shows_the_mode():
    p = plan_for("recipe=tcm-4x4090", gpus=5)
    trainer = p.process("trainer")
    argv = " ".join(trainer.argv)
    assert "--vllm_mode server --vllm_server_host 127.0.0.1 --vllm_server_port 8000" in argv
    assert "layout: server:" in p.render()
    # and a colocate recipe never carries server flags
    q = plan_for("recipe=countdown-1x4090", gpus=1)
    assert "--vllm_server_host" not in q.process("trainer").argv and "layout: colocate" in q.render()


@pytest.mark.parametrize(
    ("key", "value", "acts"),
    [
        ("VLLM_GPU_MEMORY_UTILIZATION", "0.5", "ROLLOUT_GPU_MEMORY_UTILIZATION"),
        ("VLLM_MAX_MODEL_LEN", "4096", "ROLLOUT_MAX_MODEL_LEN"),
    ],
)
def test_colocate_only_keys_in_server_mode_warn_naming_the_rollout_key(key, value, acts):
    """A maintainer-style server-mode recipe that also sets the colocate keys is valid (ms-swift
    3.6.4 only warns, `_external_vllm_warning`): a warning naming the ROLLOUT_* key that acts, no refusal."""
    p = plan_for("recipe=tcm-4x4090", f"{key}={value}", gpus=5)
    assert not fatal(p)
    (warning,) = [x for x in p.problems if x.where.startswith(key)]
    assert not warning.fatal and "only acts in colocate mode" in warning.message
    assert f"set {acts}={value} instead" in warning.fix


def test_rollout_on_another_node_has_no_local_rollout_process():
    p = plan_for(
        "recipe=tcm-4x4090",
        "ROLLOUT_GPUS=",
        "ROLLOUT_HOST=10.0.0.5",
        "ROLLOUT_PORT=8001",
        "TRAIN_GPUS=0-3",
        gpus=4,
    )
    assert not fatal(p)
    assert [x.role for x in p.processes] == ["trainer"]
    assert "--vllm_server_host 10.0.0.5 --vllm_server_port 8001" in " ".join(p.process("trainer").argv)


def test_rollout_bind_off_loopback_needs_the_opt_in():
    p = plan_for("recipe=tcm-4x4090", "ROLLOUT_BIND=0.0.0.0", gpus=5)
    assert any("ROLLOUT_ALLOW_REMOTE=true" in x.fix for x in fatal(p))
    q = plan_for("recipe=tcm-4x4090", "ROLLOUT_BIND=0.0.0.0", "ROLLOUT_ALLOW_REMOTE=true", gpus=5)
    assert not fatal(q)
    assert "--host 0.0.0.0" in " ".join(q.process("rollout").argv)


def test_a_gpu_list_written_with_spaces_places_each_gpu_it_names():
    """Cases re-run: 'TRAIN_GPUS=0 1' planned training on GPU 1 alone, 'TRAIN_GPUS=1 2' was told GPU 12 does
    not exist."""
    trainer = plan_for("recipe=tcm-4x4090", "TRAIN_GPUS=0 1", "ROLLOUT_GPUS=2", gpus=3).process("trainer")
    assert trainer.env["CUDA_VISIBLE_DEVICES"] == "0,1" and trainer.env["NPROC_PER_NODE"] == "2"
    p = plan_for("recipe=tcm-4x4090", "TRAIN_GPUS=1 2", "ROLLOUT_GPUS=0", gpus=3)
    assert not fatal(p) and p.process("rollout").env["CUDA_VISIBLE_DEVICES"] == "0"


def test_data_parallel_rollout_over_two_gpus():
    p = plan_for("recipe=tcm-4x4090", "TRAIN_GPUS=0-2", "ROLLOUT_GPUS=3,4", gpus=5)
    rollout = p.process("rollout")
    assert rollout.env["CUDA_VISIBLE_DEVICES"] == "3,4"
    assert "--tensor_parallel_size 1 --data_parallel_size 2" in " ".join(rollout.argv)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0,1", [0, 1]),
        ("0-3", [0, 1, 2, 3]),
        (" 2 , 0 ", [2, 0]),
        ("1-2,4", [1, 2, 4]),
        ("0 1", [0, 1]),  # spaces separate, as in REWARD_FUNCS (they were dropped: '0 1' read as GPU 1)
        ("0, 2", [0, 2]),
        ("1 - 2 4", [1, 2, 4]),
    ],
)
def test_parse_ordinals(text, expected):
    assert layout.parse_ordinals(text) == expected


@pytest.mark.parametrize("text", ["a", "3-1", "0,0", "1.5"])
def test_parse_ordinals_refuses(text):
    with pytest.raises(ValueError):
        layout.parse_ordinals(text)


@pytest.mark.cli
def test_a_maintainer_style_server_mode_recipe_with_the_colocate_keys_validates_with_warnings():
    """The same recipe, once refused, as a user runs it."""
    proc = run_cli(
        "validate",
        "recipe=tcm-4x4090",
        f"INVENTORY={INVENTORIES / '5x4090-driver535.json'}",
        f"DATASET={ROOT / 'examples/tcm/sample.jsonl'}",
        "VLLM_GPU_MEMORY_UTILIZATION=0.5",
        "VLLM_MAX_MODEL_LEN=4096",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning: VLLM_GPU_MEMORY_UTILIZATION (command line): only acts in colocate mode" in proc.stdout
    assert "fix: set ROLLOUT_GPU_MEMORY_UTILIZATION=0.5 instead" in proc.stdout
    assert "fix: set ROLLOUT_MAX_MODEL_LEN=4096 instead" in proc.stdout
    assert "recipe tcm-4x4090: valid (" in proc.stdout


@pytest.mark.parametrize(
    "text, says",
    [
        ("cuda:1", "cuda:1 is torch's device name: write the ordinal alone (1)"),
        ("GPU-36f675cc-81e7", "is a UUID: write the GPU's ordinal"),
        ("-1", "ordinals start at 0"),
        ("0,1,0", "GPU 0 is listed twice"),
        ("3-1", "range 3-1 runs backwards"),
    ],
)
def test_gpu_lists_other_tools_write_are_refused_naming_the_ordinal_spelling(text, says):
    """Cases re-run: 'cuda:1' and '-1' were answered with Python's "invalid literal for int()"."""
    with pytest.raises(ValueError, match=re.escape(says)):
        layout.parse_ordinals(text)
    assert layout.parse_ordinals("0-2,4") == [0, 1, 2, 4]


@pytest.mark.cli
def test_an_inventory_without_gpus_is_named_not_answered_with_add_inventory(tmp_path):
    """Cases re-run: INVENTORY= a file with no GPU got 'No GPU is visible on this machine ... add
    INVENTORY='."""
    data = json.loads((INVENTORIES / "1x4090-driver535.json").read_text())
    (tmp_path / "none.json").write_text(json.dumps({**data, "gpus": []}))
    proc = run_cli("validate", "recipe=smoke-gpu", f"INVENTORY={tmp_path / 'none.json'}", env=clean_env())
    assert proc.returncode == 2
    assert f"The inventory {tmp_path / 'none.json'} lists no GPU" in proc.stderr
    assert "add INVENTORY=" not in proc.stderr


@pytest.mark.cli
def test_without_a_gpu_the_example_inventory_offered_has_the_gpus_the_recipe_names():
    """New-user walk: a 2-GPU import was offered the 1-GPU example, then told 'GPU 1 does not exist'."""
    proc = run_cli("validate", "recipe=smoke-server", env=clean_env())  # TRAIN_GPUS=0 ROLLOUT_GPUS=1
    assert proc.returncode == 2 and "INVENTORY=examples/inventories/2x4090-driver535.json (" in proc.stderr


@pytest.mark.cli
def test_a_mistyped_recipe_name_gets_a_did_you_mean():
    proc = run_cli("validate", "recipe=smok", env=clean_env())
    assert proc.returncode == 2 and "fix: did you mean recipe=smoke? use one of:" in proc.stderr
