"""`train`: load, probe, decide, check, supervise, export. The run's whole lifecycle in one place.

Run directory `OUTPUT_DIR/<RUN_NAME>/`:

    manifest.json        status, inputs, versions, hardware, NCCL decisions, exported sha256s
    train/               ms-swift's output_dir: args.json, logging.jsonl, checkpoint-<step>/ ...
    logs/<role>.log      each child's full output; logs/events.jsonl the trainer's phase timings
    data/                generated datasets
    adapter/             the exported LoRA adapter (model/ for full fine-tuning)
    logging.jsonl        a copy of ms-swift's training log
    README.md            how to load the adapter
    run.lock             the PID and command of the command using the directory (runlock.py)
    .space-reserve       1 MiB set aside while the run lives, freed to record its end on a full disk

Starting a run whose directory exists resumes it from its newest complete checkpoint, after checking
that the recipe still trains the same thing (the identity keys of entrypoint/recipe/keys.py). Whatever ends a
run (its children, a full disk, an error in export, a signal at any moment), the manifest records how
(`_run`); a failed run's manifest explains it (supervise/failures.py, deaths.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import psutil

from entrypoint.child import wire
from entrypoint.commands import edge, words
from entrypoint.errors import EXIT_OK, EXIT_RUNTIME_FAILURE, BadInput, Problem, raise_if_fatal
from entrypoint.evaluation import report as eval_report
from entrypoint.facts.facts import MANIFEST, host_path
from entrypoint.plan import build as plan_mod
from entrypoint.plan.build import EVENTS_FILE, Plan
from entrypoint.record import export, manifest, report, runlock
from entrypoint.record.status import Status
from entrypoint.rewards import tasks
from entrypoint.supervise import failures, monitor, nodes, stall, startup
from entrypoint.supervise.console import Console
from entrypoint.supervise.printer import Printer
from entrypoint.supervise.signals import Interrupted, deferred_signals, interruptible
from entrypoint.supervise.supervisor import Child, ChildFailed, Outcome, Stalled, launch, supervised
from entrypoint.world import fingerprint

END_OF_MAIN = "End time of running main"  # ms-swift's last log line (v3.6.4:swift/llm/base.py:50)

NAME = "train"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`train [recipe=NAME] [KEY=VALUE ...]`: the words go to the recipe parser (words.py)."""
    parser = subparsers.add_parser(
        NAME,
        description="Run GRPO for a recipe: load, probe, plan, check, supervise, export. The default "
        "command: `python -m entrypoint recipe=smoke` is `python -m entrypoint train recipe=smoke`.",
        allow_abbrev=False,  # `--he` is a word for the recipe parser, not --help
    )
    return words.take_recipe_words(parser, "[-h] [KEY=VALUE ...]")


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `train` command: the run's exit status (errors.EXIT_*)."""
    return train(words.recipe_words(args.words, environ), environ)


class Steps(NamedTuple):
    """Where the newest complete checkpoint stands (its trainer_state.json)."""

    completed: int  # its global step; 0 without a complete checkpoint
    planned: int | None  # the max_steps it trained toward; None without a complete checkpoint


def completed_steps(plan: Plan) -> Steps:
    """The steps of the newest complete checkpoint in the run's train/ directory."""
    newest = export.newest_complete(plan.train_dir)
    state = export.trainer_state(newest) if newest is not None else None
    if state is None:
        return Steps(0, None)
    return Steps(state.get("global_step", 0), state.get("max_steps"))


def _already_complete(plan: Plan) -> bool:
    """The run directory holds a finished training of this plan (a merged export may still be missing)."""
    previous = plan.facts.previous.manifest
    if not previous or previous.get("status") not in (Status.COMPLETED, Status.EXPORT_FAILED):
        return False
    # max_steps -1 (the epochs decide, ms-swift's default): a training that finished is complete
    return plan.recipe.trainer_args.max_steps <= completed_steps(plan).completed


