"""`train`: load, probe, decide, check, supervise, export. The run's whole lifecycle in one place.

Run directory `OUTPUT_DIR/<RUN_NAME>/`:

    manifest.json        status, inputs, versions, hardware, NCCL decisions, exported sha256s
    train/               ms-swift's output_dir: args.json, logging.jsonl, checkpoint-<step>/ ...
    logs/<role>.log      each child's full output; logs/events.jsonl the trainer's phase timings
    data/                generated datasets
    adapter/             the exported LoRA adapter (model/ for full fine-tuning)
    logging.jsonl        a copy of ms-swift's training log
    README.md            how to load the adapter

Starting a run whose directory exists resumes it from its newest complete checkpoint, after checking
that the recipe still trains the same thing (the identity keys of entrypoint/keys.py).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import psutil

from entrypoint import export, hardware, host, manifest, monitor, nodes, preflight, report, startup
from entrypoint import plan as plan_mod
from entrypoint import recipe as recipe_mod
from entrypoint.console import Console
from entrypoint.errors import EXIT_OK, EXIT_RUNTIME_FAILURE, BadInput, Problem, raise_if_fatal
from entrypoint.facts import WEIGHT_SYNC_PORT, host_path
from entrypoint.inventory import Inventory
from entrypoint.launch import (
    Child,
    ChildFailed,
    Interrupted,
    Outcome,
    Printer,
    Supervisor,
    launch,
    supervised,
)
from entrypoint.plan import EVENTS_FILE, Plan
from entrypoint.rewards import tasks

END_OF_MAIN = "End time of running main"  # ms-swift's last log line (v3.6.4:swift/llm/base.py:50)


def inventory_for(r: recipe_mod.Recipe) -> Inventory:
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
            ]  # fmt: skip
        ) from None


def make_plan(
    cli_pairs: list[str], environ: Mapping[str, str], for_train: bool, rollout_only: bool = False
) -> Plan:
    """Resolve the recipe and the inventory, read the host once, build and check the plan. Raises
    BadInput with every fatal problem found."""
    r = recipe_mod.load(cli_pairs, environ, recipe_mod.recipes_dir(environ), strict=False)
    inventory = inventory_for(r)
    facts = host.gather(r, environ)
    built = plan_mod.build(r, inventory, facts, rollout_only=rollout_only)
    # without a layout (no GPU) the checks that need none still run: every problem at once
    built.problems.extend(preflight.check(built, facts, for_train=for_train))
    raise_if_fatal(built.problems)
    return built


def completed_steps(plan: Plan) -> tuple[int, int | None]:
    """(global step of the newest complete checkpoint, max_steps it was planned for)."""
    newest = export.newest_complete(plan.train_dir)
    if newest is None:
        return 0, None
    state = json.loads((newest / "trainer_state.json").read_text())
    return int(state.get("global_step", 0)), state.get("max_steps")


def _already_complete(plan: Plan) -> bool:
    """The run directory holds a finished training of this plan (a merged export may still be missing)."""
    previous = plan.facts.previous.manifest
    if not previous or previous.get("status") not in ("completed", EXPORT_FAILED):
        return False
    done, _ = completed_steps(plan)
    wanted = plan.recipe.args("max_steps")
    return not wanted or int(wanted[0]) <= done


def train(cli_pairs: list[str], environ: Mapping[str, str], console: TextIO | None = None) -> int:
    """Run GRPO for a recipe; returns the process exit status (errors.EXIT_*). `environ` is the process
    environment: read once (host.gather) and inherited by the children."""
    plan = make_plan(cli_pairs, environ, for_train=True)
    printer = Printer(console) if console else Printer()
    if _already_complete(plan):
        done, _ = completed_steps(plan)
        if plan.process("export") and not (plan.run_dir / "merged").is_dir():
            return _export_only(plan, printer, environ, done)
        printer.say(
            f"run {plan.run_name} is already complete ({done} steps) in {plan.run_dir}; nothing changed."
        )
        printer.say(
            "to train further, raise MAX_STEPS for this RUN_NAME, or start a new run with another RUN_NAME"
        )
        return EXIT_OK
    for line in plan.render().splitlines():
        printer.say(line)
    records = check_nodes(plan, printer)
    here = prepare(plan, printer)
    secrets = manifest.secrets_of(plan)
    data = {**manifest.start(plan, plan.facts.previous.manifest), **({"nodes": records} if records else {})}
    manifest.write(here, data, secrets)
    outcome, peaks = supervise(plan, here, printer, secrets, environ)
    data.update({"gpu_memory_peak": peaks} if peaks is not None else {})
    data.update({"trainer_exit": outcome.trainer_exit} if outcome.trainer_exit else {})
    final = finish_run(plan, data, outcome, printer, secrets, environ)
    code = outcome.code
    if final.get("merged", {}).get("status") == "failed":
        code = EXIT_RUNTIME_FAILURE
        final.update(_export_failed(final["merged"]))
        printer.say(final["failure"])
    manifest.write(here, final, secrets)
    printer.say(f"run {final['status']}: {host_path(here, plan.facts)}")
    for line in summary_lines(plan):
        printer.say(line)
    return code


def summary_lines(plan: Plan) -> list[str]:
    """The end of a run's console: how the reward moved, and where everything is."""
    lines = []
    rows = []
    log = plan.run_dir / "logging.jsonl"
    for text in log.read_text(encoding="utf-8").splitlines() if log.is_file() else []:
        try:
            row = json.loads(text)
        except ValueError:
            continue
        if "reward" in row:
            rows.append(row)
    if rows:
        first, last = rows[0], rows[-1]
        lines.append(f"reward: {first['reward']:.3f} at step {first.get('global_step/max_steps', '?')} -> {last['reward']:.3f} "
                     f"at step {last.get('global_step/max_steps', '?')} (training batches; held-out: evaluate)")  # fmt: skip
    if plan.recipe.settings.NODE_RANK == 0:
        for name in ("adapter", "model", "merged", "training_curves.png", "README.md", "logs"):
            if (plan.run_dir / name).exists():
                lines.append(f"{name}: {host_path(plan.run_dir / name, plan.facts)}")  # read on the host
        if (plan.run_dir / "adapter").is_dir() and plan.facts.in_container:
            lines.append(f"did it help? docker compose run --rm train evaluate run={plan.run_name}")
        elif (plan.run_dir / "adapter").is_dir():
            lines.append(f"did it help? {sys.executable} -m entrypoint evaluate run={plan.run_name} "
                         f"OUTPUT_DIR={plan.recipe.settings.OUTPUT_DIR}   (make eval RUN={plan.run_name})")  # fmt: skip
    return lines


