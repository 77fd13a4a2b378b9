"""`rerun run=NAME|PATH [KEY=VALUE ...] [--plan] [--json] [--accept-drift]`: repeat a run from its manifest.

The run's recorded values (record/rerun.py says which are taken back and which are planned again), its
seed and its dataset, into a new run directory `<RUN_NAME>-rerun-<UTC time>` beside it (RUN_NAME=... and
OUTPUT_DIR=... choose another). KEY=VALUE words override as on `train` and are recorded as overrides.
Before anything starts, the drift is named: a dataset, lock, package version or model file that differs
from the run's is refused (exit 2) unless `--accept-drift`, and then kept in the new manifest's `rerun_of`.
`--plan` prints what would run and starts nothing (`--json`: as JSON). A run directory copied from another
machine is rerun here: its plan is made for this machine's GPUs.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from entrypoint import redact
from entrypoint.commands import edge, train, words
from entrypoint.errors import EXIT_BAD_INPUT, EXIT_OK, BadInput, Problem
from entrypoint.facts.facts import MANIFEST
from entrypoint.plan.build import Plan
from entrypoint.recipe import load as recipe_mod
from entrypoint.recipe.settings import Settings
from entrypoint.record import export, manifest, runlock
from entrypoint.record import rerun as rerun_mod
from entrypoint.rewards import tasks
from entrypoint.world import fingerprint

NAME = "rerun"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`rerun [--plan] [--json] [--accept-drift] run=NAME|PATH [KEY=VALUE ...]`."""
    parser = subparsers.add_parser(
        NAME,
        description="Repeat a run from its manifest: the same values, seed, dataset and model, into a new "
        "run directory; any drift (dataset, lock, versions, model files) is named before anything starts.",
        allow_abbrev=False,
    )
    parser.add_argument("--plan", action="store_true", help="print what would run; start nothing")
    parser.add_argument("--json", action="store_true", help="with --plan: print it as JSON")
    parser.add_argument(
        "--accept-drift",
        action="store_true",
        help="run even where the dataset, the lock, a package version or the model's files differ from the "
        "run's (recorded in the new manifest)",
    )
    return words.take_words(
        parser,
        "[-h] [--plan] [--json] [--accept-drift] run=NAME|PATH [KEY=VALUE ...]",
        "run=NAME|PATH: a RUN_NAME under OUTPUT_DIR, `latest`, or a run directory's path (one holding "
        "manifest.json, copied from another machine or not); KEY=VALUE: overrides, as on `train`.",
    )


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `rerun` command: the new run's exit status, or (with --plan) 0, or BadInput (exit 2)."""
    words_, run = _run_word(args.words)
    cli, problems = recipe_mod.parse_cli_pairs(words_)
    if problems:
        raise BadInput(problems)
    output_dir = cli["OUTPUT_DIR"].value if "OUTPUT_DIR" in cli else environ.get("OUTPUT_DIR", "")
    run_dir = manifest.find_run(run, output_dir or str(Settings.model_fields["OUTPUT_DIR"].default))
    training = _still_training(run_dir)
    if training is not None and not args.plan:
        raise BadInput([training])
    data = _manifest(run_dir)
    rec = rerun_mod.recorded(data, str(run_dir / MANIFEST))
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    placed = [] if "RUN_NAME" in cli else [f"RUN_NAME={data.get('run_name') or run_dir.name}-rerun-{now}"]
    placed += [] if "OUTPUT_DIR" in cli else [f"OUTPUT_DIR={run_dir.resolve().parent}"]
    _not_the_run_itself(cli, run_dir)
    record = {
        "run_name": data.get("run_name"),
        "path": str(run_dir.resolve()),
        "manifest_sha256": export.sha256_file(run_dir / MANIFEST),
        "status": data.get("status"),
        "overrides": redact.env({k: v.value for k, v in cli.items()}),  # shown on the console: no secret
        "secrets_from_environment": rec.secrets,
    }
    checker = Checker(data, rec, record, environ, args.accept_drift, show=not args.plan)
    pairs = [*words_, *placed]
    if args.plan:
        return _plan_only(pairs, environ, checker, args.json, [training] if training else [])
    return train.train(pairs, environ, rerun=train.Rerun(rec.values, checker, record))