def train(
    cli_pairs: list[str],
    environ: Mapping[str, str],
    console: TextIO | None = None,
    rerun: Rerun | None = None,
) -> int:
    """Run GRPO for a recipe; returns the process exit status (errors.EXIT_*). `environ` is the process
    environment: read once (host.gather) and inherited by the children. The run directory is locked for the
    whole command (runlock.py); SIGINT/SIGTERM at any moment end it through its cleanup. `rerun`: the values
    of the run this one repeats and its record for the manifest (commands/rerun.py)."""
    printer = Printer(console) if console else Printer()
    with runlock.RunLock() as lock, interruptible():
        plan = edge.make_plan(
            cli_pairs, environ, for_train=True, lock=lock, launches=True, base=rerun.base if rerun else None
        )
        if rerun is not None:
            rerun.check(plan)  # drift named before anything is written (raises BadInput)
        lock.take(node_dir(plan))  # preflight passed, so the directory can be made
        if _already_complete(plan):
            done = completed_steps(plan).completed
            if plan.process("export") and not (plan.run_dir / "merged").is_dir():
                return _export_only(plan, printer, environ, done)
            printer.say(
                f"run {plan.run_name} is already complete ({done} steps) in {plan.run_dir}; nothing changed."
            )
            printer.say(
                "to train further, raise MAX_STEPS for this RUN_NAME, or start a new run with another "
                "RUN_NAME"
            )
            return EXIT_OK
        for line in plan.render().splitlines():
            printer.say(line)
        records = check_nodes(plan, printer)
        return _run(plan, printer, environ, records, rerun.record if rerun else None)


class Rerun(NamedTuple):
    """What `rerun` gives `train`: the earlier run's values (recipe.load's `base`), a check of the plan
    made from them (the drift, raising BadInput), and the record kept as the manifest's `rerun_of`."""

    base: Mapping[str, Any]
    check: Callable[[Plan], None]
    record: dict[str, Any]