EXPORT_FAILED = "export_failed"  # training completed, the merged export did not (EXPORT_MERGED=true)


def _export_failed(merged: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": EXPORT_FAILED,
        "failure": f"merged export failed (status {merged['returncode']}); the adapter is exported, see "
        "logs/export.log; run the same command again to retry the export alone",
    }


def _export_only(plan: Plan, printer: Printer, environ: Mapping[str, str], done: int) -> int:
    """A finished run whose merged export is missing (it failed, or EXPORT_MERGED was off): export only."""
    newest = export.newest_complete(plan.train_dir)
    here = node_dir(plan)
    data = dict(plan.facts.previous.manifest or {})
    if newest is None:
        printer.say(f"run {plan.run_name}: no complete checkpoint to merge in {plan.train_dir}")
        return EXIT_RUNTIME_FAILURE
    printer.say(f"run {plan.run_name} finished training ({done} steps); exporting the merged model only")
    merged = export_merged(plan, newest, printer, environ)
    secrets = manifest.secrets_of(plan)
    data["merged"] = merged
    if merged["status"] == "completed":
        data["exported"] = dict(sorted({**data.get("exported", {}), **merged.pop("files")}.items()))
        data.update(status="completed", failure=None)
        manifest.write(here, data, secrets)
        printer.say(f"merged: {plan.run_dir / 'merged'}")
        return EXIT_OK
    data.update(_export_failed(merged))
    manifest.write(here, data, secrets)
    printer.say(data["failure"])
    return EXIT_RUNTIME_FAILURE


def rollout(cli_pairs: list[str], environ: Mapping[str, str], console: TextIO | None = None) -> int:
    """Serve the vLLM rollout on this node's ROLLOUT_GPUS for trainers on other nodes, until stopped."""
    plan = make_plan(cli_pairs, environ, for_train=True, rollout_only=True)
    printer = Printer(console) if console else Printer()
    for line in plan.render().splitlines():
        printer.say(line)
    process = plan.process("rollout")
    here = plan.run_dir / "nodes" / "rollout"
    here.mkdir(parents=True, exist_ok=True)
    grace, secrets = plan.recipe.settings.STOP_GRACE_SECONDS, list(plan.facts.secret_values)
    try:
        with supervised(here / "logs", grace, printer, secrets, environ) as supervisor:
            return _serve(plan, process, supervisor, printer)
    except ChildFailed as exc:
        printer.say(exc.render())
        return EXIT_RUNTIME_FAILURE
    except Interrupted as exc:
        return 128 + exc.signum


