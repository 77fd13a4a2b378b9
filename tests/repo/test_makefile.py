"""The Makefile, the command surface a new user starts from: `make help` reads well in a pipe
and in a terminal, every command the README sends a user to has a target, and Python 3.10 is found where
pyenv keeps it."""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


# What an outer make (`make -C DIR test-fast`) passes down: with them the make under test prints "Entering
# directory" lines a user's own `make help` never shows.
OUTER_MAKE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


def fresh(env: dict[str, str]) -> dict[str, str]:
    """`env` as a user's shell has it: without what an outer make would hand down."""
    return {k: v for k, v in env.items() if k not in OUTER_MAKE}


def make(*args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["make", "-s", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=fresh({**os.environ, **(env or {})}),
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def make_on_a_terminal(*args: str, env: dict[str, str]) -> str:
    """`make ARGS` with its output on a pseudo-terminal, as a person runs it."""
    main, child = pty.openpty()
    proc = subprocess.Popen(["make", "-s", *args], cwd=ROOT, stdout=child, stderr=child, env=fresh(env))
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(main)
    return out.decode()


def test_help_has_no_colour_codes_in_a_pipe_and_every_name_stands_apart():
    text = make("help")
    assert "\033" not in text
    names = [line.split()[0] for line in text.splitlines()]
    assert "container-plan" in names and "validate" in names  # "container-plan`plan`": run into its text
    assert all(re.match(r"  [a-z-]+ {2,}\S", line) for line in text.splitlines()), text


def test_help_is_coloured_on_a_terminal_unless_no_color():
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    assert "\033[36m" in make_on_a_terminal("help", env=env)
    assert "\033" not in make_on_a_terminal("help", env={**env, "NO_COLOR": "1"})


def test_every_make_command_in_the_readme_is_a_target():
    targets = set(re.findall(r"^([a-zA-Z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    used = set(re.findall(r"`make ([a-z][\w-]*)", (ROOT / "README.md").read_text()))
    assert used and used <= targets, used - targets
    assert "validate" in targets


def test_python_310_is_found_under_pyenv_root(tmp_path):
    """A pyenv installed elsewhere than ~/.pyenv (PYENV_ROOT) was not looked at."""
    root = tmp_path / "pyenv"
    (root / "versions" / "3.10.99" / "bin").mkdir(parents=True)
    python = root / "versions" / "3.10.99" / "bin" / "python3.10"
    python.symlink_to(sys.executable)  # this interpreter is 3.10: the Makefile checks
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "PYENV_ROOT": str(root)}
    out = make("--eval", "show-python: ; @echo $(PYTHON)", "show-python", env=env)
    assert out.strip() == str(python)


def test_a_failed_build_points_to_the_base_image_mirror_and_the_ca_bundle():
    """A new user's `make build` failed on Docker Hub, then on the TLS proxy, and said nothing of the README's
    BASE_IMAGE= and CA_BUNDLE= (the build itself stands in as `false`; the Docker check is skipped)."""
    proc = subprocess.run(
        ["make", "-s", "build", "COMPOSE=false", "need_docker=@true"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=fresh(dict(os.environ)),
    )
    assert proc.returncode != 0
    assert "BASE_IMAGE=<your mirror of nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04> make build" in proc.stdout
    assert "CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt make build" in proc.stdout