def _run(
    plan: Plan,
    printer: Printer,
    environ: Mapping[str, str],
    records: list[dict[str, Any]],
    rerun_of: dict[str, Any] | None = None,
) -> int:
    """Record the run as started, then prepare, supervise and export. Whatever ends it (a child, a full
    disk, an error in export, a signal, a bug here), the manifest says how: never left `running`."""
    here, secrets = node_dir(plan), manifest.secrets_of(plan)
    data = {
        **manifest.start(plan, plan.facts.previous.manifest, rerun_of),
        **({"nodes": records} if records else {}),
    }
    if plan.facts.previous.manifest and (plan.run_dir / "eval.json").is_file():
        where, moved = eval_report.set_aside(plan.run_dir, len(data["attempts"]))
        printer.say(
            f"the evaluation of the adapter before this attempt ({', '.join(moved)}) is kept in "
            f"{host_path(where, plan.facts)}: evaluate again once this attempt ends"
        )
    if (plan.facts.previous.manifest or {}).get("status") == Status.RUNNING:
        printer.say(
            "its previous attempt ended without recording how (its process was killed, or the machine "
            "stopped); resuming from the newest complete checkpoint"
        )
    final: dict[str, Any] | None = None
    code = EXIT_RUNTIME_FAILURE
    oom_before = monitor.oom_kills()
    reserve = _reserve(here)
    try:
        manifest.write(here, data, secrets)
        prepare(plan, printer)
        data["inputs"] = inputs(plan, environ)
        data["attempts"][-1]["inputs"] = {k: v for k, v in data["inputs"].items() if k != "model"}
        _record_for_the_trainer(plan, data["inputs"])
        for line in changed_inputs(data["attempts"]):
            printer.say(f"warning: {line}")
        manifest.write(here, data, secrets)
        outcome, peaks = supervise(plan, here, printer, secrets, environ)
        if not data["inputs"]["model"]["files"]:  # a hub model the trainer has downloaded meanwhile
            data["inputs"]["model"] = model_inputs(plan, environ)
        data.update({"gpu_memory_peak": peaks} if peaks is not None else {})
        data.update({"trainer_exit": outcome.trainer_exit} if outcome.trainer_exit else {})
        data.update({"log_errors": list(outcome.log_errors)} if outcome.log_errors else {})
        final = finish_run(plan, data, outcome, printer, environ, oom_before)
        failed = final["status"] in (Status.FAILED, Status.EXPORT_FAILED)
        code = EXIT_RUNTIME_FAILURE if failed else outcome.code
        if final["status"] == Status.STOPPED and outcome.status != Status.STOPPED:  # stopped in finish_run
            code = 128 + signal.Signals[final["failure"]["signal"]].value
    except Interrupted as exc:  # between the children: preparing, exporting
        name = signal.Signals(exc.signum).name
        printer.say(f"{name} received: the run stops here")
        final, code = (
            manifest.finish(data, Status.STOPPED, failure={"reason": f"{name} received"}),
            128 + exc.signum,
        )
    except OSError as exc:  # our own writes before the export: a full disk, a volume gone read-only
        failure = failures.explained(
            plan, failures.os_failure(plan, exc, None, "preparing the run"), {"exported": {}}, oom_before
        )
        for line in failure["explanation"]:
            printer.say(line)
        final = manifest.finish(data, Status.FAILED, failure=failure)
    finally:
        if final is None:  # an error of the entrypoint itself: recorded, then shown as it is
            final = manifest.finish(
                data, Status.FAILED, failure={"reason": f"the entrypoint failed: {sys.exc_info()[1]!r}"}
            )
        with deferred_signals():  # the last word is written whatever arrives now
            export.release(reserve)
            written = _write_final(here, final, secrets, printer)
    printer.say(
        f"run {final['status']}: {host_path(here, plan.facts)}"
        + ("" if written else " (manifest.json could not be updated)")
    )
    for line in summary_lines(plan):
        printer.say(line)
    return code


def inputs(plan: Plan, environ: Mapping[str, str]) -> dict[str, Any]:
    """The manifest's `inputs`: what every file the trainer reads was (world/fingerprint.py), for `rerun` to
    compare against: the datasets, the validation datasets, the reward plugins (the image's and the recipe's),
    a SYSTEM prompt file, the model's files. Read after `prepare` (a generated dataset exists by then)."""
    return {
        "dataset": fingerprint.dataset_files(plan.dataset_paths),
        **file_inputs(plan),
        "model": model_inputs(plan, environ),
    }


def _record_for_the_trainer(plan: Plan, recorded: dict[str, Any]) -> None:
    """The datasets' sha256 where the trainer's inputs check reads them (GRPO_RIG_INPUTS; its hook compares
    them with the files it loaded: entrypoint/child/hooks/inputs_check.py). Raises OSError."""
    trainer = plan.process("trainer")
    target = trainer.env.get("GRPO_RIG_INPUTS") if trainer is not None else None
    if not target:
        return
    files = [
        {"path": r["path"], "sha256": r["sha256"]}
        for kind in ("dataset", "val_dataset")
        for r in recorded.get(kind, [])
        if r.get("sha256")
    ]
    export.write_json_atomic(Path(target), {"files": files})


