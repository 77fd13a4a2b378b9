"""What this machine says, as data: the `Facts` host.gather reads once, and the constants decisions need.

Decision modules (plan/, preflight/) take these values and never read the world
themselves, so tests hand them made-up facts. This module reads nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from entrypoint.errors import Problem
from entrypoint.recipe.load import PROJECT_DIR, Recipe

MANIFEST = "manifest.json"  # in every run directory (manifest.py)
CACHE_VARIABLES = ("HF_HOME", "MODELSCOPE_CACHE", "HF_DATASETS_CACHE", "TRITON_CACHE_DIR", "XDG_CACHE_HOME")

# ms-swift 3.6.4's weight-sync rendezvous: the trainer's VLLMClient POSTs /init_communicator/ with port
# 51216 and vLLM worker 0 hosts a TCP store there; it is not a CLI argument in 3.6.4
# (v3.6.4:swift/trainers/rlhf_trainer/vllm_client.py:167).
WEIGHT_SYNC_PORT = 51216
# swift rollout's default; its find_free_port walks 8000..8099 (v3.6.4:swift/utils/utils.py:239-250).
ROLLOUT_PORT_START = 8000
ROLLOUT_PORT_SPAN = 100
ENTRIES_LISTED = 64  # a directory's names read: enough to tell a run directory from a user's folder


@dataclasses.dataclass(frozen=True)
class PathInfo:
    """What this machine says about one path a recipe names."""

    exists: bool = False
    is_file: bool = False
    is_dir: bool = False
    reachable: bool = True  # False: a parent directory cannot be entered
    readable: bool = False
    writable: bool = False  # a file can be created in it (or in its nearest existing ancestor)
    read_only: bool = False  # its nearest existing ancestor is on a file system mounted read-only
    write_error: str = ""  # why a file could not be created there (the failed write's strerror)
    owner: str = ""  # uid:gid of it or of its nearest existing ancestor
    nearest: str = ""  # the nearest existing ancestor (itself when it exists)
    disk_free_gib: float | None = None  # free space where it would be written
    nearest_is_dir: bool = True  # False: the nearest existing ancestor is a file, so nothing can go under it
    entries: tuple[str, ...] = ()  # a directory's names, sorted (at most ENTRIES_LISTED)

    def unusable_file(self) -> str:
        """Why this path cannot be read as a file, a phrase to follow the path ("" when it can)."""
        if not self.reachable:
            return "cannot be reached (a parent directory is not readable)"
        if self.is_dir:
            return "is a directory, not a file"
        if not self.exists:
            return "does not exist"
        if not self.is_file:
            return "is not a regular file"
        return "" if self.readable else "is not readable by this process"


@dataclasses.dataclass(frozen=True)
class DatasetFile:
    """A local dataset file as read here: (line, row) pairs (up to MAX_ROWS_PARSED), the row count and the
    problems met while reading it."""

    path: str
    rows: tuple[tuple[int, dict], ...] = ()
    count: int = 0
    problems: tuple[Problem, ...] = ()
    decode_error: str = ""  # not UTF-8: where


@dataclasses.dataclass(frozen=True)
class Previous:
    """The run directory a restart would resume."""

    manifest: dict[str, Any] | None = None
    error: str = ""  # manifest.json exists but cannot be read
    newest_checkpoint: str = ""  # newest complete checkpoint-N, "" when none
    # checkpoints a save never finished (a full disk, a kill) and those set aside as incomplete-checkpoint-N:
    # (path relative to the run directory, GiB); never resumed from, so deleting them frees space
    incomplete: tuple[tuple[str, float], ...] = ()
    newest_step: int | None = None  # the N of newest_checkpoint


@dataclasses.dataclass(frozen=True)
class Ports:
    rollout_first_free: int | None = None  # first free port from 8000 on ROLLOUT_BIND (swift rollout's range)
    rollout_port_free: bool = True  # the ROLLOUT_PORT the recipe names is free
    weight_sync_free: bool = True  # ms-swift's fixed weight-sync rendezvous port
    master_port_free: bool = True  # the MASTER_PORT the recipe names is free
    ephemeral: int = 29500  # a port the kernel gave back as free (torchrun's rendezvous on one node)
    master_addr_error: str = ""  # several nodes: MASTER_ADDR does not resolve (why)
    master_addr_binds: tuple[bool, bool] = (True, True)  # node 0: MASTER_PORT, MASTER_PORT+1 bindable there
    rollout_host_error: str = ""  # ROLLOUT_HOST does not resolve (why)


class ModelConfig(NamedTuple):
    """The model's config.json and where it came from (a path, the shipped table, the hub); without one
    (config None), why the hub gave none where it was asked ("" otherwise)."""

    config: dict | None
    source: str


@dataclasses.dataclass(frozen=True)
class Facts:
    env: Mapping[str, str]
    now: dt.datetime
    cwd: Path
    uid: int
    gid: int
    swift: str
    paths: Mapping[str, PathInfo]
    datasets: Mapping[str, DatasetFile]
    model_config: ModelConfig
    hub: Mapping[str, str | None]  # "models:org/name:hf" -> local snapshot or None
    # same keys -> where the hub's library keeps it (a factory: Python 3.11 refuses a mappingproxy default)
    hub_expected: Mapping[str, str] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    ports: Ports = Ports()
    plugins: Mapping[str, Any] | None = None  # the probe's answer (world/plugin_probe.py), None: failed
    plugin_error: str = ""
    system_text: str | None = None  # a SYSTEM prompt file's text
    system_error: str = ""  # why the SYSTEM prompt file could not be read (recipe.read_user_file)
    deepspeed_config: dict | None = None  # a DEEPSPEED .json file's content
    in_container: bool = True  # inside the grpo-rig image, not on a user's host
    embedded_ready: bool = True  # the embedded model is converted, by this version's conversion
    previous: Previous = Previous()
    secret_values: tuple[str, ...] = ()  # values of the environment's secret variables (redact.py)
    swift_worker: tuple[str, ...] = ()  # (python, swift/cli/rlhf.py) when the worker can start directly
    model_config_error: str = ""  # why the config.json at model_config's source cannot be read (its phrase)
    swift_missing: str = (
        ""  # why the trainer's command cannot start here (host.swift_missing); "" when it can
    )
    # the modules of recipe/optional.py's table that this interpreter can import (QUANT_METHOD=bnb needs
    # bitsandbytes, REPORT_TO=swanlab swanlab, ...): the launcher's interpreter is the image's, or the venv
    # installed from the same lock
    importable: frozenset[str] = frozenset()
    # the distributions requirements/runtime.lock pins (normalised names, world/host.locked_packages): a
    # package in it that cannot be imported is a venv or image not synced from it; None: no lock file found
    locked: frozenset[str] | None = None
    secrets_set: frozenset[str] = frozenset()  # names of the environment's secret variables that are set

    def path(self, text: str | Path) -> PathInfo:
        return self.paths.get(str(text), PathInfo())

    def hub_cached(self, repo: str, kind: str, use_hf: bool) -> str | None:
        return self.hub.get(hub_key(repo, kind, use_hf))

    def hub_where(self, repo: str, kind: str, use_hf: bool) -> str:
        """Where the hub's library would keep `repo` (for messages)."""
        return self.hub_expected.get(hub_key(repo, kind, use_hf), "the hub cache")


