"""What `python -m entrypoint` checks before importing its commands (entrypoint/__main__.py NEEDED) is all
that importing them needs: an interpreter with part of the stack (the lent GPU machine's 3.12 kit, a new
user's half-made venv) gets the one-line answer, never a traceback from deep in an import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

# In a fresh interpreter: only the standard library, entrypoint, and the distributions NEEDED names with
# everything they require may be imported; then every command module is imported.
ONLY_NEEDED = r"""
import importlib.metadata as md, re, sys
from entrypoint.__main__ import NEEDED

def requires(dist, seen):
    name = re.sub(r"[-_.]+", "-", dist).lower()
    if name in seen:
        return
    try:
        reqs = md.requires(dist) or []
    except md.PackageNotFoundError:  # a requirement for another platform (colorama on Windows)
        return
    seen.add(name)
    for req in reqs:
        if "extra ==" not in req:
            requires(re.match(r"[A-Za-z0-9_.-]+", req).group(0), seen)

allowed = set()
for dist in NEEDED.values():
    requires(dist, allowed)
# the top-level names each allowed distribution installs (its RECORD: packages_distributions() misses some)
tops = {f.parts[0].split(".")[0] for d in allowed for f in md.files(d) or []
        if not f.parts[0].endswith((".dist-info", ".data")) and f.parts[0] != ".."}

class Block:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in tops or top == "entrypoint" or top.startswith("_"):
            return None
        raise ImportError(f"{top} is not among NEEDED's distributions")

sys.meta_path.insert(0, Block())
import entrypoint.cli, entrypoint.commands
print("imported")
"""


@pytest.mark.cli
def test_importing_every_command_needs_only_what_the_interpreter_check_looks_for():
    proc = subprocess.run(
        [sys.executable, "-c", ONLY_NEEDED], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr[-2000:]
