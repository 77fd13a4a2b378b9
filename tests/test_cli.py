"""The command line: one parser per command (entrypoint/commands/, registered in REGISTRY), the words read
as typed. A mistyped command gets the command it is closest to, a recipe's bare name after a command is
`recipe=NAME`, words that are not a command's go to train (the default), ms-swift-style --flags reach the
recipe parser beside their values, and `keys` lists every owned key in one column."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from entrypoint import cli
from entrypoint.commands import REGISTRY
from entrypoint.commands.words import recipe_words
from entrypoint.errors import BadInput
from entrypoint.recipe.settings import Settings
from tests.conftest import ROOT, clean_env, run_cli

INVENTORY = f"INVENTORY={ROOT / 'examples' / 'inventories' / '1x4090-driver535.json'}"


def refused(*argv: str) -> str:
    """The one problem found in a command line's first word."""
    with pytest.raises(BadInput) as caught:
        cli.choose(cli.build(REGISTRY), list(argv), {})
    (problem,) = caught.value.problems
    return problem.render()


def chosen(*argv: str) -> tuple[str, list[str]]:
    """The command a command line runs, and the words its parser reads."""
    picked = cli.choose(cli.build(REGISTRY), list(argv), {})
    return picked.command.module.NAME, picked.words


def test_a_mistyped_command_gets_a_did_you_mean():
    # "'trian': is not a KEY=VALUE word" sent a user to the recipe syntax
    assert refused("trian", "recipe=smoke").endswith("fix: did you mean train?")
    assert "did you mean validate?" in refused("valdate", "recipe=smoke")
    assert "the commands: train, rollout, plan, validate" in refused("frobnicate")
    assert "write train recipe=smoke" in refused("smoke")  # a recipe where the command goes


def test_words_that_name_no_command_go_to_train_as_typed():
    # the image's ENTRYPOINT is `python -m entrypoint`: `docker compose run train recipe=X` passes bare words
    assert chosen("recipe=smoke", "MAX_STEPS=2") == ("train", ["recipe=smoke", "MAX_STEPS=2"])
    assert chosen("--num_generations", "8") == ("train", ["--num_generations", "8"])
    assert chosen() == ("train", [])
    assert chosen("validate", "smoke") == ("validate", ["smoke"])


def test_a_bare_recipe_name_after_a_command_is_the_recipe():
    assert recipe_words(["smoke"], {}) == ["recipe=smoke"]
    assert recipe_words(["smoke-gpu", "MAX_STEPS=2"], {}) == ["recipe=smoke-gpu", "MAX_STEPS=2"]
    assert recipe_words(["recipe=smoke", "smoke"], {}) == ["recipe=smoke", "smoke"]
    assert recipe_words(["smoke"], {"RECIPE": "smoke-gpu"}) == ["smoke"]  # a recipe is named already
    with pytest.raises(BadInput) as caught:
        recipe_words(["smok"], {})
    assert "did you mean recipe=smoke?" in caught.value.problems[0].render()


def test_every_registered_command_has_a_parser_and_a_main():
    parsers = cli.build(REGISTRY)
    names = [module.NAME for module in REGISTRY]
    assert len(set(names)) == len(names) and list(parsers.commands) == names
    for module in REGISTRY:
        assert parsers.commands[module.NAME].parser.prog == f"python -m entrypoint {module.NAME}"
        assert callable(module.main) and module.main.__doc__, module.NAME
    assert {
        "train",
        "rollout",
        "plan",
        "validate",
        "doctor",
        "prepare-model",
        "keys",
        "import",
        "evaluate",
    } <= set(names)


@pytest.mark.cli
def test_help_lists_every_registered_command():
    out = run_cli("--help", env=clean_env(), timeout=60).stdout
    names = [module.NAME for module in REGISTRY]
    assert "{" + ",".join(names) + "}" in out  # the usage line, in the registry's order
    for name in names:  # the table of cli.py's docstring: one line per command
        assert any(line.startswith(f"    {name} ") for line in out.splitlines()), name


