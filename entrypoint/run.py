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
that the recipe still trains the same thing (the identity keys of entrypoint/keys.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from entrypoint import (
    countdown,
    export,
    hardware,
    manifest,
    monitor,
    nodes,
    ports,
    preflight,
    redact,
    report,
    shape,
)
from entrypoint import plan as plan_mod
from entrypoint import recipe as recipe_mod
from entrypoint.errors import EXIT_OK, EXIT_RUNTIME_FAILURE, BadInput, Problem, raise_if_fatal
from entrypoint.launch import ChildFailed, ChildState, Interrupted, Supervisor, install_signal_handlers
from entrypoint.plan import Plan
from entrypoint.preflight import memory_check


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
    cli_pairs: list[str], environ: Mapping[str, str], for_train: bool, rollout_only: bool = False
) -> tuple[Plan, dict[str, Any] | None]:
    """Resolve recipe and inventory, look at an existing run directory, build and check the plan.

    Returns (plan, previous manifest or None). Raises BadInput with every fatal problem found.
    """
    r = recipe_mod.load(cli_pairs, environ)
    inventory = inventory_for(r)
    first = plan_mod.build(r, inventory, environ, rollout_only=rollout_only)
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
    built = (
        plan_mod.build(r, inventory, environ, resume_from=resume_from, rollout_only=rollout_only)
        if resume_from
        else first
    )
    built = shaped(
        built,
        environ,
        lambda shaped_recipe: plan_mod.build(
            shaped_recipe, inventory, environ, resume_from=resume_from, rollout_only=rollout_only
        ),
    )
    built.problems.extend(problems)
    if not built.placed:  # e.g. no GPU: one clear message, not a cascade of consequences
        raise_if_fatal(built.problems)
    built.problems.extend(preflight.check(built, environ, for_train=for_train))
    raise_if_fatal(built.problems)
    return built, previous


def shaped(plan: Plan, environ: Mapping[str, str], rebuild) -> Plan:
    """The plan rebuilt (`rebuild(recipe) -> Plan`) with the batch shape the planner chooses (shape.py),
    or `plan` itself when it chooses nothing."""
    if not plan.placed:
        return plan
    w, _ = memory_check.workload(plan, environ)
    choices = shape.choose(plan, w)
    if not choices:
        return plan
    return rebuild(plan.recipe.with_values({c.key: (c.value, f"planner: {c.reason}") for c in choices}))


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
    node_records = check_nodes(plan, dict(environ), say)
    node_dir = prepare(plan, say)
    secrets = redact.values_of(dict(environ)) + redact.values_of(
        {k: v.value for k, v in plan.recipe.values.items()}
    )
    data = {
        **manifest.start(plan, dict(environ), previous),
        **({"nodes": node_records} if node_records else {}),
    }
    manifest.write(node_dir, data, secrets)
    status, code, ended, peaks = supervise(plan, node_dir, console, secrets, say)
    if peaks is not None:
        data["gpu_memory_peak"] = peaks
    if ended["trainer_exit"]:
        data["trainer_exit"] = ended["trainer_exit"]
    final = finish_run(plan, data, status, ended["failure"], console)
    if final.get("merged", {}).get("status") == "failed":
        code = EXIT_RUNTIME_FAILURE
        say(
            f"merged export failed (status {final['merged']['returncode']}); the adapter is exported, see logs/export.log"
        )
    manifest.write(node_dir, final, secrets)
    say(f"run {status}: {node_dir}")
    for name in ("adapter", "model", "merged"):
        if (plan.run_dir / name).is_dir() and plan.recipe.settings.NODE_RANK == 0:
            say(f"{name}: {plan.run_dir / name}")
    return code


