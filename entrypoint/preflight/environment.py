"""Environment checks: driver, writable output and caches, disk, /dev/shm, ports, proxies."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from entrypoint.errors import LOCAL, Problem
from entrypoint.facts import facts as facts_mod
from entrypoint.facts.facts import CACHE_VARIABLES
from entrypoint.plan import nccl

if TYPE_CHECKING:
    from entrypoint.facts.facts import Facts
    from entrypoint.plan.build import Plan

GIB = 1024**3
MIB = 1024**2
# torch 2.6.0's wheels carry the CUDA 12.4 runtime. CUDA 12 minor-version compatibility runs it on any
# driver >= 525.60.13 (NVIDIA CUDA Compatibility guide, "Minor Version Compatibility"). 550.54.14 is the
# CUDA 12.4 GA driver, also above accelerate's RTX 40 floor (550.40.07): recommended for RTX 40 cards.
MIN_DRIVER = "525.60.13"
RECOMMENDED_DRIVER_RTX40 = "550.54.14"
# NCCL with P2P disabled moves intra-node GPU traffic through /dev/shm; Docker gives 64 MiB by default.
SHM_MIN_MULTI_GPU = 1 * GIB
SHM_MIN_WORKERS = 256 * MIB


def check_driver(plan: Plan) -> list[Problem]:
    inv = plan.inventory
    if not plan.layout.used_gpus or not inv.driver_version:
        return []
    try:
        driver = Version(inv.driver_version)
    except InvalidVersion:
        return []
    rtx40 = any("RTX 40" in g.name for g in inv.gpus)
    if driver < Version(MIN_DRIVER):
        return [
            Problem(
                "NVIDIA driver",
                f"{inv.driver_version} is too old for this image: torch 2.6.0 ships the CUDA 12.4 runtime, "
                f"which needs a driver >= {MIN_DRIVER} (CUDA 12 minor-version compatibility)",
                f"upgrade the host driver to >= {MIN_DRIVER}; for RTX 40 cards >= {RECOMMENDED_DRIVER_RTX40} "
                "is recommended",
            )
        ]
    if rtx40 and driver < Version(RECOMMENDED_DRIVER_RTX40):
        # accelerate's check needs more than one GPU visible, one an RTX 40 (plan/nccl.py): said only where it
        # fires
        check = (
            (
                "; with more than one GPU visible, one of them an RTX 40, it also trips accelerate's RTX 40 "
                "check (handled by NCCL_P2P_DISABLE and NCCL_IB_DISABLE, which `plan` lists under nccl)"
            )
            if nccl.accelerate_rtx40_check_fires(inv)
            else ""
        )
        return [
            Problem(
                "NVIDIA driver",
                f"{inv.driver_version} works, but for RTX 40 cards {RECOMMENDED_DRIVER_RTX40}+ (the CUDA "
                f"12.4 driver) is recommended{check}",
                f"upgrade to >= {RECOMMENDED_DRIVER_RTX40} when you can",
                fatal=False,
            )
        ]
    return []


def check_shm(plan: Plan, env: Mapping[str, str], dataloader_workers: int) -> list[Problem]:
    shm = plan.inventory.shm_bytes
    if shm is None:
        return []
    processes = plan.layout.nproc_per_node + (
        plan.layout.rollout_tp * plan.layout.rollout_dp if plan.layout.local_rollout else 0
    )
    p2p_off = nccl.nccl_true(plan.nccl.env.get("NCCL_P2P_DISABLE") or env.get("NCCL_P2P_DISABLE"))
    fix = (
        "give the container shared memory: compose `ipc: host` (the shipped compose.yaml) or "
        "`shm_size: 16gb`; `docker run --ipc=host` or `--shm-size=16g`"
    )
    have = f"/dev/shm is {shm / MIB:.0f} MiB"
    # NCCL_SHM_DISABLE=1: NCCL's intra-node traffic goes over sockets instead (slower, but no /dev/shm)
    shm_off = nccl.nccl_true(plan.nccl.env.get("NCCL_SHM_DISABLE") or env.get("NCCL_SHM_DISABLE"))
    if len(plan.layout.used_gpus) > 1 and processes > 1 and p2p_off and shm_off and shm < SHM_MIN_WORKERS:
        return [
            Problem(
                "/dev/shm",
                f"{have}; NCCL_SHM_DISABLE=1 keeps NCCL off it (its traffic between the {processes} GPU "
                "processes goes over sockets, slower), but dataloader workers pass batches through it and "
                "may die with a bus error",
                fix,
                fatal=False,
            )
        ]
    if (
        len(plan.layout.used_gpus) > 1
        and processes > 1
        and p2p_off
        and not shm_off
        and shm < SHM_MIN_MULTI_GPU
    ):
        return [
            Problem(
                "/dev/shm",
                f"{have}; with NCCL_P2P_DISABLE=1 the {processes} GPU processes exchange data through "
                f"/dev/shm and need >= {SHM_MIN_MULTI_GPU // GIB} GiB (NCCL fails with 'unhandled system "
                "error' or bus errors)",
                fix,
            )
        ]
    if (dataloader_workers > 0 or processes > 1) and shm < SHM_MIN_WORKERS:
        users = (
            [f"{dataloader_workers} dataloader worker(s) pass batches through it"]
            if dataloader_workers
            else []
        )
        users += (
            [f"the {processes} GPU processes share memory through it (NCCL, torch)"] if processes > 1 else []
        )
        return [
            Problem(
                "/dev/shm",
                f"{have}; {' and '.join(users)}, and may die with a bus error when it is full",
                fix,
                fatal=False,
            )
        ]
    return []


def check_multi_node(plan: Plan, facts: Facts) -> list[Problem]:
    """NNODES > 1: rank, address and ports, before anything starts (the node check then proves the
    other nodes reach node 0)."""
    s, r = plan.recipe.settings, plan.recipe
    if s.NNODES <= 1:
        return []
    problems: list[Problem] = []
    if s.NODE_RANK >= s.NNODES:
        problems.append(
            Problem(
                f"NODE_RANK ({r.source('NODE_RANK')})",
                f"{s.NODE_RANK} with NNODES={s.NNODES}",
                f"use 0..{s.NNODES - 1}",
            )
        )
    if not r.is_set("RUN_NAME"):
        problems.append(
            Problem(
                "RUN_NAME",
                "unset on a run over several nodes: each node would name the run by its own clock",
                "set the same RUN_NAME on every node",
            )
        )
    if not s.MASTER_ADDR:
        return problems + [
            Problem(
                "MASTER_ADDR",
                "unset on a run over several nodes",
                "set MASTER_ADDR to node 0's address on the network the nodes share",
            )
        ]
    if facts.ports.master_addr_error:
        return problems + [
            Problem(
                f"MASTER_ADDR {s.MASTER_ADDR}",
                f"does not resolve ({facts.ports.master_addr_error})",
                "use node 0's IP address or a name every node resolves",
            )
        ]
    if s.NODE_RANK == 0:
        for port, free in zip((s.MASTER_PORT, s.MASTER_PORT + 1), facts.ports.master_addr_binds, strict=True):
            if not free:
                problems.append(
                    Problem(
                        f"MASTER_ADDR {s.MASTER_ADDR}:{port}",
                        "cannot be bound on node 0: the address is not this machine's, or the port is in use",
                        "on node 0, MASTER_ADDR must be one of its own addresses and MASTER_PORT, "
                        "MASTER_PORT+1 free",
                    )
                )
    return problems


def check(plan: Plan, facts: Facts, dataloader_workers: int) -> list[Problem]:
    """Driver, /dev/shm, nodes, writable output and caches, disk, ports, proxies. All of kind LOCAL:
    they are about this machine, not the recipe."""
    problems = (
        check_driver(plan) + check_shm(plan, facts.env, dataloader_workers) + check_multi_node(plan, facts)
    )
    problems += check_run_paths(plan) + _check_writable(plan, facts)
    if facts.swift_missing:
        problems.append(
            Problem(
                "ms-swift",
                f"{facts.swift_missing}: the trainer could not start",
                "run the entrypoint with the locked stack: .venv/bin/python -m entrypoint ... (made by "
                "`make venv`), or inside the image (docker compose run --rm train ...)",
            )
        )
    s = plan.recipe.settings
    if plan.layout.local_rollout and s.ROLLOUT_PORT and not facts.ports.rollout_port_free:
        problems.append(
            Problem(
                f"ROLLOUT_PORT {s.ROLLOUT_PORT}",
                "is in use on this machine",
                "choose a free port, or leave ROLLOUT_PORT=0 to pick one",
            )
        )
    if s.ROLLOUT_HOST and facts.ports.rollout_host_error:
        problems.append(
            Problem(
                f"ROLLOUT_HOST {s.ROLLOUT_HOST}",
                f"does not resolve ({facts.ports.rollout_host_error}): the trainer would wait for a server "
                "it cannot reach",
                "give the rollout node's IP address, or a name this machine resolves",
            )
        )
    if plan.recipe.is_set("MASTER_PORT") and s.NNODES == 1 and not facts.ports.master_port_free:
        problems.append(
            Problem(
                f"MASTER_PORT {s.MASTER_PORT}",
                "is in use on this machine",
                "choose a free port, or leave it unset",
            )
        )
    proxies = [k for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy") if facts.env.get(k)]
    if proxies:
        problems.append(
            Problem(
                "proxy",
                f"{', '.join(proxies)} set: hub downloads go through it; the trainer reaches the rollout "
                "server on loopback directly (NO_PROXY includes 127.0.0.1,localhost)",
                "",
                fatal=False,
            )
        )
    return [dataclasses.replace(p, kind=LOCAL) for p in problems]


def check_run_paths(plan: Plan) -> list[Problem]:
    """The run directory is OUTPUT_DIR/RUN_NAME and every path the plan writes is inside it (paths compared
    after normalising '..'; settings.RUN_NAME_RE keeps a name from leaving, this proves the result)."""
    run_dir = os.path.normpath(plan.run_dir)
    expected = os.path.normpath(facts_mod.run_dir(plan.recipe.settings.OUTPUT_DIR, plan.run_name))
    outside = [p for p in plan.written if not os.path.normpath(p).startswith(run_dir + os.sep)]
    if run_dir == expected and Path(run_dir).name == plan.run_name and not outside:
        return []
    return [
        Problem(
            f"RUN_NAME {plan.run_name}",
            f"the run would write outside {expected}: {', '.join(outside) or run_dir}",
            "set RUN_NAME to a plain name (letters, digits, . _ -) and OUTPUT_DIR to the directory of runs",
        )
    ]


# What a start writes before its manifest (runlock.py's lock, the logs, a generated dataset, the trainer's
# output_dir, other nodes' and a rollout's nodes/): a directory holding only these is a run that died before
# it recorded itself, or one whose node 0 has not started yet.
BEFORE_THE_MANIFEST = frozenset({"run.lock", "logs", "data", "train", "nodes"})


def _not_a_run(run: facts_mod.PathInfo) -> str:
    """The first names of an existing directory that is not a run directory ('' when it is one, is empty, or
    does not exist): no manifest.json, and names a start does not write."""
    if not run.is_dir or facts_mod.MANIFEST in run.entries:
        return ""
    foreign = [n for n in run.entries if n not in BEFORE_THE_MANIFEST]
    return ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")


def _not_writable(where: str, what: str, info: facts_mod.PathInfo, facts: Facts, chown_fix: str) -> Problem:
    """Why a directory this run writes cannot be written, with the fix that fits the cause: a read-only
    mount (no owner or mode helps, root included), a directory this user owns but may not write (its mode),
    else another owner (`chown_fix`). A chown to the owner it already has fixes nothing."""
    if info.read_only:
        return Problem(
            where,
            f"{what}is on a read-only file system ({info.nearest})",
            "mount it read-write (compose: remove :ro from its volume)",
        )
    why = f"; {info.write_error}" if info.write_error else ""
    if info.owner.partition(":")[0] == str(facts.uid):
        return Problem(
            where,
            f"{what}is not writable by this process, though it belongs to its user "
            f"(uid:gid {facts.uid}:{facts.gid}, owner {info.owner}{why})",
            f"give the owner write permission to {info.nearest}: `chmod u+rwx {info.nearest}`",
        )
    return Problem(
        where,
        f"{what}is not writable by this process (uid:gid {facts.uid}:{facts.gid}; "
        f"the directory belongs to {info.owner}{why})",
        chown_fix,
    )


def _check_writable(plan: Plan, facts: Facts) -> list[Problem]:
    uid, gid = facts.uid, facts.gid
    problems = []
    out = Path(plan.recipe.settings.OUTPUT_DIR).expanduser()
    info = facts.path(out)
    in_the_way = (
        out if info.exists and not info.is_dir else Path(info.nearest) if not info.nearest_is_dir else None
    )
    run = facts.path(plan.run_dir)
    if in_the_way is not None:  # a file in the way: say so, not "not writable ... chown"
        problems.append(
            Problem(
                f"OUTPUT_DIR {out}",
                "is a file, not a directory"
                if in_the_way == out
                else f"cannot be made: {in_the_way} is a file",
                "point OUTPUT_DIR at a directory (the mounted output volume, /output in the image), or move "
                "that file away",
            )
        )
    elif run.exists and not run.is_dir:
        problems.append(
            Problem(
                f"RUN_NAME {plan.run_name}",
                f"{plan.run_dir} is a file, not a run directory",
                "choose another RUN_NAME, or move that file away",
            )
        )
    elif foreign := _not_a_run(run):
        problems.append(
            Problem(
                f"RUN_NAME {plan.run_name}",
                f"{plan.run_dir} already holds files that are not a grpo-rig run ({foreign}) and no "
                f"{facts_mod.MANIFEST}: the run would mix its files into them and replace a README.md",
                "choose another RUN_NAME (a new directory under OUTPUT_DIR), or move those files away",
            )
        )
    elif not info.writable:
        problems.append(
            _not_writable(
                f"OUTPUT_DIR {out}",
                "",
                info,
                facts,
                f"on the host: `sudo chown -R {uid}:{gid} ./output`, or run the container as the owner: "
                "`mkdir -p output data && HOST_UID=$(id -u) HOST_GID=$(id -g) docker compose run ...` "
                "(compose.yaml sets user: from them; `make train` does this)",
            )
        )
    for var in CACHE_VARIABLES:
        if facts.env.get(var) and not facts.path(Path(facts.env[var])).writable:
            path = Path(facts.env[var])
            problems.append(
                _not_writable(
                    f"{var} {path}",
                    "cache directory ",
                    facts.path(path),
                    facts,
                    "make the cache volume writable for this user, or point the variable elsewhere",
                )
            )
    problems += _check_disk(plan, facts, info)
    if plan.recipe.settings.EXPORT_MERGED and plan.recipe.trainer_args.train_type != "lora":
        problems.append(
            Problem(
                "EXPORT_MERGED",
                f"TRAIN_TYPE={plan.recipe.trainer_args.train_type} trains the whole model: there is no LoRA "
                "adapter to merge",
                "remove EXPORT_MERGED (the run's model/ directory is already the full model)",
                fatal=False,
            )
        )
    return problems


DISK_MARGIN_GIB = 0.05  # logs, the manifest, plots, generated data, tensorboard: 0.5 MB in the smoke run
COMPLETION_BYTES_PER_TOKEN = 8  # completions.jsonl: ~4 characters per token, JSON-escaped, with its prompt


def checkpoints_kept(a) -> int | None:
    """Checkpoints on disk at once at the peak (HF writes the new one before deleting the oldest beyond
    SAVE_TOTAL_LIMIT: transformers 4.51 Trainer._save_checkpoint then _rotate_checkpoints); None when
    unknown (no MAX_STEPS and no limit). `a`: args.TrainerArgs."""
    if a.save_strategy == "no":
        return 0
    saves = None
    if a.max_steps > 0 and a.save_strategy == "steps" and a.save_steps > 0:
        every = a.save_steps if a.save_steps >= 1 else a.max_steps * a.save_steps  # < 1: a share of the run
        saves = math.ceil(a.max_steps / max(1.0, every))
    if not a.save_total_limit:
        return saves
    return min(saves, a.save_total_limit + 1) if saves is not None else a.save_total_limit + 1


@dataclasses.dataclass(frozen=True)
class DiskNeed:
    """What a run of a recipe writes to OUTPUT_DIR (GiB)."""

    surely: float  # before anything is exported: one checkpoint, the export, a merged model, the margin
    peak: float  # every checkpoint kept at once (SAVE_TOTAL_LIMIT), the logged completions too
    checkpoint: float  # one checkpoint
    text: str  # how the peak was counted


def disk_need(plan: Plan, facts: Facts) -> DiskNeed:
    """What a run of this recipe writes: its checkpoints (LoRA: fp32 adapter weights, 4 bytes a parameter,
    and AdamW's two fp32 states, 8 more, as PEFT and torch save them; full: weights in TORCH_DTYPE plus 12
    bytes of optimizer state), the exported adapter or model, the merged model (EXPORT_MERGED), the logged
    completions and DISK_MARGIN_GIB. The smoke run measured 67 MB against a peak of 116 MiB predicted
    (a flat 1.0 GiB is 15 times what it writes)."""
    from entrypoint.plan import memory

    a = plan.recipe.trainer_args
    try:
        dims = memory.ModelDims.from_config(facts.model_config.config or {})
    except (KeyError, TypeError, ValueError):
        return DiskNeed(
            1.0, 1.0, 1.0, "a model this planner does not know: about 1.0 GiB assumed for its checkpoints"
        )
    if a.train_type == "full":
        weights = dims.params * memory.DTYPE_BYTES.get(a.torch_dtype, 2)
        states = dims.params * 12
    else:
        weights = dims.lora_params(a.lora_rank) * 4
        states = weights * 2
    checkpoint = (weights + (0 if a.save_only_model else states)) / memory.GIB
    kept = checkpoints_kept(a)
    parts = [f"{kept if kept is not None else 'at least 1'} checkpoint(s) of {size_text(checkpoint)}"]
    surely = min(1, kept if kept is not None else 1) * checkpoint + weights / memory.GIB + DISK_MARGIN_GIB
    merged = _merged_gib(plan, facts)
    if merged is not None:  # the merged export writes a full copy of the model beside the checkpoints
        surely += merged * 1.1
        parts.append(f"the merged model (EXPORT_MERGED=true, {merged:.1f} GiB)")
    peak = surely + checkpoint * max(0, (kept if kept is not None else 1) - 1)
    b = plan.budget.batch if plan.budget else None
    if a.log_completions and a.max_steps > 0 and b is not None:
        logged = a.max_steps * b.generation_batch * a.max_completion_length * COMPLETION_BYTES_PER_TOKEN
        peak += logged / memory.GIB
        parts += (
            [f"{size_text(logged / memory.GIB)} of logged completions"] if logged >= memory.GIB / 1024 else []
        )
    return DiskNeed(
        surely,
        peak,
        checkpoint,
        f"this run writes about {size_text(peak)} ({', '.join(parts)}, the export and logs)",
    )


def _check_disk(plan: Plan, facts: Facts, info) -> list[Problem]:
    """Refuses when not even one checkpoint and the export fit on this machine's output volume (a warning when
    the plan is for another machine: INVENTORY=file); warns when every checkpoint kept would not (a full disk
    then stops the run cleanly, and it resumes once space is freed)."""
    need, free = disk_need(plan, facts), info.disk_free_gib
    if free is None or free >= need.peak:
        return []
    where = f"disk under {info.nearest}"
    if free < need.surely:
        here = plan.inventory.source == "nvml"
        elsewhere = "" if here else " (planned for another machine, INVENTORY: its output volume needs this)"
        return [
            Problem(
                where,
                f"{size_text(free)} free; {need.text}; one checkpoint and the export alone need "
                f"{size_text(need.surely)}{elsewhere}",
                _disk_fix(plan, facts),
                fatal=here,
            )
        ]
    fits = int((free - need.surely + need.checkpoint) // need.checkpoint) if need.checkpoint else 1
    return [
        Problem(
            where,
            f"{size_text(free)} free; {need.text}: the disk fills after about {fits} checkpoint(s)",
            f"set SAVE_TOTAL_LIMIT={max(1, fits - 1)} (the newest checkpoints are kept), or free space; a "
            "full disk stops the run cleanly and the same command resumes it",
            fatal=False,
        )
    ]


def _disk_fix(plan: Plan, facts: Facts) -> str:
    """How to make room: the incomplete checkpoints this run left (never resumed from), the merged export
    when it is on, else free space (cases re-run: 'set EXPORT_MERGED=false' was named when it was off, and
    the 15 MiB checkpoint a full disk had cut short was not)."""
    cut = facts.previous.incomplete
    fixes = (
        [
            f"delete {', '.join(f'{plan.run_dir / path} ({size_text(gib)})' for path, gib in cut)}: "
            "incomplete checkpoints, never resumed from"
        ]
        if cut
        else []
    )
    fixes.append("free space on the output volume")
    if plan.recipe.settings.EXPORT_MERGED:
        fixes.append("set EXPORT_MERGED=false (no merged copy of the model)")
    return "; or ".join(fixes)


def size_text(gib: float) -> str:
    """ "88 MiB", "1.2 GiB"."""
    return f"{gib:.1f} GiB" if gib >= 1 else f"{gib * 1024:.0f} MiB"


def _merged_gib(plan: Plan, facts: Facts) -> float | None:
    """GiB of the merged model EXPORT_MERGED writes (parameters x dtype bytes), None when not exported or
    the model is unknown."""
    from entrypoint.plan import memory

    config = facts.model_config.config
    if not plan.recipe.settings.EXPORT_MERGED or config is None:
        return None
    try:
        dims = memory.ModelDims.from_config(config)
    except (KeyError, TypeError, ValueError):
        return None
    dtype = memory.DTYPE_BYTES.get(plan.recipe.trainer_args.torch_dtype, 2)
    return dims.params * dtype / memory.GIB
