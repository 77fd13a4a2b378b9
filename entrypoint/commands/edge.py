"""The edge of the commands that plan: read the world once (the GPUs through NVML or the INVENTORY file,
the host through host.gather), then decide (plan.build) and check (preflight). train, rollout, plan,
validate and import's validation all start here (make_plan), so each sees the machine the same way.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from entrypoint import preflight
from entrypoint.errors import BadInput, Problem, raise_if_fatal
from entrypoint.facts.facts import run_dir_of
from entrypoint.facts.inventory import Inventory
from entrypoint.plan import build as plan_mod
from entrypoint.plan.build import Plan
from entrypoint.recipe import load as recipe_mod
from entrypoint.record import runlock
from entrypoint.world import hardware, host


def inventory_for(r: recipe_mod.Recipe) -> Inventory:
    """The INVENTORY file when the recipe names one, else NVML."""
    path = r.settings.INVENTORY
    if not path:
        return hardware.probe()
    _, why = recipe_mod.read_user_file(Path(path))
    try:
        if why:
            raise ValueError(f"{path} {why}")
        return hardware.load(path)
    except ValidationError as exc:  # pydantic's own text is a screen with a link: the fields, one line
        fields = "; ".join(_field_error(e) for e in exc.errors()[:3])
        more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
        why = f"{path} is not an inventory: {fields}{more}"
    except (OSError, ValueError) as exc:
        why = str(exc) if why else f"cannot read {path}: {exc}"
    raise BadInput(
        [
            Problem(
                f"INVENTORY ({r.source('INVENTORY')})",
                why,
                "pass a file written by `doctor --save-inventory` on the machine it describes, or one of "
                "examples/inventories/*.json",
            )
        ]
    )


def _field_error(e: dict) -> str:
    """One of pydantic's errors as `field: value (expected form)`; a validator's own sentence names both."""
    where = ".".join(map(str, e["loc"])) or "the file"
    if e["type"] == "value_error":  # without pydantic's "Value error, " prefix; a check of the whole file
        return f"{where}: {e['ctx']['error']}" if e["loc"] else str(e["ctx"]["error"])  # names its fields
    value = e.get("input")
    if e["msg"].startswith("Input should be ") and isinstance(value, str | int | float | bool):
        return f"{where}: {value!r} (expected {e['msg'].removeprefix('Input should be ')})"
    return f"{where}: {e['msg']}"


def make_plan(
    cli_pairs: list[str],
    environ: Mapping[str, str],
    for_train: bool,
    rollout_only: bool = False,
    lock: runlock.RunLock | None = None,
    launches: bool = False,
    base: Mapping[str, recipe_mod.Value] | None = None,
    probe_plugins: bool = True,
) -> Plan:
    """Resolve the recipe and the inventory, read the host once, build and check the plan. Raises
    BadInput with every fatal problem found. With `lock`, the directory this node writes is locked as soon
    as the recipe names it, before the slow checks: a second start of a running run is refused at once,
    naming the holder (runlock.py). `launches`: the plan is about to start processes here (train, rollout),
    so an INVENTORY file must describe GPUs this machine has (described_elsewhere). `base`: an earlier run's
    values in place of the recipe files (recipe.load; `rerun`). `probe_plugins`: import the reward plugins in
    a throwaway process to check them (world/plugin_probe.py); False where the command must start nothing."""
    now = dt.datetime.now(dt.timezone.utc)
    r = recipe_mod.load(cli_pairs, environ, recipe_mod.recipes_dir(environ), strict=False, base=base)
    if lock is not None and not any(p.fatal for p in r.problems):  # a refused RUN_NAME names no directory
        lock.take(here_of(run_dir_of(r, now), r.settings.NODE_RANK, rollout_only), required=False)
    inventory = inventory_for(r)
    facts = host.gather(
        r, environ, now=now, fetch_config=True, probe_plugins=probe_plugins
    )  # a hub model's config.json, if online
    built = plan_mod.build(r, inventory, facts, rollout_only=rollout_only)
    uses_gpus = built.placed and bool(built.layout.used_gpus)
    if launches and uses_gpus and r.settings.INVENTORY and not environ.get("GRPO_RIG_SWIFT"):
        built.problems.extend(described_elsewhere(r, inventory, hardware.probe()))
    # without a layout (no GPU) the checks that need none still run: every problem at once
    built.problems.extend(preflight.check(built, facts, for_train=for_train))
    raise_if_fatal(built.problems)
    return built


def described_elsewhere(r: recipe_mod.Recipe, described: Inventory, here: Inventory) -> list[Problem]:
    """INVENTORY describes a machine for `plan` and `validate`; `train` and `rollout` start processes on this
    one. A file listing more GPUs than NVML sees here would launch ms-swift (model download, vLLM) toward
    GPUs that are not there, to fail after minutes: refused. A simulated trainer (GRPO_RIG_SWIFT, the
    tests' fake ms-swift) may run against a described machine, so make_plan does not ask then."""
    if len(here.gpus) >= len(described.gpus):
        return []
    seen = f"NVML sees {len(here.gpus)} GPU(s) here" + (f" ({here.nvml_error})" if here.nvml_error else "")
    return [
        Problem(
            f"INVENTORY ({r.source('INVENTORY')})",
            f"describes {len(described.gpus)} GPU(s) for planning, but this command starts the run on this "
            f"machine and {seen}",
            "leave INVENTORY out where you train (the run reads the GPUs through NVML); use it with `plan` "
            "or `validate` to check a recipe for another machine",
        )
    ]


def here_of(run_dir: Path, rank: int, rollout_only: bool = False) -> Path:
    """Where one node's command keeps its manifest, logs and lock: the run directory on node 0,
    nodes/node<N>/ on the others, nodes/rollout/ for `rollout` (so nodes sharing an output volume never
    write the same file, nor wait on each other's lock)."""
    if rollout_only:
        return run_dir / "nodes" / "rollout"
    return run_dir if rank == 0 else run_dir / "nodes" / f"node{rank}"