def rollout(cli_pairs: list[str], environ: Mapping[str, str], console: TextIO = sys.stdout) -> int:
    """Serve the vLLM rollout on this node's ROLLOUT_GPUS for trainers on other nodes, until stopped."""
    plan, _ = make_plan(cli_pairs, environ, for_train=True, rollout_only=True)
    say = lambda text: print(f"grpo-rig | {text}", file=console, flush=True)  # noqa: E731
    for line in plan.render().splitlines():
        say(line)
    process = plan.process("rollout")
    here = plan.run_dir / "nodes" / "rollout"
    here.mkdir(parents=True, exist_ok=True)
    secrets = redact.values_of(dict(environ))
    supervisor = Supervisor(here / "logs", plan.recipe.settings.STOP_GRACE_SECONDS, console, secrets)
    restore = install_signal_handlers()
    try:
        child = supervisor.start(process)
        supervisor.wait_healthy(child, process.health_url, plan.recipe.settings.ROLLOUT_STARTUP_TIMEOUT)
        port = process.health_url.rsplit(":", 1)[1].split("/")[0]
        say(
            f"rollout server healthy; trainers on other nodes: ROLLOUT_HOST=<this node's address> ROLLOUT_PORT={port}"
        )
        say(
            f"open to the trainer nodes: TCP {port} (HTTP) and {ports.WEIGHT_SYNC_PORT} (weight sync), plus NCCL's ports"
        )
        rc = supervisor.wait(child)
        say(f"rollout server exited with status {rc}")
        return EXIT_OK if rc == 0 else EXIT_RUNTIME_FAILURE
    except ChildFailed as exc:
        say(exc.render())
        return EXIT_RUNTIME_FAILURE
    except Interrupted as exc:
        return 128 + exc.signum
    finally:
        supervisor.stop_all()
        restore()


def node_dir(plan: Plan) -> Path:
    """Where this node keeps its manifest and logs: the run directory on node 0, nodes/node<N>/ on others
    (so nodes sharing an output volume never write the same file)."""
    rank = plan.recipe.settings.NODE_RANK
    return plan.run_dir if rank == 0 else plan.run_dir / "nodes" / f"node{rank}"


def check_nodes(plan: Plan, environ: dict[str, str], say) -> list[dict[str, Any]]:
    """Several nodes: the start-up identity check (nodes.py). Raises BadInput; returns node 0's records."""
    s = plan.recipe.settings
    if s.NNODES <= 1:
        return []
    if s.NODE_RANK == 0:
        records, problems = nodes.serve(plan, environ, s.NODE_CHECK_TIMEOUT, say)
    else:
        node0, problems = nodes.report(plan, environ, s.NODE_CHECK_TIMEOUT, say)
        if node0 is not None and node0.get("resume_from") != plan.resume_from:
            problems.append(
                Problem(
                    f"node {s.NODE_RANK}",
                    f"node 0 resumes from {node0.get('resume_from') or 'nothing'}, this node from {plan.resume_from or 'nothing'}",
                    "resuming a run over several nodes needs OUTPUT_DIR on storage every node shares",
                )
            )
        records = []
    raise_if_fatal(problems)
    say(f"node check passed: {s.NNODES} nodes, same lock, image and recipe")
    return records


def prepare(plan: Plan, say) -> Path:
    """Create the run directory, set incomplete checkpoints aside, generate the dataset; returns node_dir."""
    here = node_dir(plan)
    here.mkdir(parents=True, exist_ok=True)
    for moved in quarantine_incomplete(plan.train_dir):
        say(
            f"warning: {moved} was an incomplete checkpoint (interrupted save); moved aside, not resumed from"
        )
    if plan.recipe.settings.DATASET_GENERATOR == "countdown":
        path = Path(plan.dataset_paths[0])
        if not path.exists():
            seed = int((plan.recipe.trainer.get("seed") or ["42"])[0])
            countdown.write_jsonl(path, plan.recipe.settings.DATASET_ROWS, seed)
            say(f"generated {plan.recipe.settings.DATASET_ROWS} countdown tasks into {path}")
    return here


