"""The Dockerfile's early model step copies a few entrypoint files on their own (so that an edit
elsewhere under entrypoint/ does not redo the minute-long conversion). That step fails at build time,
in the container test only, when models.py gains an import of a file the COPY line does not list: CI
run of 2026-12-02 failed that way after the catalog moved out of models.py. Here the same files are
copied alone and imported in seconds."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from tests.conftest import ROOT


def model_step_files() -> list[str]:
    """The sources the Dockerfile copies to /tmp/prepare-model (paths relative to the repository)."""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        match = re.match(r"COPY (.+) /tmp/prepare-model/entrypoint/\s*$", line)
        if match:
            return match.group(1).split()
    raise AssertionError("the Dockerfile has no COPY … /tmp/prepare-model/entrypoint/ line")


def test_the_model_step_files_import_alone_with_the_standard_library(tmp_path):
    package = tmp_path / "entrypoint"
    package.mkdir()
    for name in model_step_files():
        shutil.copy(ROOT / name, package)
    # -S -I: no site-packages and no PYTHONPATH, as in the step (it runs before the project is copied
    # and must not need a third-party import that happens to be installed here).
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); from entrypoint import models; "
            "print(models.DEFAULT_MODEL, callable(models.prepare))",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["HuggingFaceTB/SmolLM2-135M-Instruct", "True"]
