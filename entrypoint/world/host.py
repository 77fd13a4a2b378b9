"""The edge: everything the decisions need to know about this machine, read once into `Facts`.

`gather(recipe, inventory, environ)` looks at the world for a resolved recipe: the environment variables
the decisions read (ENV_NAMES), the time, the files the recipe names (exist? readable? writable? whose?),
the datasets' rows, the model's config.json, the hub caches, free ports, the reward plugins (imported in
a throwaway process), the swift executable, and the run directory a restart would resume. Below this
module nothing reads os.environ, the filesystem or the network to decide: `plan.build(recipe, inventory,
facts)` and the preflight checks are functions of these values, so tests hand them made-up facts.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import importlib.util
import itertools
import json
import os
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from entrypoint import redact
from entrypoint.facts import datasets as dataset_checks
from entrypoint.facts.facts import (
    CACHE_VARIABLES,
    ENTRIES_LISTED,
    ROLLOUT_PORT_START,
    WEIGHT_SYNC_PORT,
    DatasetFile,
    Facts,
    ModelConfig,
    PathInfo,
    Ports,
    Previous,
    hub_key,
    resolved,
    run_dir_of,
)
from entrypoint.plan import build as plan_build
from entrypoint.plan import memory
from entrypoint.recipe import load as recipe_mod
from entrypoint.recipe import optional
from entrypoint.recipe.load import PROJECT_DIR, Recipe, read_user_file
from entrypoint.record import export, manifest
from entrypoint.rewards import PLUGIN_FILE
from entrypoint.rewards.check import NOT_PROBED
from entrypoint.world import dataset_files, hubcache, hubconfig, models, ports
from entrypoint.world import plugin_probe as plugin_probe

# The environment variables decisions read (the children inherit the whole environment regardless).
ENV_NAMES = (
    "PYTHONPATH", "NO_PROXY", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
    "CUDA_VISIBLE_DEVICES", "GLOO_SOCKET_IFNAME", "NCCL_P2P_DISABLE", "HF_HOME", "HF_HUB_CACHE",
    "MODELSCOPE_CACHE", "HF_DATASETS_CACHE", "TRITON_CACHE_DIR", "XDG_CACHE_HOME", "GRPO_RIG_VERSION",
    "GRPO_RIG_REVISION", "GRPO_RIG_LOCK_SHA256", "GRPO_RIG_SWIFT", "HF_HUB_OFFLINE", "MODELSCOPE_OFFLINE",
    "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "GRPO_RIG_HOST_OUTPUT", "WANDB_MODE", "WANDB_DISABLED",
)  # fmt: skip


def swift_executable(env: Mapping[str, str]) -> str:
    """ms-swift's CLI: GRPO_RIG_SWIFT if set (tests put a fake there), else the one installed beside
    this interpreter (the venv may not be on PATH), else `swift` from PATH."""
    if env.get("GRPO_RIG_SWIFT"):
        return env["GRPO_RIG_SWIFT"]
    beside = Path(sys.executable).parent / "swift"
    return str(beside) if beside.exists() else (shutil.which("swift") or "swift")


def swift_worker(env: Mapping[str, str]) -> tuple[str, ...]:
    """(this interpreter, ms-swift's swift/cli/rlhf.py): the command ms-swift's CLI itself runs for `swift
    rlhf` when neither NPROC_PER_NODE nor NNODES is set (v3.6.4:swift/cli/main.py:55-66), so a one-process
    run can start it without the CLI's own interpreter (plan._worker_directly says why). () where the CLI
    must be used: GRPO_RIG_SWIFT names one (a fake in tests, another install), or this interpreter has no
    ms-swift. Looks the package up without importing it (no torch here)."""
    if env.get("GRPO_RIG_SWIFT"):
        return ()
    try:
        spec = importlib.util.find_spec("swift")
    except (ImportError, ValueError):
        return ()
    for folder in (spec.submodule_search_locations or []) if spec else []:
        rlhf = Path(folder) / "cli" / "rlhf.py"
        if rlhf.is_file() and (Path(folder) / "llm").is_dir():  # ms-swift, not another package named swift
            return (sys.executable, str(rlhf))
    return ()


def swift_missing(env: Mapping[str, str], swift: str, worker: tuple[str, ...]) -> str:
    """Why neither ms-swift's worker (swift_worker) nor its CLI (swift_executable) can start the trainer from
    here, or "": a Python with torch but no ms-swift otherwise ran `train` as far as the trainer's start-up
    (`swift: No such file or directory`), after the run directory was written."""
    if worker or shutil.which(swift) is not None:
        return ""
    if env.get("GRPO_RIG_SWIFT"):
        return f"GRPO_RIG_SWIFT={swift} is not an executable file"
    return f"{sys.executable} has no ms-swift (the swift package) and no `swift` command is on the PATH"


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not recipe_mod.exists(path) and path != path.parent:
        path = path.parent
    return path


def path_info(path: Path) -> PathInfo:
    """What can be said about `path` without changing anything (a probe file is created and removed).
    Never raises for a value that cannot be a path (a long SYSTEM prompt, a NUL byte): nothing is there."""
    path = path.expanduser()
    try:
        path.stat()
        reachable = True
    except PermissionError:
        return PathInfo(reachable=False)
    except (OSError, ValueError) as exc:
        if isinstance(exc, ValueError) or exc.errno == errno.ENAMETOOLONG:  # a text that is no path here
            return PathInfo()
        reachable = True
    nearest = _nearest_existing(path)
    writable, read_only, write_error = False, False, ""
    if recipe_mod.is_dir(nearest):
        try:
            with tempfile.NamedTemporaryFile(dir=nearest, prefix=".grpo-rig-write-test-"):
                writable = True
        except OSError as exc:
            write_error, read_only = exc.strerror or str(exc), exc.errno == errno.EROFS
    # a read-only mount, whatever the permissions say (root writes nowhere there either)
    with contextlib.suppress(OSError):
        read_only = read_only or bool(os.statvfs(nearest).f_flag & os.ST_RDONLY)
    st = nearest.stat()
    entries: tuple[str, ...] = ()
    is_dir = recipe_mod.is_dir(path)
    if is_dir:
        with contextlib.suppress(OSError):
            entries = tuple(sorted(itertools.islice(os.listdir(path), ENTRIES_LISTED)))
    exists = recipe_mod.exists(path)
    return PathInfo(
        entries=entries,
        nearest_is_dir=recipe_mod.is_dir(nearest),
        exists=exists,
        is_file=recipe_mod.is_file(path),
        is_dir=is_dir,
        reachable=reachable,
        readable=exists and os.access(path, os.R_OK),
        writable=writable,
        read_only=read_only,
        write_error=write_error,
        owner=f"{st.st_uid}:{st.st_gid}",
        nearest=str(nearest),
        disk_free_gib=shutil.disk_usage(nearest).free / 1024**3,
    )


def read_dataset(path: Path) -> DatasetFile:
    """A local dataset file's rows (datasets.READ_SUFFIXES) as the preflight checks see them."""
    try:
        rows, count, problems = dataset_files.read_rows(path)
    except UnicodeDecodeError as exc:
        return DatasetFile(str(path), decode_error=f"{exc.reason} at byte {exc.start}")
    return DatasetFile(str(path), tuple(rows), count, tuple(problems))


def read_previous(run_dir: Path) -> Previous:
    try:
        data = manifest.read(run_dir)
    except (OSError, ValueError) as exc:
        return Previous(error=str(exc))
    newest = export.newest_complete(run_dir / "train") if data is not None else None
    train = run_dir / "train"
    cut = export.incomplete(train) + (sorted(train.glob("incomplete-checkpoint-*")) if train.is_dir() else [])
    incomplete = tuple((str(c.relative_to(run_dir)), export.tree_bytes(c) / 1024**3) for c in cut)
    step = export.checkpoint_step(newest) if newest else None
    return Previous(data, "", str(newest) if newest else "", incomplete, step)


def _dataset_specs(r: Recipe) -> list[str]:
    """The datasets the trainer reads: the training ones (none of them when a generator writes the data),
    then VAL_DATASET's."""
    a = r.trainer_args
    return [*(() if r.settings.DATASET_GENERATOR else a.dataset), *a.val_dataset]


def _model_path(r: Recipe) -> str:
    model = r.trainer_args.model or ""
    if r.settings.MODEL_SOURCE == "embedded" and model in models.CATALOG:
        return str(models.model_dir(models.lookup(model), Path(r.settings.EMBEDDED_MODEL_DIR)))
    return model


def _paths(r: Recipe, env: Mapping[str, str]) -> list[Path]:
    """Every path a decision about this recipe may ask about."""
    a = r.trainer_args
    wanted: list[Path] = [PLUGIN_FILE]
    for value in (a.system, a.deepspeed, *a.external_plugins):
        if value:
            wanted += [Path(value), PROJECT_DIR / value]
    for spec in _dataset_specs(r):
        p = Path(dataset_checks.parse_spec(spec).path)
        wanted += [p, p.expanduser(), p.absolute()]
    model = _model_path(r)
    if model:
        wanted += [
            Path(model),
            Path(model).expanduser(),
            Path(model).expanduser() / "config.json",
            Path(model) / models.PROVENANCE_FILE,
        ]
    wanted.append(Path(r.settings.OUTPUT_DIR).expanduser())
    wanted += [Path(env[v]) for v in CACHE_VARIABLES if env.get(v)]
    return wanted


class FoundConfig(NamedTuple):
    """A model's config.json as found here, with where and why it cannot be read (Facts.model_config keeps
    the first two)."""

    config: dict | None  # None: none found, or the one found cannot be read (`error`)
    source: str  # where it was found (or why the hub gave none)
    hub: dict[str, str | None]  # the hub lookups made on the way
    error: str = ""  # why the config.json at `source` cannot be read: not JSON, a field of another type


def _model_config(
    r: Recipe, env: Mapping[str, str], hub_environ: Mapping[str, str] | None = None
) -> FoundConfig:
    """config.json of the model (local directory, HF or ModelScope cache, else the shipped table, else, given
    `hub_environ` (the environment to ask the hub with: an online run), from the hub: hubconfig.py), checked
    against the fields the planner reads (memory.config_problem), and the hub lookups made on the way."""
    found = _found_config(r, env, hub_environ)
    why = memory.config_problem(found.config) if found.config is not None else ""
    return found._replace(config=None, error=why) if why else found


def _found_config(r: Recipe, env: Mapping[str, str], hub_environ: Mapping[str, str] | None) -> FoundConfig:
    model, path = r.trainer_args.model or "", _model_path(r)
    hub: dict[str, str | None] = {}
    candidates = [Path(path) / "config.json"] if path else []
    for use_hf in (True, False):
        local = hubcache.cached(model, "models", use_hf, env) if model else None
        hub[hub_key(model, "models", use_hf)] = str(local) if local else None
        if model:
            hub["where:" + hub_key(model, "models", use_hf)] = str(
                hubcache.expected(model, "models", use_hf, env)
            )
        if local is not None:
            candidates += sorted(local.glob("snapshots/*/config.json")) + [local / "config.json"]
    for candidate in candidates:
        if recipe_mod.is_file(candidate):
            try:
                return FoundConfig(json.loads(candidate.read_text()), str(candidate), hub)
            except ValueError as exc:  # UnicodeDecodeError too
                return FoundConfig(None, str(candidate), hub, f"is not JSON ({exc})")
            except OSError as exc:
                return FoundConfig(None, str(candidate), hub, f"cannot be read ({exc.strerror or exc})")
    shipped = memory.shipped_config(model)
    if shipped:
        return FoundConfig(shipped, "entrypoint/data/model_configs.json", hub)
    # the source of a config not found says why the hub gave none (budget.workload)
    if hub_environ:
        config, where = hubconfig.fetch(model, r.trainer_args.use_hf, hub_environ)
        return FoundConfig(config, where, hub)
    return FoundConfig(None, "", hub)


def _ports(r: Recipe) -> Ports:
    s = r.settings
    error, binds = "", (True, True)
    if s.NNODES > 1 and s.MASTER_ADDR:
        try:
            socket.getaddrinfo(s.MASTER_ADDR, s.MASTER_PORT, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            error = exc.strerror or str(exc)
        if not error and s.NODE_RANK == 0:
            binds = (
                ports.is_free(s.MASTER_PORT, s.MASTER_ADDR),
                ports.is_free(s.MASTER_PORT + 1, s.MASTER_ADDR),
            )
    rollout_error = ""
    if s.ROLLOUT_HOST:
        try:
            socket.getaddrinfo(s.ROLLOUT_HOST, s.ROLLOUT_PORT or None, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            rollout_error = exc.strerror or str(exc)
    return Ports(
        rollout_host_error=rollout_error,
        master_addr_error=error,
        master_addr_binds=binds,
        rollout_first_free=ports.first_free(ROLLOUT_PORT_START, s.ROLLOUT_BIND),
        rollout_port_free=not s.ROLLOUT_PORT or ports.is_free(s.ROLLOUT_PORT, s.ROLLOUT_BIND),
        weight_sync_free=ports.is_free(WEIGHT_SYNC_PORT, "127.0.0.1"),
        master_port_free=not r.is_set("MASTER_PORT") or ports.is_free(s.MASTER_PORT),
        ephemeral=ports.ephemeral(),
    )


def _embedded_ready(r: Recipe) -> bool:
    model = r.trainer_args.model or ""
    if r.settings.MODEL_SOURCE != "embedded" or model not in models.CATALOG:
        return True
    return models.is_prepared(models.lookup(model), Path(r.settings.EMBEDDED_MODEL_DIR))


def _sample_rows(r: Recipe, datasets: Mapping[str, DatasetFile]) -> list[dict]:
    """Two rows the reward plugins are called on: generated tasks, else the first local dataset's, as ms-swift
    3.6.4 passes them to the rewards (facts.datasets.as_swift_reads)."""
    if r.settings.DATASET_GENERATOR:
        from entrypoint.rewards import tasks

        return list(tasks.TASKS[r.settings.DATASET_GENERATOR].generate(2, 0))
    mapping = dataset_checks.user_columns((r.trainer.get("columns") or [None])[0])
    for found in datasets.values():
        rows = [row for _, row in found.rows[:2] if isinstance(row, dict)]
        if rows:  # as ms-swift passes them to the rewards: the columns it turns into `messages` are gone
            columns = dict.fromkeys(c for _, row in found.rows if isinstance(row, dict) for c in row)
            read = dataset_checks.as_swift_reads(columns, mapping)
            return [dataset_checks.as_swift_row(row, read) for row in rows]
    return []


def importable(modules: list[str]) -> frozenset[str]:
    """The modules this interpreter finds (importlib.util.find_spec; a dotted name imports its parent
    package, which may itself be missing)."""
    found = set()
    for name in modules:
        try:
            if importlib.util.find_spec(name) is not None:
                found.add(name)
        except (ImportError, ValueError):
            continue
    return frozenset(found)


def locked_packages(lock: Path) -> frozenset[str] | None:
    """The distributions `lock` pins (`name==version` lines, names normalised as PEP 503 does:
    lower case, runs of -_. as one -), or None where the file cannot be read (an install without the
    repository's requirements/)."""
    try:
        text = lock.read_text(encoding="utf-8")
    except OSError:
        return None
    names = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", text, re.M)
    return frozenset(optional.normalised(n) for n in names)


def in_container(environ: Mapping[str, str]) -> bool:
    """Inside the grpo-rig image, not on a user's host: the image sets GRPO_RIG_VERSION (Dockerfile)."""
    return bool(environ.get("GRPO_RIG_VERSION"))


def gather(
    r: Recipe,
    environ: Mapping[str, str],
    now: dt.datetime | None = None,
    probe_plugins: bool = True,
    fetch_config: bool = False,
) -> Facts:
    """Read what the decisions about recipe `r` need of this machine. Never raises on bad input: what is
    missing or broken is a fact the checks report. `fetch_config`: a hub model known nowhere here has its
    config.json read from the hub unless the run is offline (hubconfig.py; the commands that plan ask it)."""
    env = MappingProxyType({k: environ[k] for k in ENV_NAMES if k in environ})
    now = now or dt.datetime.now(dt.timezone.utc)
    paths = {str(p): path_info(p) for p in [*_paths(r, env), run_dir_of(r, now)]}
    datasets = {}
    for spec in _dataset_specs(r):
        p = Path(dataset_checks.parse_spec(spec).path).expanduser()
        if p.suffix in dataset_checks.READ_SUFFIXES and recipe_mod.is_file(p) and os.access(p, os.R_OK):
            datasets[dataset_checks.dataset_key(p)] = read_dataset(p)
    online = fetch_config and not plan_build.offline(r, env)
    config, source, hub, config_error = _model_config(r, env, environ if online else None)
    a = r.trainer_args
    for spec in _dataset_specs(r):
        name = dataset_checks.parse_spec(spec).path
        local = (
            hubcache.cached(name, "datasets", a.use_hf, env) if not dataset_checks.is_local(name) else None
        )
        hub[hub_key(name, "datasets", a.use_hf)] = str(local) if local else None
        if local is None and not dataset_checks.is_local(name):
            hub["where:" + hub_key(name, "datasets", a.use_hf)] = str(
                hubcache.expected(name, "datasets", a.use_hf, env)
            )
    plugins, plugin_error = None, NOT_PROBED
    if probe_plugins:
        files = [str(PLUGIN_FILE)] + [resolved(f, paths) for f in a.external_plugins]
        plugins, plugin_error = plugin_probe.run(
            [f for f in files if paths.get(str(Path(f)), PathInfo()).is_file],
            call=list(a.reward_funcs),
            rows=_sample_rows(r, datasets),
        )
    deepspeed_config = None
    ds = resolved(a.deepspeed, paths) if a.deepspeed.endswith(".json") else ""
    if ds and recipe_mod.is_file(ds):
        try:
            deepspeed_config = json.loads(Path(ds).read_text())
        except (OSError, ValueError):
            deepspeed_config = None
    system = resolved(a.system, paths) if a.system else ""
    system_text, system_error = read_user_file(Path(system)) if system.endswith(".txt") else (None, "")
    swift, worker = swift_executable(environ), swift_worker(environ)
    return Facts(
        env=env,
        now=now,
        cwd=Path.cwd(),
        uid=os.getuid(),
        gid=os.getgid(),
        swift=swift,
        swift_worker=worker,
        swift_missing=swift_missing(environ, swift, worker),
        importable=importable(optional.modules()),
        locked=locked_packages(manifest.LOCK_FILE),
        secrets_set=frozenset(k for k, v in environ.items() if v and redact.is_secret(k)),
        paths=MappingProxyType(paths),
        datasets=MappingProxyType(datasets),
        model_config=ModelConfig(config, source),
        model_config_error=config_error,
        hub=MappingProxyType({k: v for k, v in hub.items() if not k.startswith("where:")}),
        hub_expected=MappingProxyType(
            {k[len("where:") :]: v for k, v in hub.items() if k.startswith("where:")}
        ),
        ports=_ports(r),
        plugins=plugins,
        plugin_error=plugin_error,
        system_text=system_text,
        system_error=system_error,
        deepspeed_config=deepspeed_config,
        in_container=in_container(environ),
        embedded_ready=_embedded_ready(r),
        previous=read_previous(run_dir_of(r, now)),
        secret_values=tuple(redact.values_of(environ)),
    )
