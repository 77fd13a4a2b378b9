"""What a hook is: the types every hook module builds its HOOK from, apart from the registry.

`Hook` (one hook's declaration and install), `Target` (an upstream definition it patches, with the hash of the
source it was written against: entrypoint/child/drift.py) and `After` (what install is given to patch with).
The hook modules import these from here; the package's __init__ imports the hook modules and keeps the
registry (ALL, in install order), so no hook module imports the package it belongs to (pyproject.toml's
import contract).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import Protocol


@dataclasses.dataclass(frozen=True)
class Target:
    """An upstream definition a hook patches or relies on: `module` (dotted), `qualname` ("Class.method", a
    function, a class) and `sha256`, the first 16 hex digits of sha256(drift.canonical(its node)) in the
    version the hook was written against (drift.digest)."""

    module: str
    qualname: str
    sha256: str


class After(Protocol):
    """What a hook's install is given (loader.AfterImport): patches to run once a module is imported."""

    def patch(self, module: str, apply: Callable[[ModuleType], None]) -> None:
        """Run apply(module) right after the child imports `module` (a dotted name), once."""

    def time(self, module: str, write: Callable[[dict], None]) -> None:
        """write({"phase": "import", "module": ..., "seconds": ...}) once the child has imported `module`."""


@dataclasses.dataclass(frozen=True)
class Hook:
    """One hook: `install(value, after)` registers its patches when `value` (the text of `variable` in the
    child's environment, "" when unset) turns it on, and nothing otherwise."""

    name: str  # what DISABLE_HOOKS names
    variable: str  # the GRPO_RIG_* variable that turns it on (the plan sets it)
    targets: tuple[Target, ...]
    upstream: tuple[str, ...]  # the pins the targets were read in: "vllm==0.8.5.post1", ...
    why: str
    saves: str  # measured, with where the evidence is
    delete_when: str  # the upstream change that makes it unnecessary
    install: Callable[[str, After], None]
    recipe_key: str = ""  # the recipe key the plan derives `variable` from, if any

    @property
    def gist(self) -> str:
        """`why` up to its first clause's end ('; ', ': ', '. ' outside brackets): what the hook is about,
        for a one-line listing (`plan`'s hooks turned off)."""
        depth = 0
        for i, ch in enumerate(self.why):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0 and ch in ";:." and self.why[i + 1 : i + 2] in (" ", ""):
                return self.why[:i]
        return self.why