@pytest.mark.cli
def test_an_unknown_first_word_is_refused_naming_the_commands():
    proc = run_cli("frobnicate", "recipe=smoke", env=clean_env(), timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    names = ", ".join(module.NAME for module in REGISTRY)
    assert f"error: command line 'frobnicate': is not a command\n  fix: the commands: {names};" in proc.stderr


@pytest.mark.cli
def test_a_command_that_takes_no_words_refuses_them_as_argparse_does():
    proc = run_cli("doctor", "extra", env=clean_env(), timeout=60)
    assert (
        proc.returncode == 2 and "python -m entrypoint: error: unrecognized arguments: extra" in proc.stderr
    )
    proc = run_cli("import", "a.sh", "b.sh", env=clean_env(), timeout=60)
    assert proc.returncode == 2 and "python -m entrypoint: error: unrecognized arguments: b.sh" in proc.stderr


def test_an_ms_swift_flag_reaches_the_recipe_parser_beside_its_value(capsys):
    # before the recipe, so a positional would have taken the 8 and left the flag alone
    assert cli.main(["validate", "--num_generations", "8", "recipe=smoke"]) == 2
    err = capsys.readouterr().err
    assert "error: command line '--num_generations': arguments are KEY=VALUE words, not --flags" in err
    assert "fix: write NUM_GENERATIONS=8" in err


def test_a_secret_on_the_command_line_is_printed_by_no_line_that_names_it(capsys, monkeypatch):
    """A refusal's fix spelled the secret back (`write HUB_TOKEN=...`); what a command prints passes
    redact.Scrubbing, and a short value is replaced where its key is named."""
    monkeypatch.setenv("MY_SERVICE_API_KEY", "envSECRETvalue")
    assert (
        cli.main(
            [
                "validate",
                "--hub_token",
                "cliSECRETvalue",
                "--swanlab_token=ab",
                "recipe=smoke",
                "LEARNING_RATE=envSECRETvalue",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "cliSECRETvalue" not in err and "envSECRETvalue" not in err and "=ab" not in err, err
    assert "fix: write HUB_TOKEN=<redacted>" in err and "'--swanlab_token=<redacted>'" in err
    assert "LEARNING_RATE (command line): '<redacted>' is not a number" in err


@pytest.mark.cli
def test_plan_json_stands_anywhere_among_the_words(tmp_path):
    proc = run_cli(
        "plan", "recipe=smoke", INVENTORY, "--json", f"OUTPUT_DIR={tmp_path}", env=clean_env(), timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recipe"] == "smoke"


@pytest.mark.cli
def test_validate_with_a_bare_recipe_name_validates_it():
    proc = run_cli("validate", "smoke", env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "recipe smoke: valid" in proc.stdout


@pytest.mark.cli
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
transformers_logging.get_logger("transformers.tokenization").warning_once(\
"You are using the default legacy behaviour")
ds.error("an error still shows")
"""


@pytest.mark.torch  # its child imports transformers
@pytest.mark.cli
def test_prepare_model_and_evaluate_keep_library_notices_off_the_console():
    """The tokenizer's "legacy" paragraph, DeepSpeed's accelerator lines (twice) and a tqdm bar on
    `prepare-model` and `evaluate`, which the train console already keeps in the log."""
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
    loud = subprocess.run(
        [sys.executable, "-c", QUIET_PROBE],
        cwd=ROOT,
        env={**env, "CONSOLE": "all"},
        capture_output=True,
        text=True,
    )
    assert "legacy" in loud.stderr and "Setting accelerator" in loud.stdout and "GGUF" in loud.stderr


@pytest.mark.cli
def test_the_quiet_settings_come_before_any_library_is_imported():
    """tqdm reads TQDM_DISABLE when it is imported, and importing the commands imports it: set after that,
    the settings leave the bar of prepare-model's GGUF conversion on the console."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    fake_prepare = (
        "import sys\n"
        "from entrypoint import cli\n"
        "from entrypoint.world import models\n"
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


@pytest.mark.cli
def test_help_is_a_command_too():
    """`help` is --help and `help COMMAND` is `COMMAND --help`; a word that names no command is refused as
    the first word would be."""
    assert "usage: python -m entrypoint" in run_cli("help", env=clean_env(), timeout=60).stdout
    assert (
        "usage: python -m entrypoint evaluate"
        in run_cli("help", "evaluate", env=clean_env(), timeout=60).stdout
    )
    mistyped = run_cli("help", "trian", env=clean_env(), timeout=60)
    assert mistyped.returncode == 2 and "fix: did you mean train?" in mistyped.stderr


@pytest.mark.cli
def test_train_with_an_inventory_of_gpus_this_machine_lacks_is_refused_and_plan_is_not(tmp_path):
    """Following the GPU refusal's fix (INVENTORY=...) must not make `train` start ms-swift here, to download
    the model and die without a GPU. INVENTORY describes a machine for plan/validate; train on a
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


@pytest.mark.cli
def test_a_reader_that_stops_early_gets_no_traceback():
    """`keys | head -1`: the reader is gone while keys still writes (here from the start: its pipe's read end
    is closed before it runs); the command ends as a closed pipe ends a shell command (128 + SIGPIPE), with
    nothing on stderr."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "entrypoint", "keys"],
            cwd=ROOT,
            env=clean_env(),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert proc.returncode == 141 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.cli
def test_an_interpreter_without_the_locked_stack_gets_the_command_to_use_not_a_traceback():
    """A new user copied `python -m entrypoint plan ...` and got a traceback (Python 3.11: a dataclass
    default; a bare 3.10: no python-dotenv). Without site-packages (-S) this interpreter lacks the stack."""
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "entrypoint", "keys"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "lacks the locked stack" in proc.stderr and ".venv/bin/python -m entrypoint" in proc.stderr


@pytest.mark.cli
def test_recipes_lists_every_shipped_recipe_with_what_it_is_for():
    """A new user asked which recipes there are: no command listed them."""
    from entrypoint.recipe import load as recipe_mod

    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", "recipes"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = dict(
        line.split(None, 1) for line in proc.stdout.splitlines()[: len(recipe_mod.available_recipes())]
    )
    assert sorted(lines) == recipe_mod.available_recipes() and "defaults" not in lines
    assert lines["countdown-14b-1x4090"].startswith("Qwen3-14B GRPO with QLoRA")
    assert lines["arithmetic-gpu"] == "does GRPO through vLLM make the model better at a task?"
