"""The Dockerfile's early model step copies a few entrypoint files on their own (so that an edit
elsewhere under entrypoint/ does not redo the minute-long conversion). That step fails at build time,
in the container test only, when world/models.py gains an import of a file the COPY line does not list: CI
run of 2026-12-02 failed that way after the catalog moved out of models.py. Here the same files are
copied alone and imported in seconds."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from tests.conftest import ROOT


def model_step_files() -> list[tuple[str, str]]:
    """(source, destination folder under /tmp/prepare-model/) of each file the Dockerfile copies there."""
    copies = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        match = re.match(r"COPY (.+) /tmp/prepare-model/(entrypoint/.*?)/?\s*$", line)
        if match:
            copies += [(name, match.group(2)) for name in match.group(1).split()]
    assert copies, "the Dockerfile has no COPY … /tmp/prepare-model/entrypoint/ line"
    return copies


def test_the_model_step_files_import_alone_with_the_standard_library(tmp_path):
    for name, folder in model_step_files():
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / folder)
    # -S -I: no site-packages and no PYTHONPATH, as in the step (it runs before the project is copied
    # and must not need a third-party import that happens to be installed here).
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); from entrypoint.world import models; "
            "print(models.DEFAULT_MODEL, callable(models.prepare))",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["HuggingFaceTB/SmolLM2-135M-Instruct", "True"]
