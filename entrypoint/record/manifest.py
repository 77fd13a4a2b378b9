"""The run manifest (`<run>/manifest.json`): what ran, on what, with which inputs, and how it ended.

Written at start (`status: running`), rewritten atomically at the end (`completed`, `stopped` or
`failed`). Secrets are redacted before anything is written (`redact.py`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from entrypoint import redact
from entrypoint.errors import BadInput, Problem
from entrypoint.facts import facts as facts_mod
from entrypoint.facts.facts import MANIFEST
from entrypoint.recipe.load import PROJECT_DIR
from entrypoint.record.export import write_json_atomic
from entrypoint.record.status import Status

if TYPE_CHECKING:
    from entrypoint.plan.build import Plan

SCHEMA_VERSION = 1
LOCK_FILE = PROJECT_DIR / "requirements" / "runtime.lock"
PACKAGES = (
    "grpo-rig", "ms-swift", "vllm", "torch", "transformers", "trl", "peft", "deepspeed",
    "accelerate", "datasets", "math-verify", "nvidia-ml-py",
)  # fmt: skip


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def lock_sha256() -> str | None:
    try:
        return hashlib.sha256(LOCK_FILE.read_bytes()).hexdigest()
    except OSError:
        return None


def image_identity(env: Mapping[str, str]) -> dict[str, str | None]:
    """Set by the Dockerfile (ARG -> ENV; facts.Facts.env); None outside the image."""
    return {
        "version": env.get("GRPO_RIG_VERSION"),
        "revision": env.get("GRPO_RIG_REVISION"),
        "lock_sha256": env.get("GRPO_RIG_LOCK_SHA256") or lock_sha256(),
    }


def secrets_of(plan: Plan) -> list[str]:
    """Secret values to scrub: the environment's (facts.Facts) and the recipe's."""
    return list(plan.facts.secret_values) + redact.values_of(
        {k: v.value for k, v in plan.recipe.values.items()}
    )


def start(
    plan: Plan, previous: dict[str, Any] | None, rerun_of: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The manifest of a run that is starting (or resuming: earlier attempts are kept). `rerun_of`: the run
    this one repeats (`rerun`, record/rerun.py), kept from the first attempt on."""
    rerun_of = rerun_of or (previous or {}).get("rerun_of")
    secrets = secrets_of(plan)
    attempts = [dict(a) for a in previous.get("attempts", [])] if previous else []
    for attempt in attempts:  # an attempt that never recorded its end: its process was killed
        attempt.setdefault("status", Status.UNRECORDED)
    if attempts and previous and previous.get("evaluation"):  # it judged the adapter that attempt left
        attempts[-1].setdefault("evaluation", previous["evaluation"])
    # each attempt keeps every value it ran with (a resume may change keys.RESUME_CHANGES, and RESUME_RESTORED
    # with RESUME_ONLY_MODEL); resolved_recipe below is the last attempt's, with the layer of each value
    attempts.append(
        {
            "started_at": now_iso(),
            "resume_from": plan.resume_from or None,
            "values": {k: v.value for k, v in sorted(plan.recipe.values.items())},
        }
    )
    data = {
        "schema": SCHEMA_VERSION,
        "status": Status.RUNNING,
        "run_name": plan.run_name,
        "recipe": plan.recipe.name,
        "identity": plan.recipe.identity(),
        "resolved_recipe": plan.recipe.resolved(),
        "seed": plan.recipe.trainer_args.seed,
        "model": {
            "id": plan.recipe.trainer_args.model,
            "source": plan.recipe.settings.MODEL_SOURCE,
            "path": plan.model_path,
        },
        "dataset": plan.dataset_paths,
        "versions": package_versions(),
        "image": image_identity(plan.facts.env),
        "inventory": plan.inventory.model_dump(),
        "layout": plan.to_json()["layout"],
        "nccl": [
            {"variable": d.variable, "value": d.value, "reason": d.reason, "set_by": d.set_by}
            for d in plan.nccl.decisions
        ],
        "processes": [p.to_json() for p in plan.processes],
        "started_at": attempts[0]["started_at"] if previous is None else previous.get("started_at"),
        "attempts": attempts,
        "ended_at": None,
        **({"rerun_of": rerun_of} if rerun_of else {}),
    }
    data = redact.deep(data, secrets)
    # so that `rerun` tells the values the run wrote from values edited later (record/rerun.py edited)
    data["values_sha256"] = values_sha256(data["resolved_recipe"])
    return data