def _run_word(all_words: list[str]) -> tuple[list[str], str]:
    """(the other words, the run) from the words; raises BadInput without run=..."""
    runs = [w for w in all_words if w.lower().startswith("run=")]
    if len(runs) != 1 or not runs[0].partition("=")[2]:
        raise BadInput(
            [
                Problem(
                    "RUN",
                    "no run named" if not runs else "named more than once",
                    "add one run=<RUN_NAME> (under OUTPUT_DIR), run=latest, or run=<path of a run directory>",
                )
            ]
        )
    return [w for w in all_words if w is not runs[0]], runs[0].partition("=")[2]


def _not_the_run_itself(cli: dict[str, recipe_mod.Value], run_dir: Path) -> None:
    """A RUN_NAME (and OUTPUT_DIR) naming the run being repeated would resume it, not repeat it; one naming
    another existing run directory would resume that one with this run's values, replace its adapter and
    call it a rerun: both refused. A rerun writes a directory of its own."""
    if "RUN_NAME" not in cli:
        return
    out = Path(cli["OUTPUT_DIR"].value).expanduser() if "OUTPUT_DIR" in cli else run_dir.resolve().parent
    target = out / cli["RUN_NAME"].value
    if target.resolve() == run_dir.resolve():
        raise BadInput(
            [
                Problem(
                    f"RUN_NAME={cli['RUN_NAME'].value}",
                    f"names the run being repeated ({run_dir}): it would resume that run, not repeat it",
                    "give the rerun another RUN_NAME; to continue the run itself, start `train` with its "
                    "RUN_NAME and recipe again",
                )
            ]
        )
    if target.exists():
        raise BadInput(
            [
                Problem(
                    f"RUN_NAME={cli['RUN_NAME'].value}",
                    f"names an existing run directory ({target}): a "
                    "rerun would resume it with this run's values and replace what it exported",
                    "give the rerun a RUN_NAME no run has (or leave RUN_NAME out: <run>-rerun-<time>)",
                )
            ]
        )


def _still_training(run_dir: Path) -> Problem | None:
    """A run whose lock a live training holds (runlock.held_by) has no finished attempt to repeat yet: its
    manifest says `running` and changes under the rerun. An evaluation holding it is no obstacle."""
    holder = runlock.held_by(run_dir)
    if holder is None or runlock.evaluating(holder):
        return None
    pid = holder.get("pid") or "?"
    return Problem(
        f"run {run_dir.name}",
        f"is still training (PID {pid} since {holder.get('started_at', '?')}, "
        f"{holder.get('command', 'a process still starting')})",
        f"wait for it or stop it (kill -TERM {pid}: it exports its newest checkpoint and records the run "
        "as stopped); a rerun reads a finished attempt's manifest",
    )


def _manifest(run_dir: Path) -> dict[str, Any]:
    """The run's manifest, refused when it cannot be rerun from (raises BadInput)."""
    try:
        data = manifest.read(run_dir)
    except manifest.Unreadable as exc:
        data, why = None, str(exc)
    except ValueError as exc:
        data, why = None, f"is not JSON ({exc})"
    except OSError as exc:
        data, why = None, f"cannot be read ({exc.strerror or exc})"
    else:
        why = "records no resolved recipe" if data is not None and not data.get("resolved_recipe") else ""
    if data is None or why:
        raise BadInput(
            [
                Problem(
                    f"run {run_dir}",
                    f"its {MANIFEST} {why or 'is missing'}",
                    "rerun a run directory written by `train` (its manifest.json whole)",
                )
            ]
        )
    return data


