"""`rerun`: a run rebuilt from its manifest, and what differs from the run it repeats.

The manifest keeps every resolved value with the layer that set it (`resolved_recipe`), the seed, the
versions, the lock's sha256, the machine and the inputs' identities (`inputs`, world/fingerprint.py). A rerun
takes the values back as they were, with their original sources (recipe.load's `base`), except:

- the values the planner chose (Origin.PLANNER): planned again for this machine, and any that come out
  different are reported;
- RUN_NAME and OUTPUT_DIR: a rerun writes a new run directory beside the one it repeats;
- secrets, which the manifest keeps redacted: taken from this environment when it has them.

Then the drift: what would make the rerun a different experiment. A file the trainer read whose sha256 differs
(a dataset, a validation dataset, a reward plugin, a SYSTEM prompt file), another lock (image or venv),
another version of a pinned package, model files that differ, values or inputs that changed between the run's
attempts (a rerun trains every step with one set), a manifest whose values were edited after the run: each
refused (exit 2) unless the user accepts it (`--accept-drift`), and then recorded. Another machine is not
drift: its plan is made for this machine and the differences are reported.

Pure: the command (commands/rerun.py) reads the world and passes what it found.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any, NamedTuple

from entrypoint import redact
from entrypoint.errors import Problem
from entrypoint.plan.build import Flag, Process
from entrypoint.recipe import keys
from entrypoint.recipe.load import DEFAULTS_FILE, Origin, Value
from entrypoint.record.manifest import input_changes, resolved_values, values_sha256

NOT_REPEATED = ("RUN_NAME", "OUTPUT_DIR")  # a rerun writes its own directory
# the files beside the datasets a run records (plan.build.input_files), in the words a user reads
INPUT_KINDS = {
    "dataset": "dataset",
    "val_dataset": "VAL_DATASET",
    "plugins": "reward plugin",
    "system": "SYSTEM file",
}
# the values whose change between attempts trains some steps otherwise than others (MAX_STEPS: the learning
# rate's schedule is computed from it)
ATTEMPT_VALUES = ("MAX_STEPS", "NUM_TRAIN_EPOCHS", *keys.RESUME_RESTORED, *keys.RESUME_CHANGES)
# the packages whose version changes what trains (manifest.PACKAGES less the tools that do not)
PINNED = ("ms-swift", "vllm", "torch", "transformers", "trl", "peft", "deepspeed", "accelerate", "datasets")
ACCEPT_FLAG = "--accept-drift"


class Recorded(NamedTuple):
    """What a rerun takes from the manifest."""

    values: dict[str, Value]  # recipe.load's base
    replanned: dict[str, str]  # planner-chosen KEY -> the value it had, planned again here
    secrets: list[str]  # keys kept redacted, taken from this environment


def edited(data: Mapping[str, Any]) -> bool:
    """Whether the manifest's values differ from what the run wrote (a manifest without the digest: False)."""
    digest = data.get("values_sha256")
    return bool(digest) and digest != values_sha256(data.get("resolved_recipe") or {})


def recorded(data: Mapping[str, Any], where: str = "the run's manifest") -> Recorded:
    """The values of the manifest `data` a rerun starts from (this module's docstring says which are left
    out). A manifest edited after the run gives its values `where` as their source, not the layers it
    names."""
    values: dict[str, Value] = {}
    replanned: dict[str, str] = {}
    secrets: list[str] = []
    by_hand = edited(data)
    for key, item in sorted(resolved_values(data).items()):  # a secret: "<redacted>" in place of its item
        text = str(item["value"])
        value = (
            Value(text, Origin.MANIFEST, f"{where} (edited after the run)")
            if by_hand
            else recorded_value(text, str(item["source"]))
        )
        if value.origin is Origin.PLANNER:
            replanned[key] = text
        elif redact.REDACTED in text:
            secrets.append(key)
        elif key not in NOT_REPEATED:
            values[key] = value
    return Recorded(values, replanned, secrets)


