"""The hook pins hold on every Python the code runs on: the lent GPU machines run 3.12 builds of the lock, and
a drift check that hashed ast.dump's text there called every hook drifted (entrypoint/child/drift.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from entrypoint.child import hooks
from tests.conftest import ROOT

# The installed stack's sources, read as text by the other interpreter (it imports nothing from them).
SOURCES = sysconfig.get_paths()["purelib"]
DIGESTS = """
import json, sys
from pathlib import Path
from entrypoint.child import drift
from entrypoint.child.hooks import ALL
print(json.dumps({f"{h.name} {t.module}:{t.qualname}": drift.digest(t.module, t.qualname, Path(sys.argv[1]))
                  for h in ALL for t in h.targets}))
"""


def _interpreter(version: str) -> str | None:
    """A working python`version`: on the PATH or under pyenv's root, as the Makefile looks for 3.10 (a pyenv
    shim of a version not selected is not one)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = [shutil.which(f"python{version}"), *sorted(root.glob(f"versions/{version}*/bin/python{version}"))]
    for path in filter(None, found):
        if subprocess.run([path, "-c", "pass"], capture_output=True, timeout=30).returncode == 0:
            return str(path)
    return None


@pytest.mark.cli
@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
def test_the_pins_match_the_same_sources_under_another_python(version):
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"no python{version} here")
    proc = subprocess.run(
        [python, "-c", DIGESTS, SOURCES], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    pinned = {f"{h.name} {t.module}:{t.qualname}": t.sha256 for h in hooks.ALL for t in h.targets}
    assert found == pinned
