"""The machine and the disk a run needs (entrypoint/preflight/environment.py): /dev/shm (case C02 of
tests/cases.md), the driver (C03), the output and run directories, the free space a run writes.

Most tests run `python -m entrypoint train ...` or `validate` with a fake `swift` that records every start
(tests/fakes/swift): a refusal exits 2 with the message and the fix, and the fake never ran. The rest call
environment.check on a plan in process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import (
    FAKES,
    INVENTORIES,
    ROOT,
    build_plan,
    clean_env,
    inventory_file,
    refused,
    run_cli,
    tmpfs,
)

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

COLOCATE = FAKES / "colocate.env"
SERVER = FAKES / "server.env"
COUNTDOWN = ("recipe=countdown-1x4090", f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}")


# C02: /dev/shm too small ---------------------------------------------------------------------------


def test_c02_small_shm_with_p2p_disabled_multi_gpu_run_is_refused(tmp_path):
    inv = inventory_file(tmp_path, "5x4090-driver535", shm_bytes=64 * 1024**2)
    err = refused(
        tmp_path,
        f"recipe={SERVER}",
        f"INVENTORY={inv}",
        "TRAIN_GPUS=0-3",
        "ROLLOUT_GPUS=4",
        "DATALOADER_NUM_WORKERS=4",
    )
    assert "/dev/shm is 64 MiB" in err and "NCCL_P2P_DISABLE=1" in err
    assert "ipc: host" in err and "shm_size" in err


def test_c02_small_shm_with_nccl_shm_disabled_is_a_warning_that_says_so(tmp_path):
    """Cases re-run: NCCL_SHM_DISABLE=1 keeps NCCL off /dev/shm (sockets instead), yet the refusal said the
    GPU processes exchange data through it."""
    inv = inventory_file(tmp_path, "5x4090-driver535", shm_bytes=64 * 1024**2)
    proc = run_cli(
        "validate",
        f"recipe={SERVER}",
        f"INVENTORY={inv}",
        "TRAIN_GPUS=0-3",
        "ROLLOUT_GPUS=4",
        "DATALOADER_NUM_WORKERS=4",
        "NCCL_SHM_DISABLE=1",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning: /dev/shm: /dev/shm is 64 MiB; NCCL_SHM_DISABLE=1 keeps NCCL off it" in proc.stdout


def test_c02_shipped_compose_file_sets_ipc_or_shm_size():
    text = (ROOT / "compose.yaml").read_text()
    assert "ipc: host" in text or "shm_size" in text


def test_c02_small_shm_warning_names_what_uses_it(tmp_path):
    """Cases re-run: two A100s with P2P and no dataloader workers were warned that "dataloader workers pass
    batches through it"; the warning names the users there are."""
    inv = inventory_file(tmp_path, "2xA100-nvlink-ib", shm_bytes=64 * 1024**2)
    proc = run_cli(
        "validate",
        f"recipe={SERVER}",
        f"INVENTORY={inv}",
        "DATALOADER_NUM_WORKERS=0",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "the 2 GPU processes share memory through it" in proc.stdout and "dataloader" not in proc.stdout


def test_c02_small_shm_single_gpu_with_workers_is_only_a_warning(tmp_path):
    inv = inventory_file(tmp_path, "1x4090-driver535", shm_bytes=64 * 1024**2)
    proc = run_cli(
        "validate",
        f"recipe={COLOCATE}",
        f"INVENTORY={inv}",
        "DATALOADER_NUM_WORKERS=2",
        f"OUTPUT_DIR={tmp_path}",
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning: /dev/shm" in proc.stdout


# C03: the driver -----------------------------------------------------------------------------------------


def test_c03_driver_too_old_states_minimum_and_recommended(tmp_path):
    inv = inventory_file(tmp_path, "1x4090-driver535", driver_version="525.60.11")
    err = refused(tmp_path, "recipe=countdown-1x4090", f"INVENTORY={inv}")
    assert ">= 525.60.13" in err and "CUDA 12.4 runtime" in err
    assert "550.54.14" in err and "RTX 40" in err


# The output and run directories -------------------------------------------------------------------


def test_a_read_only_output_volume_is_called_read_only_not_given_a_chown(tmp_path):
    """A read-only mount was refused as "not writable" with `chown` to the owner it already had."""
    with tmpfs(tmp_path / "volume", "1m", "ro"):  # read-only: even root cannot write there
        err = refused(tmp_path, "recipe=smoke", f"OUTPUT_DIR={tmp_path / 'volume'}/runs")
    assert (
        f"error: OUTPUT_DIR {tmp_path / 'volume'}/runs: is on a read-only file system ({tmp_path / 'volume'})"
        in err
    )
    assert "fix: mount it read-write (compose: remove :ro from its volume)" in err and "chown" not in err


@pytest.mark.parametrize(
    "info, said, fix",
    [
        (
            {"read_only": True, "owner": "1000:1000", "write_error": "Read-only file system"},
            "is on a read-only file system",
            "mount it read-write (compose: remove :ro from its volume)",
        ),
        (
            {"owner": "4242:4242", "write_error": "Permission denied"},
            "is not writable by this process, though it belongs to its user (uid:gid 4242:4242, "
            "owner 4242:4242; Permission denied)",
            "give the owner write permission to",
        ),
        (
            {"owner": "0:0", "write_error": "Permission denied"},
            "is not writable by this process (uid:gid 4242:4242; the directory belongs to 0:0; "
            "Permission denied)",
            "on the host: `sudo chown -R 4242:4242 ./output`",
        ),
    ],
)
def test_an_output_dir_that_cannot_be_written_gets_the_fix_of_its_cause(info, said, fix):
    """Read-only mount, a mode that keeps out its own owner, another owner: chown only for the last."""
    import dataclasses

    from entrypoint.facts.facts import PathInfo
    from entrypoint.preflight import environment

    plan = build_plan("recipe=smoke", "RUN_NAME=r")
    out = str(Path(plan.recipe.settings.OUTPUT_DIR).expanduser())
    shut = PathInfo(
        exists=True, is_dir=True, readable=True, writable=False, nearest=out, disk_free_gib=100, **info
    )
    facts = dataclasses.replace(plan.facts, paths={**plan.facts.paths, out: shut}, uid=4242, gid=4242)
    (problem,) = [p for p in environment.check(plan, facts, 0) if p.where == f"OUTPUT_DIR {out}"]
    assert problem.message == said or problem.message.startswith(said), problem.render()
    assert problem.fix.startswith(fix) and ("chown" in problem.fix) == (info["owner"] == "0:0")


@pytest.mark.parametrize("where", ["itself", "its parent"])
def test_output_dir_that_is_a_file_says_so(tmp_path, where):
    """A regular file was once reported as "not writable ... chown"."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    out = blocker if where == "itself" else blocker / "runs"
    err = refused(tmp_path, "recipe=smoke", f"OUTPUT_DIR={out}")
    said = "is a file, not a directory" if where == "itself" else f"cannot be made: {blocker} is a file"
    assert (
        f"error: OUTPUT_DIR {out}: {said}" in err
        and "chown" not in err
        and "point OUTPUT_DIR at a directory" in err
    )


def test_a_run_directory_that_is_a_file_says_so(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "r").write_text("")  # refused() names the run r
    err = refused(tmp_path, "recipe=smoke")
    assert f"error: RUN_NAME r: {tmp_path / 'out' / 'r'} is a file, not a run directory" in err


def test_a_folder_of_the_user_s_is_not_taken_for_a_run_directory(tmp_path):
    """RUN_NAME naming an existing folder with the user's files and no manifest.json: refused before anything
    is written, the files untouched; a directory holding only what a start writes before its manifest (a
    start that died early, other nodes' folders) is a run and is accepted."""
    folder = tmp_path / "out" / "r"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("my notes\n")
    (folder / "results.csv").write_text("a,b\n")
    err = refused(tmp_path, "recipe=smoke")
    assert (
        f"error: RUN_NAME r: {folder} already holds files that are not a grpo-rig run "
        "(README.md, results.csv) and no manifest.json"
    ) in err
    assert "fix: choose another RUN_NAME" in err
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "results.csv"]
    assert (folder / "README.md").read_text() == "my notes\n"

    early = tmp_path / "early"
    for name in ("logs", "data", "train", "nodes"):
        (early / "out" / "r" / name).mkdir(parents=True)
    (early / "out" / "r" / "run.lock").write_text("")
    proc = run_cli("validate", "recipe=smoke", f"OUTPUT_DIR={early / 'out'}", "RUN_NAME=r", env=clean_env())
    assert proc.returncode == 0 and "not a grpo-rig run" not in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )


# The free space a run writes ----------------------------------------------------------------------


def test_merged_export_needs_room_for_the_whole_model_before_the_run():
    """EXPORT_MERGED=true writes a full copy of the model: the free space is checked before training. On
    this machine (NVML's inventory) too little refuses; planned for another machine (INVENTORY) it warns."""
    import dataclasses

    from entrypoint.facts.facts import PathInfo
    from entrypoint.preflight import environment

    plan = build_plan(*COUNTDOWN, "EXPORT_MERGED=true", inventory="1x4090-driver535")
    here = dataclasses.replace(plan, inventory=plan.inventory.model_copy(update={"source": "nvml"}))
    out = str(Path(plan.recipe.settings.OUTPUT_DIR).expanduser())
    tight = PathInfo(exists=True, is_dir=True, readable=True, writable=True, nearest=out, disk_free_gib=1.0)
    facts = dataclasses.replace(plan.facts, paths={**plan.facts.paths, out: tight})
    disk = [p for p in environment.check(here, facts, 0) if p.where.startswith("disk under")]
    assert disk and disk[0].fatal and "the merged model (EXPORT_MERGED=true, 0.9 GiB)" in disk[0].message
    (elsewhere,) = [p for p in environment.check(plan, facts, 0) if p.where.startswith("disk under")]
    assert not elsewhere.fatal and "planned for another machine, INVENTORY" in elsewhere.message
    plan = build_plan(*COUNTDOWN, inventory="1x4090-driver535")  # without the export 1.0 GiB is enough
    assert not [p for p in environment.check(plan, facts, 0) if p.where.startswith("disk under")]


def test_room_for_one_checkpoint_but_not_for_all_of_them_is_a_warning_naming_the_limit_that_fits():
    import dataclasses

    from entrypoint.facts.facts import PathInfo
    from entrypoint.preflight import environment

    plan = build_plan("recipe=smoke", "MAX_STEPS=40", "SAVE_TOTAL_LIMIT=")  # 20 checkpoints of 28 MiB kept
    out = str(Path(plan.recipe.settings.OUTPUT_DIR).expanduser())
    room = PathInfo(exists=True, is_dir=True, readable=True, writable=True, nearest=out, disk_free_gib=0.25)
    facts = dataclasses.replace(plan.facts, paths={**plan.facts.paths, out: room})
    (disk,) = [p for p in environment.check(plan, facts, 0) if p.where.startswith("disk under")]
    assert not disk.fatal and "the disk fills after about 6 checkpoint(s)" in disk.message
    assert disk.fix.startswith("set SAVE_TOTAL_LIMIT=5 ") and "the same command resumes it" in disk.fix


def test_the_free_space_asked_for_comes_from_what_a_run_of_the_recipe_writes():
    """1.0 GiB was once asked for a smoke run that wrote 67 MB (2 checkpoints of 29.8 MB, the adapter
    9.8 MB, logs): now its checkpoints, the export and a margin."""
    from entrypoint.preflight import environment

    smoke = build_plan("recipe=smoke")
    need = environment.disk_need(smoke, smoke.facts)
    assert 67e6 / 1024**3 < need.peak < 0.15, need
    assert need.text == "this run writes about 116 MiB (2 checkpoint(s) of 28 MiB, the export and logs)"
    longer = build_plan("recipe=smoke", "MAX_STEPS=40", "SAVE_TOTAL_LIMIT=")  # every checkpoint kept: 20
    assert "20 checkpoint(s) of 28 MiB" in environment.disk_need(longer, longer.facts).text
    unknown = build_plan("recipe=smoke", "MODEL_SOURCE=hub", "MODEL=someone/unknown-model")
    assert environment.disk_need(unknown, unknown.facts).peak == 1.0


@pytest.mark.parametrize("name", ["smoke", "smoke-gpu", "smoke-server", "countdown-1x4090"])
def test_every_path_a_plan_writes_is_inside_its_run_directory(name):
    import dataclasses

    from entrypoint.preflight import environment

    plan = build_plan(f"recipe={name}", "EXPORT_MERGED=true", inventory="2x4090-driver535")
    assert len(plan.written) >= 3 and environment.check_run_paths(plan) == []
    outside = dataclasses.replace(
        plan.processes[-1], argv=[*plan.processes[-1].argv, "--output_dir", "/elsewhere"]
    )
    (problem,) = environment.check_run_paths(
        dataclasses.replace(plan, processes=[*plan.processes[:-1], outside])
    )
    assert f"the run would write outside {plan.run_dir}: /elsewhere" in problem.message


def test_a_disk_too_small_names_the_incomplete_checkpoints_to_delete_and_no_knob_that_is_off():
    """Cases re-run: after a full disk the refusal said 'or set EXPORT_MERGED=false' (it was off) and not
    the checkpoint the full disk had cut short, whose deletion made the run fit."""
    import dataclasses

    from entrypoint.facts.facts import PathInfo, Previous
    from entrypoint.preflight import environment

    plan = build_plan("recipe=smoke", inventory="1x4090-driver535")
    plan = dataclasses.replace(plan, inventory=plan.inventory.model_copy(update={"source": "nvml"}))
    out = str(Path(plan.recipe.settings.OUTPUT_DIR).expanduser())
    tight = PathInfo(exists=True, is_dir=True, readable=True, writable=True, nearest=out, disk_free_gib=0.01)
    previous = Previous({"status": "failed"}, "", "", (("train/checkpoint-1", 15 / 1024),))
    facts = dataclasses.replace(plan.facts, paths={**plan.facts.paths, out: tight}, previous=previous)
    (disk,) = [p for p in environment.check(plan, facts, 0) if p.where.startswith("disk under")]
    assert disk.fatal and disk.fix.startswith(
        f"delete {plan.run_dir / 'train/checkpoint-1'} (15 MiB): incomplete"
    )
    assert "EXPORT_MERGED" not in disk.fix
