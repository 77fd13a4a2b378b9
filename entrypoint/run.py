"""`train`: load, probe, decide, check, supervise, export. The run's whole lifecycle in one place.

Run directory `OUTPUT_DIR/<RUN_NAME>/`:

    manifest.json        status, inputs, versions, hardware, NCCL decisions, exported sha256s
    train/               ms-swift's output_dir: args.json, logging.jsonl, checkpoint-<step>/ ...
    logs/<role>.log      each child's full output
    data/                generated datasets
    adapter/             the exported LoRA adapter (model/ for full fine-tuning)
    logging.jsonl        a copy of ms-swift's training log
    README.md            how to load the adapter

Starting a run whose directory exists resumes it from its newest complete checkpoint, after checking
that the recipe still trains the same thing (manifest.IDENTITY_KEYS).
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from entrypoint import countdown, export, hardware, manifest, monitor, preflight, redact, report
from entrypoint import plan as plan_mod
from entrypoint import recipe as recipe_mod
from entrypoint.errors import EXIT_OK, EXIT_RUNTIME_FAILURE, BadInput, Problem, raise_if_fatal
from entrypoint.launch import ChildFailed, ChildState, Interrupted, Supervisor, install_signal_handlers
from entrypoint.plan import Plan


def inventory_for(r: recipe_mod.Recipe) -> hardware.Inventory:
    """The INVENTORY file when the recipe names one, else NVML."""
    path = r.settings.INVENTORY
    if not path:
        return hardware.probe()
    try:
        return hardware.load(path)
    except (OSError, ValueError) as exc:
        raise BadInput(
            [
                Problem(
                    f"INVENTORY ({r.source('INVENTORY')})",
                    f"cannot read {path}: {exc}",
                    "pass a file written by `doctor --save-inventory`",
                )
            ]
        ) from None


def make_plan(
    cli_pairs: list[str], environ: Mapping[str, str], for_train: bool
) -> tuple[Plan, dict[str, Any] | None]:
    """Resolve recipe and inventory, look at an existing run directory, build and check the plan.

    Returns (plan, previous manifest or None). Raises BadInput with every fatal problem found.
    """
    r = recipe_mod.load(cli_pairs, environ)
    inventory = inventory_for(r)
    first = plan_mod.build(r, inventory, environ)
    resume_from = ""
    problems: list[Problem] = []
    try:
        previous = manifest.read(first.run_dir)
    except (OSError, ValueError) as exc:
        previous = None
        problems.append(
            Problem(
                f"RUN_NAME {first.run_name}",
                f"{first.run_dir / manifest.MANIFEST} exists but cannot be read ({exc})",
                "move that run directory aside, or choose another RUN_NAME",
            )
        )
    if previous is not None:
        changed = {
            k: (previous.get("identity", {}).get(k, ""), v)
            for k, v in manifest.identity(first).items()
            if previous.get("identity", {}).get(k, "") != v
        }
        if changed:
            detail = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
            problems.append(
                Problem(
                    f"RUN_NAME {first.run_name}",
                    f"exists and was started with a different recipe ({detail})",
                    "restore those values to resume it, or choose a new RUN_NAME for a new run",
                )
            )
        newest = export.newest_complete(first.train_dir)
        if newest is not None:
            resume_from = str(newest)
    built = plan_mod.build(r, inventory, environ, resume_from=resume_from) if resume_from else first
    built.problems.extend(problems)
    built.problems.extend(preflight.check(built, environ, for_train=for_train))
    raise_if_fatal(built.problems)
    return built, previous


def completed_steps(plan: Plan) -> tuple[int, int | None]:
    """(global step of the newest complete checkpoint, max_steps it was planned for)."""
    newest = export.newest_complete(plan.train_dir)
    if newest is None:
        return 0, None
    state = json.loads((newest / "trainer_state.json").read_text())
    return int(state.get("global_step", 0)), state.get("max_steps")


def _already_complete(plan: Plan, previous: dict[str, Any] | None) -> bool:
    if not previous or previous.get("status") != "completed":
        return False
    done, _ = completed_steps(plan)
    wanted = plan.recipe.trainer.get("max_steps")
    return not wanted or int(wanted[0]) <= done


def train(cli_pairs: list[str], environ: Mapping[str, str], console: TextIO = sys.stdout) -> int:
    """Run GRPO for a recipe; returns the process exit status (errors.EXIT_*)."""
    plan, previous = make_plan(cli_pairs, environ, for_train=True)
    say = lambda text: print(f"grpo-rig | {text}", file=console, flush=True)  # noqa: E731

    if _already_complete(plan, previous):
        done, _ = completed_steps(plan)
        say(f"run {plan.run_name} is already complete ({done} steps) in {plan.run_dir}; nothing changed.")
        say("to train further, raise MAX_STEPS for this RUN_NAME, or start a new run with another RUN_NAME")
        return EXIT_OK

    for line in plan.render().splitlines():
        say(line)
    run_dir = plan.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    for moved in quarantine_incomplete(plan.train_dir):
        say(
            f"warning: {moved} was an incomplete checkpoint (interrupted save); moved aside, not resumed from"
        )
    secrets = redact.values_of(dict(environ)) + redact.values_of(
        {k: v.value for k, v in plan.recipe.values.items()}
    )
    data = manifest.start(plan, dict(environ), previous)
    manifest.write(run_dir, data, secrets)

    if plan.recipe.settings.DATASET_GENERATOR == "countdown":
        path = Path(plan.dataset_paths[0])
        if not path.exists():
            seed = int((plan.recipe.trainer.get("seed") or ["42"])[0])
            countdown.write_jsonl(path, plan.recipe.settings.DATASET_ROWS, seed)
            say(f"generated {plan.recipe.settings.DATASET_ROWS} countdown tasks into {path}")

    supervisor = Supervisor(run_dir / "logs", plan.recipe.settings.STOP_GRACE_SECONDS, console, secrets)
    gpu_monitor = None
    if plan.layout.used_gpus and plan.inventory.source == "nvml":
        gpu_monitor = monitor.GpuMonitor(
            list(plan.layout.used_gpus),
            run_dir / "gpu.jsonl",
            plan.recipe.settings.GPU_MONITOR_INTERVAL,
            plan.train_dir / "logging.jsonl",
        ).start()
    restore = install_signal_handlers()
    status, code, failure = "completed", EXIT_OK, None
    try:
        rollout = plan.process("rollout")
        if rollout is not None:
            say(
                f"starting the rollout server on GPU(s) {plan.layout.rollout_gpus}; waiting for {rollout.health_url}"
            )
            child = supervisor.start(rollout)
            seconds = supervisor.wait_healthy(
                child, rollout.health_url, plan.recipe.settings.ROLLOUT_STARTUP_TIMEOUT
            )
            port = int(rollout.health_url.rsplit(":", 1)[1].split("/")[0])
            bound = supervisor.listening_ports(child)
            if port not in bound:
                raise ChildFailed(
                    "rollout",
                    None,
                    list(child.tail),
                    f"answered on port {port} but listens on {sorted(bound)}: another server holds {port}",
                )
            say(f"rollout server healthy after {seconds:.0f} s on port {port}")
        trainer = supervisor.start(plan.process("trainer"))
        first = supervisor.wait_any()
        if first is trainer and first.state is ChildState.SUCCEEDED:
            status = "completed"
        else:
            rc = first.popen.returncode
            raise ChildFailed(first.role, rc, list(first.tail), f"exited with status {rc}")
    except ChildFailed as exc:
        status, code = "failed", EXIT_RUNTIME_FAILURE
        failure = {"role": exc.role, "returncode": exc.returncode, "reason": exc.reason, "log_tail": exc.tail}
        say(exc.render())
    except Interrupted as exc:
        status, code = "stopped", 128 + exc.signum
        say(
            f"{signal.Signals(exc.signum).name} received: stopping all processes (grace {supervisor.grace_seconds:.0f} s)"
        )
    finally:
        supervisor.stop_all()
        restore()
        if gpu_monitor is not None:
            gpu_monitor.stop()

    if gpu_monitor is not None:
        predicted = {e.gpu: round(e.peak_gib, 2) for e in plan.memory}
        data["gpu_memory_peak"] = {
            str(g): {"measured_gib": round(peak, 2), "predicted_gib": predicted.get(g)}
            for g, peak in sorted(gpu_monitor.peaks.items())
        }
    final = finish_run(plan, data, status, failure, console)
    manifest.write(run_dir, final, secrets)
    say(f"run {status}: {run_dir}")
    if final.get("exported"):
        say(f"adapter: {run_dir / ('adapter' if (run_dir / 'adapter').exists() else 'model')}")
    return code


def quarantine_incomplete(train_dir: Path) -> list[str]:
    """Rename incomplete checkpoint-N dirs to incomplete-checkpoint-N so HF's rotation (save_total_limit)
    never counts them as the newest and deletes the complete one a resume needs. Nothing is deleted."""
    moved = []
    for ckpt in export.checkpoints(train_dir):
        if not export.is_complete(ckpt):
            target = ckpt.with_name(f"incomplete-{ckpt.name}")
            n = 1
            while target.exists():
                target = ckpt.with_name(f"incomplete-{ckpt.name}.{n}")
                n += 1
            ckpt.rename(target)
            moved.append(str(target))
    return moved


def finish_run(
    plan: Plan, data: dict[str, Any], status: str, failure: dict | None, console: TextIO
) -> dict[str, Any]:
    """Export the newest complete checkpoint and the logs; return the final manifest."""
    run_dir = plan.run_dir
    fields: dict[str, Any] = {"failure": failure}
    newest = export.newest_complete(plan.train_dir)
    exported: dict[str, str] = {}
    if newest is not None:
        exported.update(
            export.export_checkpoint(newest, run_dir, plan.recipe.raw("MODEL") or plan.model_path)
        )
        fields["checkpoint"] = str(newest.relative_to(run_dir))
    log = plan.train_dir / "logging.jsonl"
    if log.exists():
        export.copy_atomic(log, run_dir / "logging.jsonl")
        exported["logging.jsonl"] = export.sha256_file(run_dir / "logging.jsonl")
    done, planned = completed_steps(plan)
    fields["steps"] = {"completed": done, "planned": planned}
    try:
        exported.update(report.write(plan, run_dir))
    except Exception as exc:  # a report is a convenience: never lose the run over it
        print(f"grpo-rig | warning: could not write the run report: {exc}", file=console)
    fields["exported"] = dict(sorted(exported.items()))
    return manifest.finish(data, status, **fields)