def _serve(plan: Plan, process: plan_mod.Process, supervisor: Supervisor, printer: Printer) -> int:
    """Start the rollout server, wait for its health, then for its end."""
    child = supervisor.start(process)
    supervisor.wait_healthy(child, process.health_url, plan.recipe.settings.ROLLOUT_STARTUP_TIMEOUT)
    printer.say(
        f"rollout server healthy; trainers on other nodes: ROLLOUT_HOST=<this node's address> ROLLOUT_PORT={process.port}"
    )
    printer.say(
        f"open to the trainer nodes: TCP {process.port} (HTTP) and {WEIGHT_SYNC_PORT} (weight sync), plus NCCL's ports"
    )
    rc = supervisor.wait(child)
    printer.say(f"rollout server exited with status {rc}")
    return EXIT_OK if rc == 0 else EXIT_RUNTIME_FAILURE


def node_dir(plan: Plan) -> Path:
    """Where this node keeps its manifest and logs: the run directory on node 0, nodes/node<N>/ on others
    (so nodes sharing an output volume never write the same file)."""
    rank = plan.recipe.settings.NODE_RANK
    return plan.run_dir if rank == 0 else plan.run_dir / "nodes" / f"node{rank}"


def check_nodes(plan: Plan, printer: Printer) -> list[dict[str, Any]]:
    """Several nodes: the start-up identity check (nodes.py). Raises BadInput; returns node 0's records."""
    s = plan.recipe.settings
    if s.NNODES <= 1:
        return []
    if s.NODE_RANK == 0:
        records, problems = nodes.serve(plan, s.NODE_CHECK_TIMEOUT, printer.say)
    else:
        node0, problems = nodes.report(plan, s.NODE_CHECK_TIMEOUT, printer.say)
        if node0 is not None and node0.get("resume_from") != plan.resume_from:
            problems.append(
                Problem(
                    f"node {s.NODE_RANK}",
                    f"node 0 resumes from {node0.get('resume_from') or 'nothing'}, this node from {plan.resume_from or 'nothing'}",
                    "resuming a run over several nodes needs OUTPUT_DIR on storage every node shares",
                )  # fmt: skip
            )
        records = []
    raise_if_fatal(problems)
    printer.say(f"node check passed: {s.NNODES} nodes, same lock, image and recipe")
    return records


def prepare(plan: Plan, printer: Printer) -> Path:
    """Create the run directory, set incomplete checkpoints aside, generate the dataset; returns node_dir."""
    here = node_dir(plan)
    here.mkdir(parents=True, exist_ok=True)
    for moved in quarantine_incomplete(plan.train_dir):
        printer.say(
            f"warning: {moved} was an incomplete checkpoint (interrupted save); moved aside, not resumed from"
        )
    s = plan.recipe.settings
    trainer = plan.process("trainer")
    if trainer is not None and trainer.env.get("GRPO_RIG_EVENTS"):
        # the command's own start, so the start-up table (startup.py) counts from what the user typed
        events = Path(trainer.env["GRPO_RIG_EVENTS"])
        events.parent.mkdir(parents=True, exist_ok=True)
        with events.open("a", encoding="utf-8") as f:
            f.write(
                json.dumps(
                    {"t": round(psutil.Process().create_time(), 3), "phase": "start", "process": "entrypoint"}
                )
                + "\n"
            )
    if s.DATASET_GENERATOR:
        path = Path(plan.dataset_paths[0])
        if not path.exists():
            seed = plan.recipe.trainer_args.seed
            tasks.write_jsonl(tasks.TASKS[s.DATASET_GENERATOR], path, s.DATASET_ROWS, seed)
            printer.say(f"generated {s.DATASET_ROWS} {s.DATASET_GENERATOR} tasks into {path}")
    return here


def supervise(
    plan: Plan, here: Path, printer: Printer, secrets: list[str], environ: Mapping[str, str]
) -> tuple[Outcome, dict | None]:
    """Launch the planned children (launch.py owns the policy) with the GPU monitor beside them.
    Returns the outcome and the GPU peaks (None without NVML)."""
    s = plan.recipe.settings
    if printer.shown is None:
        printer.shown = Console(show_all=s.CONSOLE == "all", events=here / "logs" / EVENTS_FILE,
                                total_steps=plan.recipe.trainer_args.max_steps)  # fmt: skip
        printer.say(f"the console shows one line per step; everything ms-swift prints is in {here / 'logs'}")
    children = [p for p in plan.processes if p.role in ("rollout", "trainer")]
    gpu_monitor = None
    with supervised(here / "logs", s.STOP_GRACE_SECONDS, printer, secrets, environ) as supervisor:
        if plan.layout.used_gpus and plan.inventory.source == "nvml":
            gpu_monitor = monitor.GpuMonitor(list(plan.layout.used_gpus), here / "gpu.jsonl", s.GPU_MONITOR_INTERVAL,
                                             plan.train_dir / "logging.jsonl", supervisor.pids).start()  # fmt: skip
        try:
            outcome = launch(
                children, supervisor, s.ROLLOUT_STARTUP_TIMEOUT, lambda c: training_finished(plan, c)
            )
        finally:
            if gpu_monitor is not None:
                gpu_monitor.stop()
    return outcome, _peaks(plan, gpu_monitor)


