"""The hooks the entrypoint installs in its children, one module each, declared here in install order.

Each hook patches upstream code (vLLM 0.8.5.post1, ms-swift 3.6.4, torch 2.6.0) once the child imports it,
driven by one GRPO_RIG_* variable the plan sets (`plan` shows them; entrypoint/plan/build.py decides where).
Each declares what it patches (`targets`, with a hash of the upstream source it was written against:
entrypoint/child/drift.py, tests/child/test_hooks.py), why, what it saves and where that was measured,
and when it can be deleted. DISABLE_HOOKS=<name>,... (a recipe key) leaves hooks out of every child.

A hook that cannot install (a target missing, an exception) says so once per process on stderr
(wire.NOTICE) and the run goes on without it; the console shows that line once per hook.
"""

from __future__ import annotations

from entrypoint.child.hooks import (
    adapter_sync,
    emulate_vram,
    events,
    graphs_up_to_max_seqs,
    inputs_check,
    inspect_here,
    keep_pools,
    lean,
    liger_eager,
    offload_before_wake,
    offload_quant_states,
    reward_check,
    scheduler_steps,
    sync_probe,
    top_k_first,
)
from entrypoint.child.hooks.base import After, Hook, Target

__all__ = ["ALL", "BY_NAME", "BY_VARIABLE", "NAMES", "After", "Hook", "Target"]

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
    offload_quant_states.HOOK,
    lean.HOOK,
    sync_probe.HOOK,
    reward_check.HOOK,
    inputs_check.HOOK,
    liger_eager.HOOK,
    events.HOOK,
)
NAMES: tuple[str, ...] = tuple(h.name for h in ALL)
BY_NAME: dict[str, Hook] = {h.name: h for h in ALL}
BY_VARIABLE: dict[str, Hook] = {h.variable: h for h in ALL}
