"""The command line's first words (issue 27): a mistyped command gets the command it is closest to, a
recipe's bare name after a command is `recipe=NAME`, and `keys` lists every owned key in one column."""

from __future__ import annotations

import pytest

from entrypoint.cli import bare_words
from entrypoint.errors import BadInput
from entrypoint.recipe.settings import Settings
from tests.conftest import ROOT, clean_env, run_cli


def refused(*argv: str) -> str:
    with pytest.raises(BadInput) as caught:
        bare_words(list(argv), {})
    (problem,) = caught.value.problems
    return problem.render()


def test_a_mistyped_command_gets_a_did_you_mean():
    # "'trian': is not a KEY=VALUE word" sent a user to the recipe syntax
    assert refused("trian", "recipe=smoke").endswith("fix: did you mean train?")
    assert "did you mean validate?" in refused("valdate", "recipe=smoke")
    assert "the commands: train, rollout, plan, validate" in refused("frobnicate")
    assert "write train recipe=smoke" in refused("smoke")  # a recipe where the command goes


def test_a_bare_recipe_name_after_a_command_is_the_recipe():
    assert bare_words(["validate", "smoke"], {}) == ["validate", "recipe=smoke"]
    assert bare_words(["plan", "smoke-gpu", "MAX_STEPS=2"], {}) == ["plan", "recipe=smoke-gpu", "MAX_STEPS=2"]
    assert bare_words(["validate", "recipe=smoke", "smoke"], {}) == ["validate", "recipe=smoke", "smoke"]
    assert "did you mean recipe=smoke?" in refused("validate", "smok")
    assert bare_words(["recipe=smoke"], {}) == ["train", "recipe=smoke"]  # train stays the default
    assert bare_words([], {}) == ["train"]


def test_validate_with_a_bare_recipe_name_validates_it():
    proc = run_cli("validate", "smoke", env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "recipe smoke: valid" in proc.stdout


def test_keys_lists_every_owned_key_in_one_column():
    out = run_cli("keys", env=clean_env()).stdout.splitlines()
    assert [line.split("=", 1)[0] for line in out] == list(Settings.model_fields)
    assert {line.index("  # ") for line in out} == {out[0].index("  # ")}
    assert any(line.startswith("EVAL_PROMPTS=32 ") for line in out)


QUIET_PROBE = """
import logging, os, sys
from entrypoint.cli import quiet_libraries
quiet_libraries(os.environ)
# what deepspeed 0.16's LoggerFactory.create_logger does on import (deepspeed/utils/logging.py:42-48); the
# real import takes a minute on 2 cores (checked by hand: its two accelerator lines are gone)
ds = logging.getLogger("DeepSpeed")
ds.setLevel(logging.INFO)
ds.propagate = False
ds.addHandler(logging.StreamHandler(sys.stdout))
ds.warning("Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.")
ds.info("Setting ds_accelerator to cpu (auto detect)")
from tqdm import tqdm
for _ in tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."):
    pass
from transformers.utils import logging as transformers_logging
transformers_logging.get_logger("transformers.tokenization").warning_once("You are using the default legacy behaviour")
ds.error("an error still shows")
"""


def test_prepare_model_and_evaluate_keep_library_notices_off_the_console():
    """The tokenizer's "legacy" paragraph, DeepSpeed's accelerator lines (twice) and a tqdm bar on
    `prepare-model` and `evaluate`, which the train console already kept in the log (issue 27)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {
        k: v for k, v in clean_env().items() if k not in ("TRANSFORMERS_VERBOSITY", "TQDM_DISABLE", "CONSOLE")
    }
    quiet = subprocess.run(
        [sys.executable, "-c", QUIET_PROBE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert quiet.returncode == 0, quiet.stderr
    assert (quiet.stdout + quiet.stderr).strip() == "an error still shows"
    loud = subprocess.run([sys.executable, "-c", QUIET_PROBE], cwd=ROOT, env={**env, "CONSOLE": "all"},
                          capture_output=True, text=True)  # fmt: skip
    assert "legacy" in loud.stderr and "Setting accelerator" in loud.stdout and "GGUF" in loud.stderr


def test_the_quiet_settings_come_before_any_library_is_imported():
    """tqdm reads TQDM_DISABLE when it is imported, and `from entrypoint import run` imports it: the bar of
    prepare-model's GGUF conversion still showed on a new user's console when the settings came after."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    fake_prepare = (
        "import sys\n"
        "from entrypoint import cli, models\n"
        "def prepare(*args, **kwargs):\n"
        "    from tqdm.auto import tqdm\n"
        "    list(tqdm(range(3), desc='Converting and de-quantizing GGUF tensors...'))\n"
        "    return 'converted'\n"
        "models.prepare = prepare\n"
        "sys.exit(cli.main(['prepare-model']))\n"
    )
    env = {k: v for k, v in clean_env().items() if k not in ("TQDM_DISABLE", "CONSOLE")}
    proc = subprocess.run(
        [sys.executable, "-c", fake_prepare], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "GGUF" not in proc.stderr and proc.stdout.startswith("embedded model"), proc.stdout + proc.stderr


def test_help_is_a_command_too():
    """New-user walk: `python -m entrypoint help` was refused as 'not a command'."""
    assert "usage: python -m entrypoint" in run_cli("help", env=clean_env(), timeout=60).stdout
    assert (
        "usage: python -m entrypoint evaluate"
        in run_cli("help", "evaluate", env=clean_env(), timeout=60).stdout
    )


def test_train_with_an_inventory_of_gpus_this_machine_lacks_is_refused_and_plan_is_not(tmp_path):
    """New-user trial: following the GPU refusal's fix (INVENTORY=...) made `train` start ms-swift here, which
    downloaded the model and died without a GPU. INVENTORY describes a machine for plan/validate; train on a
    machine whose NVML sees fewer GPUs is refused before anything starts, naming what to do."""
    if not _no_gpu_here():
        pytest.skip("this machine has a GPU")
    inventory = f"INVENTORY={ROOT / 'examples' / 'inventories' / '1x4090-driver535.json'}"
    proc = run_cli("train", "recipe=countdown-1x4090", inventory, f"OUTPUT_DIR={tmp_path}", env=clean_env())
    assert proc.returncode == 2, proc.stderr
    assert "describes 1 GPU(s) for planning, but this command starts the run on this machine" in proc.stderr
    assert (
        "leave INVENTORY out where you train" in proc.stderr
        and "Downloading" not in proc.stdout + proc.stderr
    )
    assert (
        run_cli(
            "plan", "recipe=countdown-1x4090", inventory, f"OUTPUT_DIR={tmp_path}", env=clean_env()
        ).returncode
        == 0
    )


def _no_gpu_here() -> bool:
    from entrypoint.world import hardware

    return not hardware.probe().gpus