def _peaks(plan: Plan, gpu_monitor: monitor.GpuMonitor | None) -> dict | None:
    """Each GPU's peak: this run's own processes where NVML attributes memory to them, else the device."""
    if gpu_monitor is None:
        return None
    predicted = {e.gpu: round(e.peak_gib, 2) for e in plan.memory}
    return {
        str(g): {
            "measured_gib": round(gpu_monitor.run_peaks.get(g, p), 2),
            "device_gib": round(p, 2),
            "measured_by": "run's processes (NVML)" if g in gpu_monitor.run_peaks else "device (NVML)",
            "predicted_gib": predicted.get(g),
        }
        for g, p in sorted(gpu_monitor.peaks.items())
    }


def training_finished(plan: Plan, trainer: Child) -> str | None:
    """Why a trainer that exited with an error had still finished training, or None.

    Finished means both: ms-swift logged the end of its pipeline (it logs END_OF_MAIN only after
    `trainer.train()` returned and the final state was saved), and the newest complete checkpoint holds
    the last planned step. A crash at interpreter exit after that (vLLM's sleep-mode teardown,
    vllm-project/vllm#16993) loses nothing.
    """
    try:
        with trainer.log_path.open(encoding="utf-8", errors="replace") as f:
            ended = any(END_OF_MAIN in line for line in f)
    except OSError:
        return None
    newest = export.newest_complete(plan.train_dir)
    if not ended or newest is None:
        return None
    state = json.loads((newest / "trainer_state.json").read_text())
    step, planned = int(state.get("global_step", 0)), state.get("max_steps")
    if not planned or step < int(planned):
        return None
    return f"ms-swift logged '{END_OF_MAIN}' and {newest.name} holds step {step} of {planned}"


def export_merged(
    plan: Plan, checkpoint: Path, printer: Printer, environ: Mapping[str, str]
) -> dict[str, Any]:
    """Run the planned `export` process (plan._export) for `checkpoint`, then put its output in place."""
    planned = plan.process("export")
    process = dataclasses.replace(
        planned, argv=[str(checkpoint) if a == plan_mod.CHECKPOINT else a for a in planned.argv]
    )
    tmp = plan.run_dir / plan_mod.MERGED_TMP
    shutil.rmtree(tmp, ignore_errors=True)  # an export cut short before: ms-swift refuses an existing output
    # after training, outside the run's signal handling: a signal now ends the command as the launcher's
    # own handlers always did, and `supervised` still stops the export's process tree
    with supervised(plan.run_dir / "logs", plan.recipe.settings.STOP_GRACE_SECONDS, printer, base_env=environ,
                    signals=False) as supervisor:  # fmt: skip
        child = supervisor.start(process)
        rc = supervisor.wait(child)
    if rc != 0 or not tmp.is_dir():
        shutil.rmtree(tmp, ignore_errors=True)
        return {"status": "failed", "returncode": rc, "log_tail": list(child.tail), "argv": process.argv}
    export.replace_dir(tmp, plan.run_dir / "merged")
    return {
        "status": "completed",
        "argv": process.argv,
        "files": export.hash_tree(plan.run_dir / "merged", plan.run_dir),
    }


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
    plan: Plan,
    data: dict[str, Any],
    outcome: Outcome,
    printer: Printer,
    secrets: list[str],
    environ: Mapping[str, str],
) -> dict[str, Any]:
    """Export the newest complete checkpoint and the logs; return the final manifest."""
    run_dir = plan.run_dir
    fields: dict[str, Any] = {"failure": outcome.failure}
    done, planned = completed_steps(plan)
    if plan.recipe.settings.NODE_RANK != 0:  # only node 0 exports; its checkpoints hold the weights
        return manifest.finish(
            data, outcome.status, **fields, steps={"completed": done, "planned": planned}, exported={}
        )
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
    fields["steps"] = {"completed": done, "planned": planned}
    trainer = plan.process("trainer")
    if trainer is not None and Path(trainer.env.get("GRPO_RIG_EVENTS", "")).is_file():
        fields["startup_s"] = startup.marks(startup.read_events(Path(trainer.env["GRPO_RIG_EVENTS"])))
    if (
        plan.process("export")
        and outcome.status == "completed"
        and newest is not None
        and (run_dir / "adapter").exists()
    ):
        fields["merged"] = export_merged(plan, newest, printer, environ)
        if fields["merged"]["status"] == "completed":
            exported.update(fields["merged"].pop("files"))
    try:
        exported.update(report.write(plan, run_dir, outcome.status))
    except Exception as exc:  # a report is a convenience: never lose the run over it
        printer.say(f"warning: could not write the run report: {exc}")
    fields["exported"] = dict(sorted(exported.items()))
    return manifest.finish(data, outcome.status, **fields)