def file_inputs(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """The identities of the files beside the datasets that the trainer reads (plan.build.input_files)."""
    return {
        kind: fingerprint.code_files(paths) if kind != "val_dataset" else fingerprint.dataset_files(paths)
        for kind, paths in plan_mod.input_files(plan).items()
    }


def changed_inputs(attempts: list[dict[str, Any]]) -> list[str]:
    """What a resumed attempt reads otherwise than the attempt before it (a dataset, a plugin edited
    meanwhile): its steps train on other rows or rewards than the earlier steps. Said, not refused (the user
    may mean it); the manifest keeps each attempt's inputs and `rerun` names it as drift (both
    manifest.input_changes)."""
    if len(attempts) < 2:
        return []
    since = attempts[-1].get("resume_from") or "the start"
    out = []
    for c in manifest.input_changes(attempts[-2].get("inputs") or {}, attempts[-1].get("inputs") or {}):
        if c.before is None:
            what = "is read since the previous attempt"
        elif c.after is None:
            what = "is no longer read since the previous attempt"
        else:
            what = f"changed since the previous attempt (sha256 {c.before[:12]}... -> {c.after[:12]}...)"
        out.append(f"{c.kind} {c.spec} {what}: the steps from {since} on read what this attempt reads")
    return out


def model_inputs(plan: Plan, environ: Mapping[str, str]) -> dict[str, Any]:
    """{"folder", "files"} of the model the trainer loads; files {} while a hub model is not downloaded
    yet."""
    a = plan.recipe.trainer_args
    folder = fingerprint.model_folder(plan.model_path, a.model or "", a.use_hf, environ)
    try:
        files = fingerprint.model_files(folder) if folder else {}
    except OSError as exc:
        return {"folder": str(folder), "files": {}, "why": f"cannot be read ({exc.strerror or exc})"}
    return {"folder": str(folder) if folder else None, "files": files}


RESERVE_FILE = ".space-reserve"  # freed to record a failure when the disk is full
RESERVE_BYTES = 1024**2  # far more than a final manifest (~20 KB) needs


def _reserve(here: Path) -> Path:
    """Set RESERVE_BYTES aside in the run directory. Raises BadInput when the disk is already full."""
    try:
        return export.reserve(here / RESERVE_FILE, RESERVE_BYTES)
    except OSError as exc:
        free = shutil.disk_usage(here).free / 1024**2 if here.is_dir() else 0.0
        raise BadInput(
            [
                Problem(
                    f"disk under {here}",
                    f"cannot set {RESERVE_BYTES // 1024**2} MiB aside ({exc.strerror}; {free:.1f} MiB free)",
                    "free space on the output volume",
                )
            ]
        ) from None


def _write_final(here: Path, final: dict[str, Any], secrets: list[str], printer: Printer) -> bool:
    """Write the final manifest; False (said on the console) when even that fails."""
    try:
        manifest.write(here, final, secrets)
        return True
    except OSError as exc:
        printer.say(f"cannot write {here / MANIFEST} ({exc.strerror}): it still says the run is running")
        return False


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
        # the first row may be an earlier attempt's, with its own MAX_STEPS: its step alone
        first_step = str(first.get("global_step/max_steps", "?")).split("/")[0]
        lines.append(
            f"reward: {first['reward']:.3f} at step {first_step} -> "
            f"{last['reward']:.3f} at step {last.get('global_step/max_steps', '?')} (training batches; "
            "held-out: evaluate)"
        )
    if plan.recipe.settings.NODE_RANK == 0:
        for name in ("adapter", "model", "merged", "training_curves.png", "README.md", "logs"):
            if (plan.run_dir / name).exists():
                lines.append(f"{name}: {host_path(plan.run_dir / name, plan.facts)}")  # read on the host
        # what the command costs, and that it replaces an evaluation `make smoke` already wrote (new-user
        # walk)
        what = (
            "(the base model and the adapter on 32 held-out prompts, EVAL_PROMPTS; writes eval.* in the run)"
        )
        output = (
            ""
            if plan.recipe.source("OUTPUT_DIR") == "default"
            else f" OUTPUT_DIR={plan.recipe.settings.OUTPUT_DIR}"
        )
        if (plan.run_dir / "adapter").is_dir() and plan.facts.in_container:
            lines.append(f"did it help? docker compose run --rm train evaluate run={plan.run_name}  {what}")
        elif (plan.run_dir / "adapter").is_dir():
            make_args = f' ARGS="{output.strip()}"' if output else ""
            lines.append(
                f"did it help? make eval RUN={plan.run_name}{make_args}  {what}; or {sys.executable} -m "
                f"entrypoint evaluate run={plan.run_name}{output}"
            )
    return lines


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
    if merged["status"] == Status.COMPLETED:
        data["exported"] = dict(sorted({**data.get("exported", {}), **merged.pop("files")}.items()))
        data.update(status=Status.COMPLETED, failure=None)
        manifest.write(here, data, secrets)
        printer.say(f"merged: {plan.run_dir / 'merged'}")
        return EXIT_OK
    data.update(failures.export_failed(merged))
    manifest.write(here, data, secrets)
    printer.say(data["failure"])
    return EXIT_RUNTIME_FAILURE


def node_dir(plan: Plan) -> Path:
    """here_of for this plan's node (`train`)."""
    return edge.here_of(plan.run_dir, plan.recipe.settings.NODE_RANK)


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
                    f"node 0 resumes from {node0.get('resume_from') or 'nothing'}, this node from "
                    f"{plan.resume_from or 'nothing'}",
                    "resuming a run over several nodes needs OUTPUT_DIR on storage every node shares",
                )
            )
        records = []
    raise_if_fatal(problems)
    printer.say(f"node check passed: {s.NNODES} nodes, same lock, image and recipe")
    return records


