"""Every file the entrypoint reads, when it is binary, a directory or missing: refused with exit 2, what is
wrong and why, and no traceback (before, `import` of such files died in cli.py with UnicodeDecodeError,
IsADirectoryError or FileNotFoundError; a binary SYSTEM prompt with UnicodeDecodeError)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from entrypoint.recipe import load as recipe
from tests.conftest import FAKES, refused, run_cli

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree

BINARY = bytes(range(256)) * 4  # NUL bytes and bytes that are not UTF-8

KINDS = {
    "binary": ("is a binary file, not text", lambda p: p.write_bytes(BINARY)),
    "directory": ("is a directory, not a file", lambda p: p.mkdir()),
    "missing": ("does not exist", lambda p: None),
    # cases re-run: opening a FIFO blocks until a writer comes; import, recipe= and INVENTORY= hung
    "fifo": ("is not a regular file", os.mkfifo),
}


def made(tmp_path: Path, kind: str, suffix: str) -> tuple[Path, str]:
    """A path of `kind` ending in `suffix`, and the phrase the refusal must hold."""
    path = tmp_path / f"input-{kind}{suffix}"
    said, make = KINDS[kind]
    make(path)
    return path, said


def assert_refused_cleanly(stderr: str, path: Path, said: str) -> None:
    assert f"{path} {said}" in stderr, stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("kind", KINDS)
def test_import_of_a_binary_directory_or_missing_file(tmp_path, kind):
    path, said = made(tmp_path, kind, ".sh")
    proc = run_cli("import", str(path), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert_refused_cleanly(proc.stderr, path, said)
    assert "`-- swift rlhf ...`" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("kind", KINDS)
def test_recipe_file(tmp_path, kind):
    path, said = made(tmp_path, kind, ".env")
    err = refused(tmp_path, f"recipe={path}")
    if kind == "missing":  # the long-standing wording, with the shipped recipes to choose from
        assert f"no recipe file {path}" in err and "smoke" in err
    else:
        assert_refused_cleanly(err, path, said)


@pytest.mark.parametrize(
    ("key", "suffix", "where"),
    [
        ("DATASET", ".jsonl", "DATASET"),
        ("EXTERNAL_PLUGINS", ".py", "EXTERNAL_PLUGINS"),
        ("SYSTEM", ".txt", "SYSTEM"),
        ("INVENTORY", ".json", "INVENTORY"),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_files_a_recipe_names(tmp_path, key, suffix, where, kind):
    path, said = made(tmp_path, kind, suffix)
    err = refused(tmp_path, f"recipe={FAKES / 'colocate.env'}", f"{key}={path}")
    assert f"error: {where}" in err
    if key == "EXTERNAL_PLUGINS" and kind == "binary":  # imported by the probe: Python's own words
        assert f"EXTERNAL_PLUGINS {path}" in err and "null bytes" in err and "Traceback" not in err
    elif key == "DATASET" and kind == "binary":
        assert f"DATASET {path}: is not UTF-8 text" in err and "Traceback" not in err
    elif key == "DATASET" and kind == "missing":  # with where to put it (container or host)
        assert f"DATASET {path}: file not found on this machine" in err and "Traceback" not in err
    elif key in ("DATASET", "EXTERNAL_PLUGINS"):
        assert f"{where} {path}: {said}" in err and "Traceback" not in err
    else:
        assert_refused_cleanly(err, path, said)


def test_reading_a_file_this_process_may_not_read(tmp_path, monkeypatch):
    """Root reads everything, so the permission case is played by the file system call itself."""
    path = tmp_path / "prompt.txt"
    path.write_text("be brief")

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", denied)
    text, why = recipe.read_user_file(path)
    assert text is None and why == f"cannot be read by this process (uid {os.getuid()}: permission denied)"


def test_text_files_are_read_whole_with_a_byte_order_mark_dropped(tmp_path):
    path = tmp_path / "r.env"
    path.write_bytes("\ufeffMODEL=m\n# é\n".encode())
    assert recipe.read_user_file(path) == ("MODEL=m\n# é\n", "")
    assert recipe.read_user_file(Path("/dev/null"))[1].startswith("is not a regular file")


def test_a_missing_inventory_names_the_shipped_examples(tmp_path):
    """New-user trial: the fix named only `doctor --save-inventory`, run on a machine one does not have
    here."""
    err = refused(tmp_path, "recipe=smoke", f"INVENTORY={tmp_path / 'nope.json'}")
    assert "does not exist" in err and "examples/inventories/*.json" in err