def supervise(
    plan: Plan, here: Path, console: TextIO, secrets: list[str], say
) -> tuple[str, int, dict | None, dict | None]:
    """Start the rollout server (if any) and wait for its health, then the trainer; watch both.

    Returns (status, exit code, {"failure": record or None, "trainer_exit": record or None}, GPU peaks
    or None). A trainer that dies after training had finished (`training_finished`) leaves a completed
    run; its exit is recorded in `trainer_exit`.
    """
    s = plan.recipe.settings
    supervisor = Supervisor(here / "logs", s.STOP_GRACE_SECONDS, console, secrets)
    gpu_monitor = None
    if plan.layout.used_gpus and plan.inventory.source == "nvml":
        gpu_monitor = monitor.GpuMonitor(
            list(plan.layout.used_gpus),
            here / "gpu.jsonl",
            s.GPU_MONITOR_INTERVAL,
            plan.train_dir / "logging.jsonl",
            supervisor.pids,
        ).start()
    restore = install_signal_handlers()
    status, code, failure, trainer_exit = "completed", EXIT_OK, None, None
    try:
        rollout = plan.process("rollout")
        if rollout is not None:
            say(
                f"starting the rollout server on GPU(s) {plan.layout.rollout_gpus}; waiting for {rollout.health_url}"
            )
            child = supervisor.start(rollout)
            seconds = supervisor.wait_healthy(child, rollout.health_url, s.ROLLOUT_STARTUP_TIMEOUT)
            port = int(rollout.health_url.rsplit(":", 1)[1].split("/")[0])
            bound = supervisor.listening_ports(child)
            if port not in bound:
                reason = (
                    f"answered on port {port} but listens on {sorted(bound)}: another server holds {port}"
                )
                raise ChildFailed("rollout", None, list(child.tail), reason)
            say(f"rollout server healthy after {seconds:.0f} s on port {port}")
        trainer = supervisor.start(plan.process("trainer"))
        first = supervisor.wait_any()
        if first is not trainer or first.state is not ChildState.SUCCEEDED:
            rc = first.popen.returncode
            why = training_finished(plan, first.log_path) if first is trainer else None
            if why is None:
                raise ChildFailed(first.role, rc, list(first.tail), f"exited with status {rc}")
            signame = exit_signal(rc, first.log_path)
            trainer_exit = {"returncode": rc, "signal": signame, "accepted": True, "reason": why}
            say(
                f"trainer exited with status {rc}{f' ({signame})' if signame else ''} after training had finished "
                f"({why}); the run counts as completed"
            )
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
    peaks = None
    if gpu_monitor is not None:
        predicted = {e.gpu: round(e.peak_gib, 2) for e in plan.memory}
        # this run's own processes where NVML attributes memory to them, else the whole device
        peaks = {
            str(g): {
                "measured_gib": round(gpu_monitor.run_peaks.get(g, p), 2),
                "device_gib": round(p, 2),
                "measured_by": "run's processes (NVML)" if g in gpu_monitor.run_peaks else "device (NVML)",
                "predicted_gib": predicted.get(g),
            }
            for g, p in sorted(gpu_monitor.peaks.items())
        }
    return status, code, {"failure": failure, "trainer_exit": trainer_exit}, peaks


END_OF_MAIN = "End time of running main"  # ms-swift's last log line (v3.6.4:swift/llm/base.py:50)


def training_finished(plan: Plan, log_path: Path) -> str | None:
    """Why a trainer that exited with an error had still finished training, or None.

    Finished means both: ms-swift logged the end of its pipeline (it logs END_OF_MAIN only after
    `trainer.train()` returned and the final state was saved), and the newest complete checkpoint holds
    the last planned step. A crash at interpreter exit after that (vLLM's sleep-mode teardown,
    vllm-project/vllm#16993) loses nothing.
    """
    try:
        with log_path.open(encoding="utf-8", errors="replace") as f:
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


def exit_signal(returncode: int | None, log_path: Path) -> str | None:
    """The signal that ended the trainer: from a negative status, or from torchrun's failure report
    ("Signal 6 (SIGABRT) received by PID ...", "exitcode : -11"), which is what a torchrun'ed rank's
    crash leaves (the torchrun process itself exits 1)."""
    if returncode is not None and returncode < 0:
        return signal.Signals(-returncode).name
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")[-20000:]
    except OSError:
        return None
    named = re.findall(r"Signal \d+ \((SIG[A-Z]+)\) received by PID", text)
    if named:
        return named[-1]
    codes = re.findall(r"exitcode\s*:\s*(-\d+)", text)
    if codes:
        with contextlib.suppress(ValueError):
            return signal.Signals(-int(codes[-1])).name
    return None