def prepare(plan: Plan, printer: Printer) -> Path:
    """Create the run directory, set incomplete checkpoints aside, generate the dataset; returns node_dir."""
    here = node_dir(plan)
    here.mkdir(parents=True, exist_ok=True)
    for moved, why in quarantine_incomplete(plan.train_dir):
        printer.say(f"warning: {moved} was an incomplete checkpoint ({why}); moved aside, not resumed from")
    s = plan.recipe.settings
    trainer = plan.process("trainer")
    if trainer is not None and trainer.env.get("GRPO_RIG_EVENTS"):
        # the command's own start, so the start-up table (startup.py) counts from what the user typed
        events = Path(trainer.env["GRPO_RIG_EVENTS"])
        events.parent.mkdir(parents=True, exist_ok=True)
        row = {"t": round(psutil.Process().create_time(), 3), "phase": wire.START, "process": wire.ENTRYPOINT}
        with events.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    if s.DATASET_GENERATOR:
        path = Path(plan.dataset_paths[0])
        if not path.exists():
            seed = plan.recipe.trainer_args.seed
            tasks.write_jsonl(tasks.TASKS[s.DATASET_GENERATOR], path, s.DATASET_ROWS, seed)
            printer.say(f"generated {s.DATASET_ROWS} {s.DATASET_GENERATOR} tasks into {path}")
    return here


class Supervised(NamedTuple):
    """How the children ended, and what the GPU monitor saw."""

    outcome: Outcome
    peaks: dict | None  # per GPU (_peaks); None without NVML


