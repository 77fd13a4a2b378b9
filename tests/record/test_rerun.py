"""`rerun`: a run repeated from its manifest, with the fake `swift` (tests/fakes/swift); drift named before
anything starts. The real CPU rerun of the smoke run is in tests/commands/test_smoke_run.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from entrypoint.errors import BadInput
from entrypoint.plan.build import Flag, Process
from entrypoint.record import rerun, runlock
from entrypoint.record.manifest import values_sha256
from entrypoint.record.rerun import Now
from tests.conftest import FAKE_SWIFT, FAKES, ROOT, clean_env

RECIPE = FAKES / "colocate.env"


def run(tmp_path: Path, *words: str) -> subprocess.CompletedProcess:
    pids = tmp_path / "pids"
    pids.mkdir(exist_ok=True)
    env = clean_env(
        GRPO_RIG_SWIFT=str(FAKE_SWIFT), FAKE_PID_DIR=str(pids), FAKE_TRAINER="steps", FAKE_STEP_SECONDS="0"
    )
    return subprocess.run(
        [sys.executable, "-m", "entrypoint", *words],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def named(argv: list[str], run_dir: str) -> list[str]:
    """argv with its run directory and --run_name written <run>: what differs between a run and its rerun."""
    words = [w.replace(run_dir, "<run>") for w in argv]
    return [("<run>" if i and words[i - 1] == "--run_name" else w) for i, w in enumerate(words)]


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


@pytest.fixture
def finished(tmp_path) -> Path:
    """A finished 2-step run of the fake recipe on its own copy of the dataset: tmp_path/out/r."""
    data = tmp_path / "train.jsonl"
    shutil.copy(ROOT / "examples" / "tcm" / "sample.jsonl", data)
    done = run(
        tmp_path,
        "train",
        f"recipe={RECIPE}",
        f"OUTPUT_DIR={tmp_path / 'out'}",
        "RUN_NAME=r",
        "MAX_STEPS=2",
        f"DATASET={data}",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp_path / "out" / "r"


@pytest.mark.cli
def test_rerun_plan_of_a_finished_run_plans_its_trainer_argv_and_keeps_each_values_source(tmp_path, finished):
    shown = run(tmp_path, "rerun", f"run={finished}", "--plan", "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    planned = json.loads(shown.stdout)
    old = manifest(finished)
    assert planned["rerun_of"]["argv_changes"] == [] and planned["rerun_of"]["drift"] == []
    trainer = next(p for p in planned["plan"]["processes"] if p["role"] == "trainer")
    old_argv = next(p for p in old["processes"] if p["role"] == "trainer")["argv"]
    new_run = planned["plan"]["run_dir"]
    assert Path(new_run).parent == finished.parent and Path(new_run).name.startswith("r-rerun-")
    assert named(trainer["argv"], new_run) == named(old_argv, str(finished))
    # the values come back from the manifest with the layer that first set them, not from the recipe file
    recipe_line = planned["resolved_recipe"]["NUM_GENERATIONS"]["source"]
    assert (
        recipe_line == old["resolved_recipe"]["NUM_GENERATIONS"]["source"] and "colocate.env" in recipe_line
    )


@pytest.mark.cli
def test_a_dataset_changed_by_one_row_is_refused_naming_its_sha256_and_accepted_only_on_request(
    tmp_path, finished
):
    old = manifest(finished)["inputs"]["dataset"][0]
    data = Path(old["path"])
    rows = data.read_text().splitlines()
    data.write_text("\n".join(rows[:-1]) + "\n")  # one row fewer
    refused = run(tmp_path, "rerun", f"run={finished}")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"sha256 {old['sha256'][:12]}..." in refused.stderr and "--accept-drift" in refused.stderr
    assert sorted(p.name for p in finished.parent.iterdir()) == ["r"], "a refused rerun wrote a run directory"
    taken = run(tmp_path, "rerun", f"run={finished}", "RUN_NAME=again", "--accept-drift")
    assert taken.returncode == 0, taken.stdout + taken.stderr
    record = manifest(finished.parent / "again")["rerun_of"]
    assert record["drift_accepted"] is True and old["sha256"][:12] in record["drift"][0]
    assert record["manifest_sha256"] and record["path"] == str(finished)


@pytest.mark.cli
def test_an_override_is_recorded_as_one_and_a_copied_run_directory_reruns_here(tmp_path, finished):
    copy = tmp_path / "elsewhere" / "r"
    shutil.copytree(finished, copy)
    shutil.rmtree(finished.parent)
    done = run(tmp_path, "rerun", f"run={copy}", "LEARNING_RATE=2e-5", "RUN_NAME=lr")
    assert done.returncode == 0, done.stdout + done.stderr
    new = manifest(copy.parent / "lr")
    assert new["resolved_recipe"]["LEARNING_RATE"] == {"value": "2e-5", "source": "command line"}
    assert new["rerun_of"]["overrides"] == {"RUN_NAME": "lr", "LEARNING_RATE": "2e-5"}
    assert new["attempts"][0]["values"]["LEARNING_RATE"] == "2e-5"
    assert new["resolved_recipe"]["SEED"] == manifest(copy)["resolved_recipe"].get(
        "SEED", new["resolved_recipe"]["SEED"]
    )


@pytest.mark.cli
def test_a_run_without_a_manifest_or_with_a_broken_one_is_refused(tmp_path):
    missing = run(tmp_path, "rerun", f"run={tmp_path / 'nothing'}", f"OUTPUT_DIR={tmp_path}")
    assert missing.returncode == 2 and "no run directory with a manifest.json" in missing.stderr
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "manifest.json").write_text('{"status": "runn')
    cut = run(tmp_path, "rerun", f"run={tmp_path / 'cut'}")
    assert cut.returncode == 2 and "is not JSON" in cut.stderr, cut.stderr
    bare = run(tmp_path, "rerun", "--plan")
    assert bare.returncode == 2 and "add one run=" in bare.stderr


@pytest.mark.cli
def test_a_rerun_named_as_the_run_itself_is_refused_not_resumed(tmp_path, finished):
    before = (finished / "manifest.json").read_text()
    same = run(tmp_path, "rerun", f"run={finished}", "RUN_NAME=r")
    assert same.returncode == 2 and "names the run being repeated" in same.stderr, same.stderr
    assert (finished / "manifest.json").read_text() == before


@pytest.mark.cli
def test_a_rerun_named_as_another_existing_run_is_refused_and_touches_it(tmp_path, finished):
    """`rerun run=A RUN_NAME=B` resumed B with A's values, replaced its adapter and wrote `rerun_of: A` into
    it."""
    other = finished.parent / "b"
    shutil.copytree(finished, other)
    before = (other / "manifest.json").read_text()
    refused = run(tmp_path, "rerun", f"run={finished}", "RUN_NAME=b")
    assert refused.returncode == 2 and "names an existing run directory" in refused.stderr, refused.stderr
    assert (other / "manifest.json").read_text() == before


@pytest.mark.cli
def test_rerun_plan_imports_no_plugin_and_names_a_changed_system_file(tmp_path):
    """`rerun --plan` starts nothing: the reward plugins are compared by sha256, not imported; a SYSTEM prompt
    file edited after the run is drift."""
    system = tmp_path / "system.txt"
    system.write_text("You are a careful physician.")
    data = tmp_path / "train.jsonl"
    shutil.copy(ROOT / "examples" / "tcm" / "sample.jsonl", data)
    done = run(
        tmp_path,
        "train",
        f"recipe={RECIPE}",
        f"OUTPUT_DIR={tmp_path / 'out'}",
        "RUN_NAME=r",
        "MAX_STEPS=1",
        f"DATASET={data}",
        f"SYSTEM={system}",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = manifest(tmp_path / "out" / "r")["inputs"]
    assert recorded["system"][0]["path"] == str(system) and recorded["plugins"][0]["sha256"]
    same = run(tmp_path, "rerun", f"run={tmp_path / 'out' / 'r'}", "--plan")
    # the image's own rewards only: nothing imported, and nothing to say of them
    assert same.returncode == 0 and "reward plugins" not in same.stdout, same.stdout + same.stderr
    system.write_text("You are a careless physician.")
    changed = run(tmp_path, "rerun", f"run={tmp_path / 'out' / 'r'}", "--plan")
    assert changed.returncode == 2 and f"SYSTEM file {system}" in changed.stdout, changed.stdout


@pytest.mark.cli
def test_secrets_given_to_a_rerun_reach_no_printed_surface(tmp_path, finished):
    """The console's first line, --plan and --plan --json once printed the overrides' values as typed."""
    secrets = {"HF_TOKEN": "hf_rerunSECRETvalue1", "WANDB_API_KEY": "wbSECRETvalue2"}
    given = [f"{k}={v}" for k, v in secrets.items()]
    shown = run(tmp_path, "rerun", f"run={finished}", *given, "HUB_TOKEN=ab", "--plan")
    as_json = run(tmp_path, "rerun", f"run={finished}", *given, "HUB_TOKEN=ab", "--plan", "--json")
    trained = run(tmp_path, "rerun", f"run={finished}", *given, "RUN_NAME=s")
    for proc in (shown, as_json, trained):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert not [v for v in secrets.values() if v in proc.stdout + proc.stderr], proc.stdout + proc.stderr
    # a value too short to scrub from free text is still replaced where a listing names its key
    assert "overrides: HF_TOKEN=<redacted>, WANDB_API_KEY=<redacted>, HUB_TOKEN=<redacted>" in shown.stdout
    assert "HUB_TOKEN=ab" not in shown.stdout and '"ab"' not in as_json.stdout
    assert set(json.loads(as_json.stdout)["rerun_of"]["overrides"].values()) == {"<redacted>"}
    first = trained.stderr.splitlines()[0]
    assert first.startswith("rerun of r (") and "HF_TOKEN=<redacted>, WANDB_API_KEY=<redacted>" in first


@pytest.mark.cli
def test_a_run_still_training_is_refused_at_once_and_its_plan_says_so(tmp_path, finished):
    """A rerun of a run whose lock a live training holds read a manifest saying `running`, changing under
    it."""
    with runlock.RunLock() as lock:  # this process holds the run as its training would
        assert lock.take(finished)
        started = time.monotonic()
        refused = run(tmp_path, "rerun", f"run={finished}")
        assert time.monotonic() - started < 15
        shown = run(tmp_path, "rerun", f"run={finished}", "--plan")
        as_json = run(tmp_path, "rerun", f"run={finished}", "--plan", "--json")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"error: run r: is still training (PID {os.getpid()} since " in refused.stderr
    assert "fix: wait for it or stop it (kill -TERM" in refused.stderr
    assert "a rerun reads a finished attempt's manifest" in refused.stderr
    assert sorted(p.name for p in finished.parent.iterdir()) == ["r"], "a refused rerun wrote a run directory"
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"warning: run r: is still training (PID {os.getpid()}" in shown.stdout
    assert "a rerun is refused until it ends" in shown.stdout and "[trainer]" in shown.stdout
    assert "is still training" in json.loads(as_json.stdout)["problems"][0]
    # once the holder is gone (the lock dropped with its descriptor), the run is a finished one again
    again = run(tmp_path, "rerun", f"run={finished}", "--plan")
    assert again.returncode == 0 and "still training" not in again.stdout + again.stderr


def test_a_lock_held_by_an_evaluation_or_by_nobody_is_no_training(tmp_path):
    assert runlock.held_by(tmp_path) is None  # no lock file
    (tmp_path / "manifest.json").write_text("{}")  # a run directory: its lock file stays after release
    with runlock.RunLock() as lock:
        lock.take(tmp_path)
        assert runlock.held_by(tmp_path)["pid"] == os.getpid()
        evaluation = {"pid": 1, "command": "python -m entrypoint evaluate run=r"}
        os.ftruncate(lock.fd, 0)
        os.pwrite(lock.fd, json.dumps(evaluation).encode(), 0)
        assert runlock.evaluating(runlock.held_by(tmp_path))
    assert (tmp_path / "run.lock").exists() and runlock.held_by(tmp_path) is None  # its holder is gone


def test_a_secret_as_the_manifest_keeps_it_is_taken_from_the_environment_not_a_crash():
    """manifest.write redacts a secret's whole {value, source} item to "<redacted>" (redact.deep): reading it
    as an item ended `rerun` (and `evaluate`) of any run given a token in AttributeError."""
    from entrypoint import redact

    written = redact.deep(
        {
            "resolved_recipe": {
                "HF_TOKEN": {"value": "hf_x", "source": "command line"},
                "BETA": {"value": "0.04", "source": "recipes/x.env:3"},
            }
        },
        [],
    )
    assert written["resolved_recipe"]["HF_TOKEN"] == "<redacted>"
    rec = rerun.recorded(written)
    assert rec.secrets == ["HF_TOKEN"] and set(rec.values) == {"BETA"}


@pytest.mark.cli
@pytest.mark.parametrize(
    "text, said",
    [
        ("[]", "its manifest.json is [] (input should be a valid dictionary)"),
        ("null", "its manifest.json is null (input should be a valid dictionary)"),
        (
            '{"resolved_recipe": {"SEED": 5}}',
            "its manifest.json has resolved_recipe.SEED = 5 (input should be",
        ),
        (
            '{"resolved_recipe": {"SEED": {"value": "1", "source": "x"}}, '
            '"processes": [{"role": "trainer", "argv": "x"}]}',
            'its manifest.json has processes.0.argv = "x" (input should be a valid list)',
        ),
        (
            '{"resolved_recipe": {"SEED": {"value": "1", "source": "x"}}, "inputs": {"dataset": 3}}',
            "its manifest.json has inputs.dataset = 3",
        ),
    ],
)
def test_a_manifest_of_another_shape_is_refused_in_one_line_naming_the_value(tmp_path, text, said):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "manifest.json").write_text(text)
    proc = run(tmp_path, "rerun", f"run={tmp_path / 'm'}", "--plan")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"error: run {tmp_path / 'm'}: {said}" in proc.stderr, proc.stderr


DATA = {
    "versions": {"ms-swift": "3.6.4", "torch": "2.6.0", "grpo-rig": None},
    "image": {"lock_sha256": "a" * 64},
    "inputs": {
        "dataset": [{"spec": "d.jsonl", "path": "d.jsonl", "sha256": "b" * 64, "bytes": 10}],
        "model": {
            "folder": "/m",
            "files": {"config.json": "sha256:" + "c" * 64, "model.safetensors": "sha256:1"},
        },
    },
    "inventory": {"gpus": [{"name": "NVIDIA GeForce RTX 4090"}]},
}
SAME = Now(
    versions={"ms-swift": "3.6.4", "torch": "2.6.0", "grpo-rig": "9"},
    lock_sha256="a" * 64,
    datasets=[{"spec": "d.jsonl", "sha256": "b" * 64, "bytes": 10}],
    model_files={"config.json": "sha256:" + "c" * 64, "model.safetensors": "sha256:1"},
    gpus=["NVIDIA GeForce RTX 4090"],
    files={},
)


def test_the_same_inputs_on_the_same_machine_are_no_drift():
    assert rerun.drift(DATA, SAME) == []


def test_each_kind_of_drift_is_named_and_another_machine_is_only_reported():
    now = SAME._replace(
        versions={**SAME.versions, "ms-swift": "3.7.0"},
        lock_sha256="d" * 64,
        model_files={**SAME.model_files, "model.safetensors": "sha256:2"},
        gpus=["NVIDIA H200"],
    )
    found = {p.where: p for p in rerun.drift(DATA, now)}
    assert (
        found["version of ms-swift"].fatal
        and "3.6.4 in the run, 3.7.0 here" in found["version of ms-swift"].message
    )
    assert found["requirements/runtime.lock"].fatal
    assert found["model"].fatal and "changed: model.safetensors" in found["model"].message
    assert not found["machine"].fatal and "NVIDIA H200" in found["machine"].message
    assert not any(p.fatal for p in rerun.accepted(list(found.values())))


def test_what_cannot_be_compared_is_said_not_refused():
    hub = {**DATA, "inputs": {"dataset": [{"spec": "org/set", "sha256": None, "why": "not a local file"}]}}
    found = rerun.drift(hub, SAME._replace(model_files={}))
    assert found and not any(p.fatal for p in found)
    assert {p.where for p in found} == {"dataset org/set", "model"}


def test_planner_values_and_secrets_are_not_taken_back():
    data = {
        "resolved_recipe": {
            "BETA": {"value": "0.04", "source": "recipes/x.env:3"},
            "PER_DEVICE_TRAIN_BATCH_SIZE": {"value": "4", "source": "planner: the largest micro-batch ..."},
            "WANDB_API_KEY": {"value": "<redacted>", "source": "command line"},
            "RUN_NAME": {"value": "r", "source": "command line"},
        }
    }
    rec = rerun.recorded(data)
    assert list(rec.values) == ["BETA"] and rec.values["BETA"].source == "recipes/x.env:3"
    assert rec.replanned == {"PER_DEVICE_TRAIN_BATCH_SIZE": "4"} and rec.secrets == ["WANDB_API_KEY"]


def test_refused_drift_raises_bad_input_through_the_checker(tmp_path):
    from entrypoint.commands.rerun import Checker

    checker = Checker(DATA, rerun.recorded({}), {}, {}, accept=False, show=False)
    checker.problems = lambda plan: rerun.drift(DATA, SAME._replace(lock_sha256="d" * 64))
    with pytest.raises(BadInput):
        checker(None)
    assert checker.record["drift"] and checker.record["drift_accepted"] is False


def test_a_changed_plugin_file_or_val_dataset_is_named_as_drift():
    """The reward plugin, a SYSTEM prompt file and VAL_DATASET were not fingerprinted: "no drift"."""
    data = {
        **DATA,
        "inputs": {
            **DATA["inputs"],
            "plugins": [
                {"spec": "/img/grpo_rig_rewards.py", "sha256": "e" * 64},
                {"spec": "/data/my_reward.py", "sha256": "f" * 64},
            ],
            "val_dataset": [{"spec": "/data/val.jsonl", "sha256": "1" * 64}],
        },
    }
    same = SAME._replace(
        files={"plugins": data["inputs"]["plugins"], "val_dataset": data["inputs"]["val_dataset"]}
    )
    assert rerun.drift(data, same) == []
    edited = same._replace(
        files={
            **same.files,
            "plugins": [same.files["plugins"][0], {"spec": "/data/my_reward.py", "sha256": "0" * 64}],
        }
    )
    found = {p.where: p for p in rerun.drift(data, edited)}
    assert found["reward plugin /data/my_reward.py"].fatal, found
    assert "--accept-drift" in found["reward plugin /data/my_reward.py"].fix
    gone = same._replace(files={**same.files, "val_dataset": []})
    assert rerun.drift(data, gone)[0].where == "VAL_DATASET /data/val.jsonl"


def test_values_changed_between_attempts_are_drift_naming_the_step():
    """A run resumed with another BETA (or MAX_STEPS: the learning-rate schedule) trained its steps with two
    sets of values; a rerun with the last attempt's values for every step repeats neither."""
    attempts = [
        {"values": {"BETA": "0.04", "MAX_STEPS": "2"}, "resume_from": None},
        {"values": {"BETA": "0.2", "MAX_STEPS": "4"}, "resume_from": "/o/r/train/checkpoint-2"},
    ]
    found = rerun.drift({**DATA, "attempts": attempts}, SAME)
    assert len(found) == 1 and found[0].fatal and found[0].where == "attempt 2", found
    assert "checkpoint-2" in found[0].message and "BETA 0.04 -> 0.2" in found[0].message
    assert "MAX_STEPS 2 -> 4" in found[0].message
    alike = [
        {**a, "values": {"BETA": "0.04", "CONSOLE": c}}
        for a, c in zip(attempts, ("steps", "all"), strict=True)
    ]
    assert rerun.drift({**DATA, "attempts": alike}, SAME) == []