def hub_key(repo: str, kind: str, use_hf: bool) -> str:
    return f"{kind}:{repo}:{'hf' if use_hf else 'ms'}"


def resolved(value: str, paths: Mapping[str, PathInfo]) -> str:
    """A relative file path from a recipe resolves against the project directory when it exists there."""
    path = Path(value)
    candidate = PROJECT_DIR / path
    if path.is_absolute() or not paths.get(str(candidate), PathInfo()).exists:
        return value
    return str(candidate)


# compose.yaml mounts the host's GRPO_RIG_OUTPUT (./output) here, and passes its host spelling in
# GRPO_RIG_HOST_OUTPUT for messages
CONTAINER_OUTPUT = Path("/output")


def host_path(path: Path, facts: Facts) -> str:
    """`path` as the user's shell names it: in the image, a path under the output volume becomes the host's
    directory (./output/<run>/adapter), since the closing lines are read on the host; else `path` itself."""
    if not facts.in_container:
        return str(path)
    try:
        inside = Path(path).relative_to(CONTAINER_OUTPUT)
    except ValueError:
        return str(path)
    return f"{(facts.env.get('GRPO_RIG_HOST_OUTPUT') or './output').rstrip('/')}/{inside}"


def run_dir(output_dir: str, name: str) -> Path:
    """Where a run named `name` lives: OUTPUT_DIR/name, absolute (train writes there, evaluate reads it)."""
    return (Path(output_dir).expanduser() / name).absolute()


def run_dir_of(r: Recipe, now: dt.datetime) -> Path:
    """The recipe's run directory, the default run name being <recipe>-<UTC timestamp>."""
    return run_dir(
        r.settings.OUTPUT_DIR, r.settings.RUN_NAME or f"{Path(r.name).stem}-{now.strftime('%Y%m%d-%H%M%S')}"
    )
