"""A run directory whose path cannot exist (a name over NAME_MAX bytes, the whole over PATH_MAX) is refused
in one line naming the value and the limit, before anything is made (recipe/settings.too_long). Case re-run:
OUTPUT_DIR with a 300-byte name got "manifest.json exists but cannot be read ([Errno 36] File name too long)"
and "is not writable by this process ... the directory belongs to ", the fix a chown."""

from __future__ import annotations

import pytest

from entrypoint import cli
from tests.conftest import ROOT

LONG = "a" * 300
NAME_MAX = 255  # bytes in one name (Linux)


def validate(capsys, *pairs: str) -> tuple[int, str]:
    """`validate recipe=smoke` in process: its exit status and what it printed."""
    status = cli.main(["validate", "recipe=smoke", *pairs])
    out = capsys.readouterr()
    return status, out.out + out.err


@pytest.mark.parametrize(
    "output_dir, says",
    [
        (f"{{tmp}}/{LONG}", "its name 'aaaaaaaaaaaaaaaaaaaaaaaa...aaaaaaaaaaaa' is 300 bytes"),
        (f"{{tmp}}/{LONG}/runs", "its name 'aaaaaaaaaaaaaaaaaaaaaaaa...aaaaaaaaaaaa' is 300 bytes"),
        ("{tmp}/" + "é" * 128, "is 256 bytes"),  # 128 characters, two bytes each
        ("{tmp}/" + "/".join(["b" * 200] * 21), "bytes; a path takes at most 4095 bytes (PATH_MAX)"),
    ],
)
def test_an_output_dir_that_cannot_be_a_path_is_refused_in_one_line(capsys, tmp_path, output_dir, says):
    value = output_dir.format(tmp=tmp_path)
    status, text = validate(capsys, f"OUTPUT_DIR={value}")
    assert status == 2, text
    assert list(tmp_path.iterdir()) == [], "refused, yet something was made"
    (error,) = [line for line in text.splitlines() if line.startswith("error:")]
    assert error.startswith("error: OUTPUT_DIR (command line): '"), error
    assert says in error and ("NAME_MAX" in error or "PATH_MAX" in error), error
    assert f"  fix: choose a shorter OUTPUT_DIR: names of at most {NAME_MAX} bytes, 4095 bytes in all" in text


def test_a_name_of_255_bytes_is_still_a_name(capsys, tmp_path):
    status, text = validate(capsys, f"OUTPUT_DIR={tmp_path / ('c' * NAME_MAX)}")
    assert status == 0 and "error:" not in text, text


def test_the_default_run_name_made_from_a_long_recipe_file_name_is_refused_with_a_name_that_fits(
    capsys, tmp_path
):
    """RUN_NAME unset: the run is <recipe file>-<UTC timestamp>, 16 bytes more than the file's stem."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    recipe = recipes / ("r" * 245 + ".env")
    recipe.write_text((ROOT / "recipes" / "smoke.env").read_text())
    status = cli.main(["validate", f"recipe={recipe}", f"OUTPUT_DIR={tmp_path / 'out'}"])
    text = capsys.readouterr().err
    assert status == 2, text
    assert (
        "error: RUN_NAME (default): unset, so the run is named after the recipe file, "
        "'rrrrrrrrrrrrrrrrrrrrrrrr...rrrrrrrrrrrr' and a timestamp: 261 bytes; a file system takes names of "
        f"at most {NAME_MAX} bytes (NAME_MAX)"
    ) in text
    fix = next(line for line in text.splitlines() if line.startswith("  fix: set RUN_NAME="))
    capsys.readouterr()
    status = cli.main(["validate", f"recipe={recipe}", f"OUTPUT_DIR={tmp_path / 'out'}", fix.split()[-1]])
    assert status == 0, capsys.readouterr().err
