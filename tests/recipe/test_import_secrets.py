"""`import` never writes a secret into the recipe: a flag the redaction registry calls secret
(redact.is_secret_flag: --hub_token, --swanlab_token, --api_key ...) is left out with a note naming the
environment variable to set (recipe/importer._secret_flag). Case re-run: `import -o mine.env -- swift rlhf ...
--hub_token XYZ` wrote HUB_TOKEN=XYZ into mine.env."""

from __future__ import annotations

import shlex

import pytest

from entrypoint import cli, redact
from entrypoint.recipe import swift_schema
from tests.conftest import INVENTORIES

INVENTORY = f"INVENTORY={INVENTORIES / '1x4090-driver535.json'}"
RLHF = shlex.split(
    "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B-Instruct --dataset AI-MO/NuminaMath-TIR "
    "--use_vllm true --reward_funcs accuracy"
)
SECRET = "XYZ"  # short: the console's scrubbing (redact.MIN_SCRUBBED) would not catch it in free text


def secret_flags(kind: str) -> list[str]:
    """The flags of ms-swift's schema whose values the registry hides (redact.argv's SECRET_FLAG_RE)."""
    return sorted(name for name in swift_schema.load(kind) if redact.SECRET_FLAG_RE.match(f"--{name}"))


def imported(capsys, tmp_path, *command: str) -> tuple[int, str, str]:
    """`import -o FILE INVENTORY=... -- COMMAND`: its exit status, the file written and what it printed."""
    out = tmp_path / "mine.env"
    status = cli.main(["import", "-o", str(out), INVENTORY, "--", *command])
    printed = capsys.readouterr()
    return status, out.read_text(), printed.out + printed.err


@pytest.mark.parametrize("flag", secret_flags("rlhf"))
def test_a_secret_flag_of_swift_rlhf_is_never_written_and_the_note_says_where_it_goes(capsys, tmp_path, flag):
    status, recipe, printed = imported(capsys, tmp_path, *RLHF, f"--{flag}", SECRET)
    assert status == 0, printed
    assert SECRET not in recipe and f"{flag.upper()}=" not in recipe, recipe
    note = f"# --{flag}: a secret, left out of this file (never written to a recipe); set "
    assert any(
        line.startswith(note) and line.endswith(" in the environment instead") for line in recipe.splitlines()
    )


def test_the_hub_token_note_names_hf_token(capsys, tmp_path):
    status, recipe, _ = imported(capsys, tmp_path, *RLHF, f"--hub_token={SECRET}")
    assert status == 0 and SECRET not in recipe
    assert "set HF_TOKEN (the Hugging Face hub, USE_HF=true) or MODELSCOPE_API_TOKEN" in recipe


@pytest.mark.parametrize("flag", secret_flags("rollout"))
def test_a_secret_flag_of_the_rollout_line_is_never_written(capsys, tmp_path, flag):
    script = tmp_path / "script.sh"
    script.write_text(
        f"CUDA_VISIBLE_DEVICES=1 swift rollout --model Qwen/Qwen2.5-0.5B-Instruct --{flag} {SECRET}\n"
        f"CUDA_VISIBLE_DEVICES=0 {' '.join(RLHF)} --vllm_mode server\n"
    )
    out = tmp_path / "mine.env"
    status = cli.main(["import", "-o", str(out), str(script), INVENTORY.replace("1x4090", "2x4090")])
    printed = capsys.readouterr()
    assert status == 0, printed.out + printed.err
    assert SECRET not in out.read_text(), out.read_text()
    assert f"# swift rollout --{flag}: a secret, left out of this file" in out.read_text()


def test_the_printed_recipe_holds_no_secret_either(capsys):
    assert cli.main(["import", INVENTORY, "--", *RLHF, "--hub_token", SECRET]) == 0
    printed = capsys.readouterr()
    assert SECRET not in printed.out and "HUB_TOKEN" not in printed.out, printed.out