def recorded_value(value: str, source: str) -> Value:
    """A manifest's value with the origin its "source" text names (recipe.load's Value.source wrote it, and
    manifests written before Value had an origin hold the same words): "environment", "command line",
    "planner" or "planner: <reason>", a line of recipes/defaults.env, else a line of the recipe file."""
    if source in (Origin.ENVIRONMENT.value, Origin.COMMAND_LINE.value):
        return Value(value, Origin(source))
    head, _, reason = source.partition(": ")
    if head == Origin.PLANNER.value:
        return Value(value, Origin.PLANNER, reason)
    if source.startswith(f"recipes/{DEFAULTS_FILE}"):
        return Value(value, Origin.DEFAULTS_FILE, source)
    return Value(value, Origin.RECIPE_FILE, source)


class Now(NamedTuple):
    """What this machine has, read by the command."""

    versions: Mapping[str, str | None]  # manifest.package_versions()
    lock_sha256: str | None  # manifest.image_identity()["lock_sha256"]
    datasets: list[dict[str, Any]]  # fingerprint.dataset_files of the datasets the rerun would read
    files: Mapping[str, list[dict[str, Any]]]  # the other input files by kind (INPUT_KINDS), fingerprinted
    model_files: Mapping[str, str]  # fingerprint.model_files of the model folder; {} before a download
    gpus: list[str]  # the GPU names the plan is made for


def _short(digest: object) -> str:
    return str(digest)[:12] if digest else "none"


def drift(data: Mapping[str, Any], now: Now) -> list[Problem]:
    """Each difference between the run `data` (its manifest) and `now` that makes a rerun another experiment,
    fatal (the caller softens them when the user accepts them); and, not fatal, what cannot be compared."""
    inputs = data.get("inputs") or {}
    return (
        _edited(data)
        + _versions(data, now)
        + _datasets(inputs, now)
        + [
            p
            for kind in INPUT_KINDS
            if kind != "dataset"
            for p in _files(inputs, kind, now.files.get(kind, []))
        ]
        + _model(inputs, now)
        + _attempts(data)
        + _machine(data, now)
    )


def _edited(data: Mapping[str, Any]) -> list[Problem]:
    if edited(data):
        return [
            Problem(
                "manifest.json",
                "its values were edited after the run (their digest, values_sha256, "
                "differs): the rerun would not repeat what ran",
                f"restore the manifest and give changes as KEY=VALUE overrides (recorded), or {ACCEPT_FLAG}",
            )
        ]
    return []


def _files(inputs: Mapping[str, Any], kind: str, now: list[dict[str, Any]]) -> list[Problem]:
    """A recorded kind of input file (plugins, SYSTEM file, VAL_DATASET) against what the rerun would read."""
    then = inputs.get(kind)
    if then is None:
        return (
            []
            if not now
            else [
                Problem(
                    INPUT_KINDS[kind],
                    "the run's manifest records no sha256 of these files: not verified",
                    fatal=False,
                )
            ]
        )
    out = []
    for i in range(max(len(then), len(now))):
        old = then[i] if i < len(then) else {"spec": "(none)", "sha256": None}
        new = now[i] if i < len(now) else {"spec": "(none)", "sha256": None, "why": "not given"}
        where = f"{INPUT_KINDS[kind]} {old.get('spec') if old.get('spec') != '(none)' else new.get('spec')}"
        if old.get("sha256") == new.get("sha256") and old.get("sha256"):
            continue
        if not old.get("sha256") and old.get("spec") != "(none)":
            out.append(Problem(where, f"not verified: {old.get('why') or 'no sha256 recorded'}", fatal=False))
            continue
        got = f"sha256 {_short(new['sha256'])}..." if new.get("sha256") else (new.get("why") or "missing")
        had = f"sha256 {_short(old['sha256'])}..." if old.get("sha256") else "not read"
        out.append(
            Problem(
                where,
                f"{had} in the run, {got} here: not what the run read",
                f"give the run's file (sha256 {old.get('sha256') or 'none'}), or {ACCEPT_FLAG}",
            )
        )
    return out