def supervise(
    plan: Plan, here: Path, printer: Printer, secrets: list[str], environ: Mapping[str, str]
) -> Supervised:
    """Launch the planned children (supervise/supervisor.py owns the policy) with the GPU monitor beside
    them."""
    s = plan.recipe.settings
    if printer.shown is None:
        a = plan.recipe.trainer_args
        printer.shown = Console(
            show_all=s.CONSOLE == "all",
            events=here / "logs" / EVENTS_FILE,
            total_steps=a.max_steps,
            stall_seconds=s.STALL_TIMEOUT,
            predicted_step=plan.step_seconds,
            logging_steps=a.logging_steps,
            probe=stall.dir_bytes(plan.train_dir),
            resumed_at=completed_steps(plan).completed if plan.resume_from else 0,
        )
        printer.say(f"the console shows one line per step; everything ms-swift prints is in {here / 'logs'}")
    children = [p for p in plan.processes if p.role in ("rollout", "trainer")]
    gpu_monitor = None
    with supervised(here / "logs", s.STOP_GRACE_SECONDS, printer, secrets, environ) as supervisor:
        if plan.layout.used_gpus and plan.inventory.source == "nvml":
            gpu_monitor = monitor.GpuMonitor(
                list(plan.layout.used_gpus),
                here / "gpu.jsonl",
                s.GPU_MONITOR_INTERVAL,
                plan.train_dir / "logging.jsonl",
                supervisor.pids,
            ).start()
        try:
            outcome = launch(
                children, supervisor, s.ROLLOUT_STARTUP_TIMEOUT, lambda c: training_finished(plan, c)
            )
        finally:
            if gpu_monitor is not None:
                gpu_monitor.stop()
    lost = tuple(
        f"{c.role}: its log stopped being written ({c.log_error})" for c in supervisor.children if c.log_error
    )
    for line in lost:
        printer.say(f"warning: {line}")
    return Supervised(dataclasses.replace(outcome, log_errors=lost), _peaks(plan, gpu_monitor))


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
    state = export.trainer_state(newest) if newest is not None else None
    if not ended or newest is None or state is None:
        return None
    step, planned = state.get("global_step", 0), state.get("max_steps")
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
    # the command's own handlers (train: interruptible) turn a signal into Interrupted here; `supervised`
    # stops the export's process tree and finish_run records the run as stopped
    try:
        with supervised(
            plan.run_dir / "logs",
            plan.recipe.settings.STOP_GRACE_SECONDS,
            printer,
            base_env=environ,
            signals=False,
        ) as supervisor:
            child = supervisor.start(process)
            rc = supervisor.wait(child, _export_watch(plan, tmp, child.log_path))
    except ChildFailed as exc:  # it could not even start (swift missing)
        return {"status": Status.FAILED, "returncode": None, "log_tail": [exc.reason], "argv": process.argv}
    except Stalled as exc:  # stopped by `supervised`; what it wrote goes
        shutil.rmtree(tmp, ignore_errors=True)
        printer.say(f"export {exc}")
        return {
            "status": Status.FAILED,
            "returncode": None,
            "reason": str(exc),
            "argv": process.argv,
            "log_tail": exc.stack or list(child.tail),
        }
    except BaseException:  # a signal or a full disk: no half-merged model stays behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if rc != 0 or not tmp.is_dir():
        shutil.rmtree(tmp, ignore_errors=True)
        return {"status": Status.FAILED, "returncode": rc, "log_tail": list(child.tail), "argv": process.argv}
    export.replace_dir(tmp, plan.run_dir / "merged")
    return {
        "status": Status.COMPLETED,
        "argv": process.argv,
        "files": export.hash_tree(plan.run_dir / "merged", plan.run_dir),
    }


def _export_watch(plan: Plan, output: Path, log: Path) -> Callable[[], str]:
    """The stall watch of the merged export (supervise/stall.py): its signs of progress are its output and
    its log growing (loading the shards, merging, writing the model); STALL_TIMEOUT or the automatic bound."""
    files = stall.dir_bytes(output)
    watch = stall.StallWatch(
        timeout=plan.recipe.settings.STALL_TIMEOUT,
        probe=lambda: (files(), log.stat().st_size if log.exists() else 0),
    )
    watch.arm()

    def stalled() -> str:
        verdict = watch.stalled()
        if verdict is None:
            return ""
        return (
            f"stalled: no output and no log line for {verdict[0]:.0f} s ({verdict[1]}); the stacks of its "
            "threads are in logs/stacks/; raise STALL_TIMEOUT if a merge can truly take this long"
        )

    return stalled


def quarantine_incomplete(train_dir: Path) -> list[tuple[str, str]]:
    """Rename incomplete checkpoint-N dirs to incomplete-checkpoint-N so HF's rotation (save_total_limit)
    never counts them as the newest and deletes the complete one a resume needs. Nothing is deleted.
    Returns (where each went, why it is incomplete: export.incomplete_why)."""
    moved = []
    for ckpt in export.incomplete(train_dir):
        why = export.incomplete_why(ckpt)
        target = ckpt.with_name(f"incomplete-{ckpt.name}")
        n = 1
        while target.exists():
            target = ckpt.with_name(f"incomplete-{ckpt.name}.{n}")
            n += 1
        ckpt.rename(target)
        moved.append((str(target), why))
    return moved