def test_a_manifest_edited_after_the_run_is_drift_and_its_values_name_the_manifest():
    resolved = {"BETA": {"value": "0.04", "source": "recipes/x.env:3"}}
    data = {**DATA, "resolved_recipe": resolved, "values_sha256": values_sha256(resolved)}
    assert rerun.drift(data, SAME) == [] and rerun.recorded(data).values["BETA"].source == "recipes/x.env:3"
    data["resolved_recipe"] = {"BETA": {"value": "0.4", "source": "recipes/x.env:3"}}
    found = rerun.drift(data, SAME)
    assert [p.where for p in found] == ["manifest.json"] and found[0].fatal
    assert rerun.recorded(data, "/o/r/manifest.json").values["BETA"].source == (
        "/o/r/manifest.json (edited after the run)"
    )


@pytest.mark.parametrize(
    ("source", "origin", "detail"),
    [
        ("recipes/defaults.env:3", "DEFAULTS_FILE", "recipes/defaults.env:3"),
        ("recipes/x.env:7", "RECIPE_FILE", "recipes/x.env:7"),
        ("/home/me/my.env:2", "RECIPE_FILE", "/home/me/my.env:2"),
        ("environment", "ENVIRONMENT", ""),
        ("command line", "COMMAND_LINE", ""),
        ("planner: the largest micro-batch ...", "PLANNER", "the largest micro-batch ..."),
        ("planner", "PLANNER", ""),
    ],
)
def test_a_manifests_source_text_is_read_back_as_its_origin(source, origin, detail):
    """The manifest keeps each value's source as text (recipe.load's Value.source): read back, it gives the
    same origin and detail, and writing it again gives the same text."""
    value = rerun.recorded_value("4", source)
    assert (value.origin.name, value.detail) == (origin, detail) and value.source == source