def _attempts(data: Mapping[str, Any]) -> list[Problem]:
    """Values (ATTEMPT_VALUES) or input files that changed between the run's attempts: its steps did not all
    train alike, and a rerun trains every step with the last attempt's."""
    attempts = [a for a in data.get("attempts") or [] if isinstance(a, Mapping)]
    out = []
    for before, after in zip(attempts, attempts[1:], strict=False):
        old, new = before.get("values") or {}, after.get("values") or {}
        changed = [
            f"{k} {old.get(k, '(default)')} -> {new.get(k, '(default)')}"
            for k in ATTEMPT_VALUES
            if k in old.keys() | new.keys() and old.get(k) != new.get(k)
        ]
        kinds = dict.fromkeys(
            c.kind for c in input_changes(before.get("inputs") or {}, after.get("inputs") or {})
        )
        changed += [f"{INPUT_KINDS.get(k, k)} changed" for k in kinds]
        if changed:
            since = after.get("resume_from") or "the start"
            out.append(
                Problem(
                    f"attempt {attempts.index(after) + 1}",
                    f"resumed from {since} with {'; '.join(changed)}: "
                    "the run's steps did not all train alike, and a rerun trains every step with the "
                    "last attempt's values and files",
                    f"rerun knowing it differs ({ACCEPT_FLAG}), or set the values you want as overrides "
                    f"and {ACCEPT_FLAG}",
                )
            )
    return out


def _versions(data: Mapping[str, Any], now: Now) -> list[Problem]:
    out = []
    then = data.get("versions") or {}
    for name in PINNED:
        if name in then and then[name] != now.versions.get(name):
            out.append(
                Problem(
                    f"version of {name}",
                    f"{then[name]} in the run, {now.versions.get(name)} here",
                    f"rerun where the run's lock is installed (the image or `make venv`), or {ACCEPT_FLAG}",
                )
            )
    lock = (data.get("image") or {}).get("lock_sha256")
    if lock and now.lock_sha256 and lock != now.lock_sha256:
        out.append(
            Problem(
                "requirements/runtime.lock",
                f"sha256 {_short(lock)}... in the run, {_short(now.lock_sha256)}... here",
                f"rerun with the run's lock (the image or checkout it ran from), or {ACCEPT_FLAG}",
            )
        )
    return out


def _datasets(inputs: Mapping[str, Any], now: Now) -> list[Problem]:
    then = inputs.get("dataset")
    if then is None:
        return [
            Problem(
                "dataset",
                "the run's manifest records no sha256 of its dataset: the rerun cannot verify "
                "it reads the same rows",
                fatal=False,
            )
        ]
    out = []
    for i, old in enumerate(then):
        new = now.datasets[i] if i < len(now.datasets) else {"spec": "(none)", "sha256": None}
        where = f"dataset {old.get('spec') or new.get('spec')}"
        if not old.get("sha256"):
            out.append(Problem(where, f"not verified: {old.get('why') or 'no sha256 recorded'}", fatal=False))
        elif new.get("sha256") != old["sha256"]:
            got = f"sha256 {_short(new['sha256'])}..." if new.get("sha256") else (new.get("why") or "missing")
            out.append(
                Problem(
                    where,
                    f"sha256 {_short(old['sha256'])}... in the run ({old.get('bytes')} bytes), "
                    f"{got} here ({new.get('bytes')} bytes): not the rows the run trained on",
                    f"give the run's file (DATASET=<path>, sha256 {old['sha256']}), or {ACCEPT_FLAG}",
                )
            )
    return out


def _model(inputs: Mapping[str, Any], now: Now) -> list[Problem]:
    then = (inputs.get("model") or {}).get("files") or {}
    if not then:
        return [
            Problem(
                "model",
                "the run's manifest records no hashes of the model's files: not verified",
                fatal=False,
            )
        ]
    if not now.model_files:
        return [
            Problem(
                "model",
                "not on this machine yet (ms-swift downloads it): its files are compared in the "
                "new run's manifest, not before",
                fatal=False,
            )
        ]
    changed = sorted(n for n in then.keys() & now.model_files.keys() if then[n] != now.model_files[n])
    missing, added = (
        sorted(then.keys() - now.model_files.keys()),
        sorted(now.model_files.keys() - then.keys()),
    )
    if not (changed or missing or added):
        return []
    parts = [
        f"{what}: {', '.join(names[:4])}"
        for what, names in (("changed", changed), ("missing here", missing), ("new here", added))
        if names
    ]
    return [
        Problem(
            "model",
            f"its files differ from the run's ({'; '.join(parts)})",
            f"give the run's model (MODEL=<folder or hub id at the run's revision>), or {ACCEPT_FLAG}",
        )
    ]