def finish_run(
    plan: Plan,
    data: dict[str, Any],
    outcome: Outcome,
    printer: Printer,
    environ: Mapping[str, str],
    oom_before: int | None = None,
) -> dict[str, Any]:
    """Export the newest complete checkpoint and the logs; return the final manifest. An OSError on the way
    (a full disk) makes the run `failed`, saying where and how much is free; the previous export stays whole
    (export.py). A failed run's manifest explains it (failures.explained)."""
    run_dir, status, failure = plan.run_dir, outcome.status, outcome.failure
    steps = completed_steps(plan)
    fields: dict[str, Any] = {
        "steps": {"completed": steps.completed, "planned": steps.planned},
        "exported": {},
    }
    exported: dict[str, str] = {}
    try:
        if plan.recipe.settings.NODE_RANK == 0:  # only node 0 exports; its checkpoints hold the weights
            exported.update(_export_run(plan, fields))
        if (
            plan.process("export")
            and status == Status.COMPLETED
            and "checkpoint" in fields
            and (run_dir / "adapter").exists()
        ):
            fields["merged"] = export_merged(plan, run_dir / fields["checkpoint"], printer, environ)
            if fields["merged"]["status"] == Status.COMPLETED:
                exported.update(fields["merged"].pop("files"))
            else:
                status, failure = Status.EXPORT_FAILED, failures.export_failed(fields["merged"])["failure"]
                printer.say(failure)
    except OSError as exc:
        status, failure = Status.FAILED, failures.os_failure(plan, exc, failure, "exporting the run")
    except Interrupted as exc:  # during the merged export: what was exported stays recorded
        name = signal.Signals(exc.signum).name
        printer.say(f"{name} received during the merged export: the run stops here")
        reason = f"{name} received during the merged export"
        status, failure = Status.STOPPED, {"reason": reason, "signal": name}
    if plan.recipe.settings.NODE_RANK == 0:
        try:
            exported.update(report.write(plan, run_dir, outcome.status))  # the training's, not the export's
        except Exception as exc:  # a report is a convenience: never lose the run over it
            printer.say(f"warning: could not write the run report: {exc}")
    fields["exported"] = dict(sorted(exported.items()))
    if status == Status.FAILED:
        failure = failures.explained(plan, failure or {}, fields, oom_before)
        for line in failure["explanation"]:
            printer.say(line)
    return manifest.finish(data, status, failure=failure, **fields)


def _export_run(plan: Plan, fields: dict[str, Any]) -> dict[str, str]:
    """The newest complete checkpoint into adapter/ (or model/), a copy of logging.jsonl, the start-up
    marks; returns {path: sha256} and sets fields["checkpoint"], fields["startup_s"]. Raises OSError."""
    run_dir, exported = plan.run_dir, {}
    newest = export.newest_complete(plan.train_dir)
    if newest is not None:  # named before its export, which a full disk may stop
        fields["checkpoint"] = str(newest.relative_to(run_dir))
        model = plan.recipe.raw("MODEL") or plan.model_path
        exported.update(export.export_checkpoint(newest, run_dir, model))
    log = plan.train_dir / "logging.jsonl"
    if log.exists():
        export.copy_atomic(log, run_dir / "logging.jsonl")
        exported["logging.jsonl"] = export.sha256_file(run_dir / "logging.jsonl")
    trainer = plan.process("trainer")
    if trainer is not None and Path(trainer.env.get("GRPO_RIG_EVENTS", "")).is_file():
        fields["startup_s"] = startup.marks(startup.read_events(Path(trainer.env["GRPO_RIG_EVENTS"])))
    return exported