def _flag(argv: list[str], name: str) -> list[str]:
    """The tokens after --name in an argv, up to the next flag."""
    if f"--{name}" not in argv:
        return []
    tokens = argv[argv.index(f"--{name}") + 1 :]
    return tokens[: next((i for i, t in enumerate(tokens) if t.startswith("--")), len(tokens))]


def export_merged(plan: Plan, checkpoint: Path, console: TextIO) -> dict[str, Any]:
    """`swift export --merge_lora` of `checkpoint` into `<run>/merged/` (EXPORT_MERGED=true).

    The model, its type, template, dtype and the reward plugins are passed explicitly with
    `--load_args false`: by default ms-swift re-reads them from the checkpoint's args.json, whose absolute
    paths (the plugin file, a mounted model) may not exist where the export runs
    (v3.6.4:swift/llm/argument/base_args/base_args.py:212-260). Written to a temporary directory first.
    """
    trainer = plan.process("trainer")
    tmp = plan.run_dir / f".merged.tmp-{os.getpid()}"
    argv = [
        trainer.argv[0],
        "export",
        "--adapters",
        str(checkpoint),
        "--merge_lora",
        "true",
        "--load_args",
        "false",
    ]
    argv += [
        "--model",
        plan.model_path,
        "--output_dir",
        str(tmp),
        "--external_plugins",
        *_flag(trainer.argv, "external_plugins"),
    ]
    for name in ("model_type", "template", "torch_dtype", "use_hf"):
        if _flag(trainer.argv, name):
            argv += [f"--{name}", *_flag(trainer.argv, name)]
    env = {
        k: v
        for k, v in trainer.env.items()
        if k not in ("NPROC_PER_NODE", "MASTER_PORT", "NNODES", "NODE_RANK", "MASTER_ADDR")
    }
    env["CUDA_VISIBLE_DEVICES"] = str(plan.layout.train_gpus[0]) if plan.layout.train_gpus else ""
    supervisor = Supervisor(plan.run_dir / "logs", plan.recipe.settings.STOP_GRACE_SECONDS, console)
    try:
        child = supervisor.start(plan_mod.Process("export", env, argv))
        rc = supervisor.wait(child)
    finally:
        supervisor.stop_all()
    if rc != 0 or not tmp.is_dir():
        shutil.rmtree(tmp, ignore_errors=True)
        return {"status": "failed", "returncode": rc, "log_tail": list(child.tail), "argv": argv}
    export.replace_dir(tmp, plan.run_dir / "merged")
    return {
        "status": "completed",
        "argv": argv,
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
    plan: Plan, data: dict[str, Any], status: str, failure: dict | None, console: TextIO
) -> dict[str, Any]:
    """Export the newest complete checkpoint and the logs; return the final manifest."""
    run_dir = plan.run_dir
    fields: dict[str, Any] = {"failure": failure}
    newest = export.newest_complete(plan.train_dir)
    exported: dict[str, str] = {}
    if plan.recipe.settings.NODE_RANK != 0:  # only node 0 exports; its checkpoints hold the weights
        done, planned = completed_steps(plan)
        return manifest.finish(
            data, status, **fields, steps={"completed": done, "planned": planned}, exported={}
        )
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
    if (
        plan.recipe.settings.EXPORT_MERGED
        and status == "completed"
        and newest is not None
        and (run_dir / "adapter").exists()
    ):
        fields["merged"] = export_merged(plan, newest, console)
        if fields["merged"]["status"] == "completed":
            exported.update(fields["merged"].pop("files"))
    try:
        exported.update(report.write(plan, run_dir))
    except Exception as exc:  # a report is a convenience: never lose the run over it
        print(f"grpo-rig | warning: could not write the run report: {exc}", file=console)
    fields["exported"] = dict(sorted(exported.items()))
    return manifest.finish(data, status, **fields)
