"""What a failed run's manifest says, from its plan and what it left: the failure of the entrypoint's own
writes (an OSError: where, and how much is free on a full disk), the failed merged export, and the explanation
of any failure (`explained`: deaths.explain with the run's last step, checkpoint, export, the plan's predicted
peak and the knobs that lower it, the disk). commands/train.py records them; deaths.py holds the pure reading
of a death, this module the run's context around it.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

from entrypoint.plan.build import Plan
from entrypoint.preflight import environment
from entrypoint.record import export
from entrypoint.record.status import Status
from entrypoint.supervise import deaths, monitor


def export_failed(merged: dict[str, Any]) -> dict[str, Any]:
    """The manifest's `status` and `failure` when the merged export failed: training completed, the adapter is
    exported, and running the same command again retries the export alone (commands/train.py _export_only)."""
    return {
        "status": Status.EXPORT_FAILED,
        "failure": f"merged export failed ({merged.get('reason') or 'status ' + str(merged['returncode'])}); "
        "the adapter is exported, see "
        "logs/export.log; run the same command again to retry the export alone",
    }


def free_text(path: Path) -> str:
    """'/out/r has 0.3 MiB free of 64.0 MiB' (the volume `path` is on)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError:
        return f"{path}: free space unknown"
    mib = 1024**2
    return f"{path} has {usage.free / mib:.1f} MiB free of {usage.total / mib:.1f} MiB"


def os_failure(plan: Plan, exc: OSError, failure: dict | None, doing: str) -> dict[str, Any]:
    """The failure an OSError of the entrypoint's own writes makes while `doing` something (kept beside a
    child's failure, when there was one first). ENOSPC says where and how much is free."""
    out = {"role": "the entrypoint", **(failure or {})}
    if exc.errno == errno.ENOSPC:  # which file hit it says little: every write there fails alike
        out["disk"] = free_text(plan.run_dir)
        out.setdefault("reason", f"could not write while {doing}")
    else:
        out.setdefault(
            "reason", f"could not write {exc.filename or plan.run_dir} while {doing}: {exc.strerror or exc}"
        )
    out["error"] = f"{exc.filename or plan.run_dir}: {exc.strerror or exc}"
    return out


def explained(plan: Plan, failure: dict[str, Any], fields: dict[str, Any], oom_before: int | None) -> dict:
    """`failure` with "summary" (one line) and "explanation" (what happened, the likely cause, the last
    step, what the run left, how to resume: deaths.explain)."""
    role, tail = failure.get("role") or "run", failure.get("log_tail") or []
    disk = failure.get("disk") or (free_text(plan.run_dir) if deaths.disk_full(tail) else "")
    exported = next(
        (d for d in ("adapter/", "model/") if any(k.startswith(d) for k in fields["exported"])), ""
    )
    wanted = plan.recipe.trainer_args.max_steps  # -1: the epochs decide, so no step count to name
    ctx = deaths.Context(
        step=monitor.latest_step(plan.train_dir / "logging.jsonl"),
        planned=wanted if wanted > 0 else None,
        checkpoint=fields.get("checkpoint", ""),
        exported=exported,
        oom_kills=(oom_before, monitor.oom_kills()),
        predicted=_predicted(plan, role, deaths.cuda_oom(tail)),
        oom_knobs=_oom_knobs(plan, role),
        disk=disk,
        disk_need=_disk_need(plan) if disk else "",
        cut_short=tuple(
            f"{c.relative_to(plan.run_dir)} ({export.tree_bytes(c) / 1024**2:.1f} MiB)"
            for c in export.incomplete(plan.train_dir)
        ),
    )
    reason = failure.get("reason") or failure.get("error") or "failed"
    lines = deaths.explain(role, failure.get("returncode"), reason, tail, ctx, failure.get("signal"))
    return {**failure, "summary": lines[0], "explanation": lines}


def _disk_need(plan: Plan) -> str:
    """The free space the disk check asks of this run before it starts (preflight.environment.disk_need), so
    that 'free space, then run the same command again' says how much (cases re-run: 71 MiB freed, refused)."""
    return environment.size_text(environment.disk_need(plan, plan.facts).surely)


def _predicted(plan: Plan, role: str, oom: dict | None) -> str:
    """The plan's predicted peak for the GPU a CUDA out-of-memory error names
    ('21.3 of 24.0 GiB on GPU 0')."""
    if oom is None or not plan.memory:
        return ""
    gpus = plan.layout.rollout_gpus if role == "rollout" else plan.layout.train_gpus
    gpu = gpus[oom["gpu"]] if oom["gpu"] is not None and oom["gpu"] < len(gpus) else None
    estimates = [e for e in plan.memory if e.gpu == gpu] or [e for e in plan.memory if e.gpu in gpus]
    if not estimates:
        return ""
    e = max(estimates, key=lambda e: e.peak_gib)
    return f"{e.peak_gib:.1f} of {e.card_gib:.1f} GiB on GPU {e.gpu}"


def _oom_knobs(plan: Plan, role: str) -> str:
    """The keys that lower a role's CUDA memory, with their values in this run."""
    r, a = plan.recipe, plan.recipe.trainer_args
    if role == "rollout":
        return (
            f"lower ROLLOUT_GPU_MEMORY_UTILIZATION (now {r.rollout_args.gpu_memory_utilization}) or "
            f"ROLLOUT_MAX_MODEL_LEN (now {r.rollout_args.max_model_len or 'the model context'})"
        )
    batch = (
        f"lower PER_DEVICE_TRAIN_BATCH_SIZE (now {a.per_device_train_batch_size}; "
        "GRADIENT_ACCUMULATION_STEPS keeps the step the same)"
    )
    if plan.layout.mode == "colocate":
        return f"{batch} or VLLM_GPU_MEMORY_UTILIZATION (now {a.vllm_gpu_memory_utilization})"
    return f"{batch} or MAX_COMPLETION_LENGTH (now {a.max_completion_length})"
