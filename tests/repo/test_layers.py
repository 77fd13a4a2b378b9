"""The layer contract of entrypoint/ (pyproject.toml [tool.importlinter], drawn in docs/architecture.md):
the tool's check passes on the code as it is, fails when a decision module imports one that reads the
world, a package imports one above it or a child hook imports the hooks package (whose registry imports
it), and no module imports itself back through others."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

LINT = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
    return subprocess.run(
        [str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_layers_hold():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 kept, 0 broken" in proc.stdout


def planted(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess:
    """The check run on a copy of the tree where `module` (a path under entrypoint/) has `line` added."""
    shutil.copytree(
        ROOT / "entrypoint", tmp_path / "entrypoint", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / "entrypoint" / module
    path.write_text(path.read_text() + f"\n{line}  # planted\n")
    return lint(tmp_path)


def test_a_decision_that_reads_the_world_breaks_the_contract(tmp_path):
    """plan/build.py importing host (the module that probes ports, files and hubs) is refused, by name."""
    proc = planted(tmp_path, "plan/build.py", "from entrypoint.world import host")
    assert proc.returncode != 0, proc.stdout
    assert "BROKEN" in proc.stdout and "entrypoint.plan.build -> entrypoint.world.host" in proc.stdout, (
        proc.stdout
    )


def test_a_check_that_starts_a_process_breaks_the_contract(tmp_path):
    """A preflight check importing subprocess itself (not through world/) is refused: below the edge nothing
    starts processes, opens sockets or reads NVML."""
    proc = planted(tmp_path, "preflight/values.py", "import subprocess")
    assert proc.returncode != 0, proc.stdout
    assert "entrypoint.preflight is not allowed to import subprocess" in proc.stdout, proc.stdout


def test_a_lower_package_importing_a_higher_one_breaks_the_layers(tmp_path):
    """recipe/ (the data) importing plan/ (the decisions) breaks the layer order."""
    proc = planted(tmp_path, "recipe/keys.py", "from entrypoint.plan import layout")
    assert proc.returncode != 0, proc.stdout
    assert "entrypoint.recipe.keys -> entrypoint.plan.layout" in proc.stdout, proc.stdout


def test_a_child_hook_importing_the_hooks_package_breaks_the_contract(tmp_path):
    """A hook module takes Hook and Target from hooks/base.py: the package's __init__ imports every hook
    module for its registry, so a hook importing the package would close a cycle."""
    proc = planted(tmp_path, "child/hooks/lean.py", "from entrypoint.child.hooks import Hook")
    assert proc.returncode != 0, proc.stdout
    assert "entrypoint.child.hooks.lean -> entrypoint.child.hooks (l." in proc.stdout, proc.stdout


def test_no_import_cycle():
    import grimp

    graph = grimp.build_graph("entrypoint")  # TYPE_CHECKING imports included
    modules = sorted(graph.modules)
    cycles = [
        (a, b)
        for a in modules
        for b in graph.find_modules_directly_imported_by(a)
        if b != "entrypoint" and b.startswith("entrypoint") and graph.chain_exists(importer=b, imported=a)
    ]
    assert not cycles, cycles