def _machine(data: Mapping[str, Any], now: Now) -> list[Problem]:
    then = [g.get("name", "?") for g in (data.get("inventory") or {}).get("gpus", [])]
    if then == now.gpus:
        return []
    described = ", ".join(then) or "no GPU"
    return [
        Problem(
            "machine",
            f"the run had {described}; planned for this machine's {', '.join(now.gpus) or 'no GPU'}",
            fatal=False,
        )
    ]


def accepted(problems: list[Problem]) -> list[Problem]:
    """The drift as warnings: what `--accept-drift` turns it into."""
    return [Problem(p.where, p.message, p.fix, fatal=False) for p in problems]


def replanned_changes(replanned: Mapping[str, str], values: Mapping[str, Value]) -> list[Problem]:
    """The planner's choices that differ from the run's (another machine, another free memory), as notices."""
    out = []
    for key, old in sorted(replanned.items()):
        new = values.get(key)
        if new is None or new.value != old:
            out.append(
                Problem(
                    key,
                    f"{old} in the run, {new.value if new else 'unset'} as planned here"
                    + (f" ({new.source})" if new else ""),
                    fatal=False,
                )
            )
    return out


def argv_changes(old: list[str], new: Process, old_run: str, new_run: str) -> list[str]:
    """The flags of the trainer's command line that differ between the run (`old`: its manifest's argv) and
    its rerun (`new`: the planned process, its flags typed), "--max_steps 3 -> --max_steps 1", with each run
    directory and --run_name written `<run>` (the output paths and names differ by design) and the run's own
    resume flags left out (a rerun starts from step 0). [] when they are the same."""
    a, b = _lines(*recorded_flags(old), old_run), _lines(new.command, new.flags, new_run)
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op != "equal":
            out.append(f"{' '.join(a[i1:i2]) or '(nothing)'} -> {' '.join(b[j1:j2]) or '(nothing)'}")
    return out


RESUME_FLAGS = ("resume_from_checkpoint", "resume_only_model")


def recorded_flags(argv: list[str]) -> tuple[tuple[str, ...], list[Flag]]:
    """A manifest's argv (the only form a manifest keeps of a command) as the program's words and its flags:
    the one place a recorded command line is read back."""
    command: list[str] = []
    found: list[Flag] = []
    for word in argv:
        if word.startswith("--"):
            found.append(Flag(word[2:]))
        elif found:
            found[-1] = Flag(found[-1].name, (*found[-1].values, word))
        else:
            command.append(word)
    return tuple(command), found


def recorded_run_dir(argv: list[str]) -> str:
    """The run directory a manifest's trainer argv writes in (its --output_dir is <run>/train); "\0", which
    matches no word, without one."""
    output_dir = next(
        (f.values for f in recorded_flags(argv)[1] if f.name == "output_dir" and f.values), None
    )
    return str(PurePath(output_dir[0]).parent) if output_dir else "\0"


def _lines(command: Sequence[str], flags: Sequence[Flag], run_dir: str) -> list[str]:
    """A command line as one string per flag with its values ("--reward_funcs countdown format"), the program
    first, secrets redacted, the run directory written `<run>`."""
    out = [" ".join(w.replace(run_dir, "<run>") for w in command)] if command else []
    for f in flags:
        if f.name in RESUME_FLAGS:
            continue
        words = redact.argv(f.words())
        out.append(
            "--run_name <run>"
            if f.name == "run_name"
            else " ".join(w.replace(run_dir, "<run>") for w in words)
        )
    return out