def values_sha256(resolved: Mapping[str, Any]) -> str:
    """The digest a manifest keeps of its resolved recipe (start), so that `rerun` sees an edit of it."""
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()


def finish(data: dict[str, Any], status: Status, **fields: Any) -> dict[str, Any]:
    """A copy of `data` marked `status` with `fields` added and the end time and wall time recorded."""
    out = dict(data)
    out.update(fields)
    out["status"] = status
    out["ended_at"] = now_iso()
    out["attempts"] = [dict(a) for a in out.get("attempts", [])]
    if out["attempts"]:
        out["attempts"][-1].update({"ended_at": out["ended_at"], "status": status})
    started = dt.datetime.fromisoformat(out["attempts"][-1]["started_at"]) if out["attempts"] else None
    if started:
        out["attempts"][-1]["wall_seconds"] = round(
            (dt.datetime.fromisoformat(out["ended_at"]) - started).total_seconds(), 1
        )
    out["wall_seconds"] = round(sum(a.get("wall_seconds", 0.0) for a in out["attempts"]), 1)
    return out


class Unreadable(ValueError):
    """A manifest that is JSON but not of the shape its readers read (`unreadable` says where)."""


def read(run_dir: Path) -> dict[str, Any] | None:
    """The manifest, or None when there is none. Raises ValueError when it exists but is not JSON, and
    Unreadable (a ValueError) when a value in it is not of the type `train`, `rerun` and `evaluate` read
    (edited or assembled by hand): one line naming it, never a traceback far from here."""
    try:
        data = json.loads((run_dir / MANIFEST).read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None
    why = unreadable(data)
    if why:
        raise Unreadable(why)
    return data


class _Value(TypedDict, total=False):
    value: str
    source: str


class _Process(TypedDict, total=False):
    role: str
    argv: list[str]


class _Inventory(TypedDict, total=False):
    gpus: list[dict[str, Any]]


class _Model(TypedDict, total=False):
    path: str | None
    files: dict[str, Any] | None


class _Inputs(TypedDict, total=False):
    dataset: list[dict[str, Any]] | None
    model: _Model | None


class Readable(TypedDict, total=False):
    """The parts of a manifest `train` (resuming), `rerun` and `evaluate` read, with the types they read them
    as (a key may be absent; one of another type is a manifest edited or cut by hand, refused naming it). A
    secret's value is the string "<redacted>" in place of its {value, source} (redact.deep)."""

    status: str
    run_name: str | None
    started_at: str | None
    attempts: list[dict[str, Any]]
    identity: dict[str, Any] | None
    rerun_of: dict[str, Any] | None
    seed: int
    dataset: list[str]
    resolved_recipe: dict[str, _Value | Literal["<redacted>"]] | None
    processes: list[_Process]
    model: _Model | None
    inputs: _Inputs | None
    versions: dict[str, Any] | None
    image: dict[str, Any] | None
    inventory: _Inventory | None
    steps: dict[str, int | None] | None
    failure: dict[str, Any] | str | None
    checkpoint: str | None
    exported: dict[str, Any] | None


_READABLE = TypeAdapter(Readable)


def unreadable(data: Any) -> str:
    """Why a manifest's JSON cannot be read by `train`, `rerun` and `evaluate` ('' when it can), a phrase to
    follow the file's name: the first value of another type than theirs, named by its path in the file ("has
    resolved_recipe.SEED = 5 (input should be a valid dictionary)")."""
    try:
        _READABLE.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where, value = [], data
        for part in err["loc"]:  # the path in the file: a union's member names are pydantic's, not keys
            if isinstance(value, dict) and part in value or isinstance(value, list) and isinstance(part, int):
                where, value = [*where, str(part)], value[part]
        said = f"{json.dumps(value)[:60]} ({err['msg'][0].lower()}{err['msg'][1:]})"
        return f"has {'.'.join(where)} = {said}" if where else f"is {said}"
    return ""


def resolved_values(data: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The manifest's resolved recipe as {KEY: {"value", "source"}}, a redacted secret as {"value":
    "<redacted>", "source": ""} (what redact.deep wrote in place of the item)."""
    items = data.get("resolved_recipe") or {}
    return {
        k: ({"value": v, "source": ""} if isinstance(v, str) else {"value": "", "source": "", **v})
        for k, v in items.items()
    }


def write(run_dir: Path, data: dict[str, Any], secret_values: list[str] | None = None) -> None:
    write_json_atomic(run_dir / MANIFEST, redact.deep(data, secret_values or []))


def verify(run_dir: Path) -> list[str]:
    """Files whose sha256 no longer matches the manifest (empty: all good)."""
    data = read(run_dir) or {}
    bad = []
    for rel, digest in (data.get("exported") or {}).items():
        path = run_dir / rel
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            bad.append(rel)
    return bad


def latest(output_dir: str) -> str:
    """The newest run under OUTPUT_DIR (by its manifest's start time), "" when there is none."""
    root = Path(output_dir).expanduser()
    started: dict[str, str] = {}  # run name -> its manifest's started_at (ISO 8601, so it sorts as text)
    for m in root.glob(f"*/{MANIFEST}") if root.is_dir() else []:
        try:
            data = json.loads(m.read_text())
        except (OSError, ValueError):
            continue
        started[m.parent.name] = str(data.get("started_at") or "") if isinstance(data, dict) else ""
    return max(started, key=lambda name: (started[name], name), default="")


def find_run(run: str, output_dir: str) -> Path:
    """The run directory: `run` as a path when it is one, else OUTPUT_DIR/run as train names it
    (facts.run_dir; run=latest: the newest). Raises BadInput."""
    if run == "latest":
        run = latest(output_dir) or run
    path = Path(run).expanduser()
    if not (path / MANIFEST).is_file():
        path = facts_mod.run_dir(output_dir, run)
    if not (path / MANIFEST).is_file():
        root = Path(output_dir).expanduser()
        runs = sorted(p.name for p in root.glob("*/") if (p / MANIFEST).is_file()) if root.is_dir() else []
        why = (
            f"no run under {root} yet"
            if run == "latest" and not runs
            else f"no run directory with a manifest.json at {path}"
        )
        raise BadInput(
            [
                Problem(
                    f"run {run}",
                    why,
                    f"give one of: {', '.join(runs[-8:])}"
                    if runs
                    else f"train one first (make smoke), or set OUTPUT_DIR to where your runs are ({root})",
                )
            ]
        )
    return path


class InputChange(NamedTuple):
    """One input file that one attempt of a run read otherwise than the attempt before it: `kind` ("dataset",
    "val_dataset", "plugins", "system"), `spec` (as the recipe names it), the sha256 each attempt recorded,
    None where that attempt did not read it."""

    kind: str
    spec: str
    before: str | None
    after: str | None


def input_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[InputChange]:
    """What changed between two attempts' records (`attempts[i]["inputs"]`: kind -> [{"spec", "sha256"}]):
    files whose sha256 differs, files read by one attempt only. Malformed records read as absent."""

    def digests(records: Mapping[str, Any], kind: str) -> dict[str, str | None]:
        found = records.get(kind) if isinstance(records, Mapping) else None
        rows = [r for r in found if isinstance(r, Mapping)] if isinstance(found, list) else []
        return {str(r.get("spec")): r.get("sha256") for r in rows}

    out = []
    kinds = dict.fromkeys([*(before or {}), *(after or {})])
    for kind in kinds:
        old, new = digests(before, kind), digests(after, kind)
        for spec in dict.fromkeys([*old, *new]):
            if old.get(spec) != new.get(spec):
                out.append(InputChange(kind, spec, old.get(spec), new.get(spec)))
    return out
