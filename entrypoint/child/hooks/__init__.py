"""The hooks the entrypoint installs in its children, one module each, declared here in install order.

Each hook patches upstream code (vLLM 0.8.5.post1, ms-swift 3.6.4, torch 2.6.0) once the child imports it,
driven by one GRPO_RIG_* variable the plan sets (`plan` shows them; entrypoint/plan/build.py decides where).
Each declares what it patches (`targets`, with a hash of the upstream source it was written against:
entrypoint/child/drift.py, tests/child/test_hooks.py), why, what it saves and where that was measured,
and when it can be deleted. DISABLE_HOOKS=<name>,... (a recipe key) leaves hooks out of every child.

A hook that cannot install (a target missing, an exception) says so once per process on stderr
(runtime.NOTICE) and the run goes on without it; the console shows that line once per hook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import Protocol


@dataclasses.dataclass(frozen=True)
class Target:
    """An upstream definition a hook patches or relies on: `module` (dotted), `qualname` ("Class.method", a
    function, a class) and `sha256`, the first 16 hex digits of sha256(ast.dump(its node)) in the version
    the hook was written against (drift.digest)."""

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


# The modules import Hook and Target from this package; they are imported once both exist.
from entrypoint.child.hooks import (  # noqa: E402
    adapter_sync,
    emulate_vram,
    events,
    graphs_up_to_max_seqs,
    inspect_here,
    keep_pools,
    lean,
    liger_eager,
    offload_before_wake,
    reward_check,
    scheduler_steps,
    sync_probe,
    top_k_first,
)

# Install order: hooks on the same module run in this order once it is imported. adapter_sync replaces the
# weight sync before sync_probe and events wrap whichever sync is in place. lean and sync_probe come
# before events' phase timers, so that "trainer ready" includes lean's one collection and the probe's
# seconds are not counted as the sync's.
ALL: tuple[Hook, ...] = (
    emulate_vram.HOOK,
    keep_pools.HOOK,
    graphs_up_to_max_seqs.HOOK,
    inspect_here.HOOK,
    top_k_first.HOOK,
    scheduler_steps.HOOK,
    adapter_sync.HOOK,
    offload_before_wake.HOOK,
    lean.HOOK,
    sync_probe.HOOK,
    reward_check.HOOK,
    liger_eager.HOOK,
    events.HOOK,
)
NAMES: tuple[str, ...] = tuple(h.name for h in ALL)
BY_NAME: dict[str, Hook] = {h.name: h for h in ALL}
BY_VARIABLE: dict[str, Hook] = {h.variable: h for h in ALL}