def test_argv_changes_read_the_recorded_argv_once_and_the_planned_flags_typed():
    """The run's trainer argv comes from its manifest as text, read back in one place (recorded_flags); the
    rerun's from the planned process's flags. Run directories, run names, resume flags and secrets aside, only
    what changed is listed."""
    old = [
        "swift",
        "rlhf",
        "--max_steps",
        "3",
        "--reward_funcs",
        "countdown",
        "format",
        "--output_dir",
        "/o/r1/train",
        "--run_name",
        "r1",
        "--resume_from_checkpoint",
        "/o/r1/train/checkpoint-2",
        "--hub_token",
        "<redacted>",
    ]
    new = Process.of(
        "trainer",
        {},
        ["swift", "rlhf"],
        [
            Flag("max_steps", ("1",)),
            Flag("reward_funcs", ("countdown", "format")),
            Flag("output_dir", ("/o/r2/train",)),
            Flag("run_name", ("r2",)),
            Flag("hub_token", ("hf_secret",)),
        ],
    )
    assert new.argv[:4] == ["swift", "rlhf", "--max_steps", "1"] and new.flag("reward_funcs") == (
        "countdown",
        "format",
    )
    assert rerun.recorded_run_dir(old) == "/o/r1" and rerun.recorded_run_dir(["swift"]) == "\0"
    assert rerun.argv_changes(old, new, "/o/r1", "/o/r2") == ["--max_steps 3 -> --max_steps 1"]