class Checker:
    """The drift check `train` runs on the plan made from the recorded values, before it writes anything;
    keeps what it found in `record` (the new manifest's rerun_of)."""

    def __init__(
        self,
        data: dict[str, Any],
        rec: rerun_mod.Recorded,
        record: dict[str, Any],
        environ: Mapping[str, str],
        accept: bool,
        show: bool = True,
    ) -> None:
        self.data, self.rec, self.record, self.environ, self.accept = data, rec, record, environ, accept
        self.show = show  # print the notices (train); --plan prints them with the plan
        self.found: list[Problem] = []
        self.argv_changes: list[str] = []

    def __call__(self, plan: Plan) -> None:
        """Raises BadInput naming the drift, unless accepted; the notices go to stderr."""
        self.found = self.problems(plan)
        drift = [p for p in self.found if p.fatal]
        self.record.update(
            drift=[p.render() for p in drift],
            drift_accepted=bool(drift) and self.accept,
            argv_changes=self.argv_changes,
        )
        if drift and not self.accept:  # each drift's fix names --accept-drift
            raise BadInput(self.found)
        if not self.show:
            return
        print(
            f"rerun of {self.record['run_name']} ({self.record['path']}); overrides: "
            f"{_overrides(self.record)}; {'drift accepted' if drift else 'no drift'}",
            file=sys.stderr,
        )
        for problem in rerun_mod.accepted(self.found):
            print(problem.render(), file=sys.stderr)

    def problems(self, plan: Plan) -> list[Problem]:
        """The drift and the notices for `plan`: reads the datasets, the model's files, the versions."""
        a = plan.recipe.trainer_args
        folder = fingerprint.model_folder(plan.model_path, a.model or "", a.use_hf, self.environ)
        files = train.file_inputs(plan)
        now = rerun_mod.Now(
            versions=manifest.package_versions(),
            lock_sha256=manifest.image_identity(self.environ)["lock_sha256"],
            datasets=self._datasets(plan),
            files=files,
            model_files=fingerprint.model_files(folder) if folder else {},
            gpus=[g.name for g in plan.inventory.gpus],
        )
        trainer = plan.process("trainer")
        old = next((p["argv"] for p in self.data.get("processes", []) if p.get("role") == "trainer"), [])
        if trainer is not None and old:
            self.argv_changes = rerun_mod.argv_changes(
                old, trainer, rerun_mod.recorded_run_dir(old), str(plan.run_dir)
            )
        found = rerun_mod.drift(self.data, now)
        return found + rerun_mod.replanned_changes(self.rec.replanned, plan.recipe.values)

    def _datasets(self, plan: Plan) -> list[dict[str, Any]]:
        """The identity of the rows the rerun would train on: a generated dataset is generated (seeded, as
        `train` will) into a scratch folder and hashed."""
        s = plan.recipe.settings
        if not s.DATASET_GENERATOR:
            return fingerprint.dataset_files(plan.dataset_paths)
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / f"{s.DATASET_GENERATOR}.jsonl"
            tasks.write_jsonl(
                tasks.TASKS[s.DATASET_GENERATOR], path, s.DATASET_ROWS, plan.recipe.trainer_args.seed
            )
            found = fingerprint.dataset_files([str(path)])
        return [{**f, "spec": plan.dataset_paths[0], "path": plan.dataset_paths[0]} for f in found]


def _overrides(record: Mapping[str, Any]) -> str:
    """The rerun's KEY=VALUE overrides as the console shows them ("none" without any)."""
    return ", ".join(f"{k}={v}" for k, v in record["overrides"].items()) or "none"


def _plan_only(
    pairs: list[str], environ: Mapping[str, str], checker: Checker, as_json: bool, notes: list[Problem]
) -> int:
    """--plan: the plan made from the recorded values, the drift and the argv changes; 2 when the drift is
    not accepted. `notes`: said first (a run still training: the plan is shown, a rerun would be refused)."""
    plan = edge.make_plan(pairs, environ, for_train=False, base=checker.rec.values, probe_plugins=False)
    try:
        checker(plan)
        code = EXIT_OK
    except BadInput as exc:
        code, checker.found = EXIT_BAD_INPUT, exc.problems
    checker.found = [
        dataclasses.replace(
            n,
            fatal=False,
            message=f"{n.message}: this plan is made from its "
            "manifest as it stands now, and a rerun is refused until it ends",
        )
        for n in notes
    ] + checker.found
    if as_json:
        shown = {
            "rerun_of": checker.record,
            "problems": [p.render() for p in checker.found],
            "resolved_recipe": plan.recipe.resolved(),
            "plan": plan.to_json(),
        }
        print(json.dumps(redact.deep(shown, manifest.secrets_of(plan)), indent=2))  # as the manifest keeps it
        return code
    print(
        f"rerun of {checker.record['run_name']} ({checker.record['path']}): {len(checker.rec.values)} values "
        f"as recorded, {len(checker.rec.replanned)} planned again for this machine"
    )
    print(f"overrides: {_overrides(checker.record)}")
    changes = checker.argv_changes
    print(
        "trainer argv: "
        + ("the run's, output paths aside" if not changes else "differs: " + "; ".join(changes))
    )
    for problem in checker.found:
        print(problem.render())
    print(plan.render())
    return code
