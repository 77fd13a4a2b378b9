"""The keys the entrypoint owns: one typed table, each with its default, unit and meaning.

A recipe holds three kinds of keys (README, "Recipes"):
- these owned keys (placement, run identity, output, safety switches), defined here;
- ms-swift `swift rlhf` arguments, upper-cased (`NUM_GENERATIONS=6` -> `--num_generations 6`);
- ms-swift `swift rollout` arguments with a `ROLLOUT_` prefix (`ROLLOUT_MAX_MODEL_LEN=4096`);
plus NCCL variables and a few environment variables passed to the children (`load.py`).

Values arrive as strings from env files, the environment and the command line; pydantic coerces them to
the types below, and a value that does not fit is reported with the key's name.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from pathlib import PurePath
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from entrypoint.child.hooks import NAMES as HOOK_NAMES
from entrypoint.rewards.tasks import TASKS

# One directory under OUTPUT_DIR: no '/', never '.' or '..', nothing a shell or a URL would mangle (else
# RUN_NAME=../../etc/x writes the run outside OUTPUT_DIR). 128 stays far below a file name's 255 bytes.
RUN_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def least(seconds: float, why: str) -> dict:
    """A time setting's least sensible value on a real run, with the reason (the field's metadata, read by
    Settings._time_floor and `keys`). A simulated trainer (recipe.load's context `simulated`: GRPO_RIG_SWIFT,
    the tests' fake ms-swift, whose steps and start-up take milliseconds) may go below it."""
    return {"least": seconds, "least_why": why}


class Refused(ValueError):
    """A validator's refusal that knows its fix; recipe.settings_of shows both."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


def split_address(text: str) -> tuple[str, int | None]:
    """(host, port) of 'http://10.0.0.5:8000/', '10.0.0.5:8000' or a bare host; ("", None) for no host, a
    port None when absent or not a number. ROLLOUT_HOST's refusal and `import --vllm_server_base_url` use
    it."""
    url = urlsplit(text if "://" in text else f"//{text}")
    try:
        return url.hostname or "", url.port
    except ValueError:  # a port that is not a number
        return url.hostname or "", None


# Linux's limits on a path (linux/limits.h): NAME_MAX bytes in one name between slashes (ext4, xfs, btrfs,
# overlayfs, tmpfs), PATH_MAX bytes in the whole, its terminating NUL included. Past them every mkdir and
# open fails with ENAMETOOLONG, which surfaced as "manifest.json exists but cannot be read" and "is not
# writable by this process".
NAME_MAX = 255
PATH_MAX = 4096


def _shown(text: str) -> str:
    """A long name as a line can hold it: its start and end."""
    return text if len(text) <= 40 else f"{text[:24]}...{text[-12:]}"


def too_long(path: str) -> str:
    """Why `path` cannot exist on Linux, whatever the disk: a name or the whole over the limits; "" when it
    can. Text only, no file system asked (this layer reads nothing)."""
    size = len(os.fsencode(path))
    if size >= PATH_MAX:
        return f"it is {size} bytes; a path takes at most {PATH_MAX - 1} bytes (PATH_MAX)"
    for name in path.split("/"):
        size = len(os.fsencode(name))
        if size > NAME_MAX:
            return (
                f"its name {_shown(name)!r} is {size} bytes; a file system takes names of at most {NAME_MAX} "
                "bytes (NAME_MAX)"
            )
    return ""


def _run_name_like(value: str) -> str:
    """A RUN_NAME that RUN_NAME_RE takes, made from `value`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", value).strip("-._")[:128] or "my-run"


def default_run_name_problem(recipe: str) -> tuple[str, str] | None:
    """(what is wrong, the fix) where RUN_NAME is unset and the default name, <recipe>-<UTC timestamp>
    (facts.run_dir_of), cannot be a directory's name; None when it can."""
    stem = PurePath(recipe).stem
    size = len(os.fsencode(f"{stem}-YYYYmmdd-HHMMSS"))
    if size <= NAME_MAX:
        return None
    return (
        f"unset, so the run is named after the recipe file, {_shown(stem)!r} and a timestamp: {size} bytes; "
        f"a file system takes names of at most {NAME_MAX} bytes (NAME_MAX)",
        f"set RUN_NAME={_run_name_like(stem)}",
    )


def run_name_problem(value: str) -> tuple[str, str] | None:
    """(what is wrong, the fix) for a RUN_NAME that is not one plain path component, None when it is.
    The rule: a name stays inside OUTPUT_DIR (RUN_NAME_RE)."""
    if not value or RUN_NAME_RE.fullmatch(value):
        return None
    if value in (".", ".."):
        why = (
            f"{value!r} is {'OUTPUT_DIR itself' if value == '.' else 'the parent of OUTPUT_DIR'}, not a run "
            "directory in it"
        )
    elif "/" in value or "\\" in value:
        why = f"{value!r} is a path, not a name: the run must be one directory directly under OUTPUT_DIR"
    else:
        why = f"{value!r} is not a run name"
    suggestion = _run_name_like(value)
    return (
        f"{why}; RUN_NAME takes letters, digits, '.', '_' and '-' (up to 128, starting with a letter or "
        "digit)",
        f"set RUN_NAME={suggestion}, or choose where runs go with OUTPUT_DIR",
    )


class Settings(BaseModel):
    """Owned keys. Field descriptions are printed by `python -m entrypoint keys`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Run identity and output
    RECIPE: str = Field("", description="recipe name: recipes/<RECIPE>.env")
    RUN_NAME: str = Field(
        "",
        description="run directory name under OUTPUT_DIR: letters, digits, . _ - (up to 128, starting with a "
        "letter or digit); default <recipe>-<UTC timestamp>",
    )
    OUTPUT_DIR: str = Field("output", description="root of run directories (the mounted volume: /output)")

    # Model and data
    MODEL_SOURCE: Literal["hub", "embedded"] = Field(
        "hub", description="hub: MODEL is a hub id or local path; embedded: a model converted into the image"
    )
    EMBEDDED_MODEL_DIR: str = Field(
        "~/.cache/grpo-rig/models", description="where `prepare-model` puts converted embedded models"
    )
    DATASET_GENERATOR: str = Field(
        "",
        description=f"generate the dataset locally (no hub) instead of reading DATASET: {' | '.join(TASKS)}",
    )
    DATASET_ROWS: int = Field(256, ge=1, description="rows to generate with DATASET_GENERATOR")
    OFFLINE: bool = Field(
        False, description="no hub access: HF's offline switches set, the model passed as its local snapshot"
    )

    # GPU placement
    TRAIN_GPUS: str = Field(
        "all", description="in-container GPU ordinals for training: all | none (CPU) | 0,1 (or 0 1) | 0-3"
    )
    ROLLOUT_GPUS: str = Field(
        "", description="dedicated vLLM rollout GPU ordinals (server mode); empty: colocate on training GPUs"
    )
    INVENTORY: str = Field(
        "", description="JSON inventory file that replaces NVML (plan for another machine)"
    )

    # Rollout server (server mode)
    ROLLOUT_HOST: str = Field(
        "", description="address of a rollout server on another node; the trainer connects there"
    )
    ROLLOUT_PORT: int = Field(
        0, ge=0, le=65535, description="rollout HTTP port; 0: first free port from 8000"
    )
    ROLLOUT_BIND: str = Field("127.0.0.1", description="address the local rollout server listens on")
    ROLLOUT_ALLOW_REMOTE: bool = Field(
        False, description="allow ROLLOUT_BIND off loopback (it accepts weight updates from anyone)"
    )
    ROLLOUT_STARTUP_TIMEOUT: float = Field(
        900.0,
        description="seconds to wait for the rollout server's /health/ before giving up (vLLM loads the "
        "model and captures its CUDA graphs first)",
        json_schema_extra=least(30, "vLLM loads the model and captures its CUDA graphs before it answers"),
    )

    # NCCL
    ALLOW_P2P_WITHOUT_SUPPORT: bool = Field(
        False, description="keep a user's NCCL_P2P_DISABLE=0 on GPUs whose P2P NVML reports unsupported"
    )

    # Multi-node (ms-swift's own variable names)
    NNODES: int = Field(1, ge=1, description="number of nodes")
    NODE_RANK: int = Field(0, ge=0, description="this node's rank, 0..NNODES-1")
    MASTER_ADDR: str = Field("", description="address of node 0 (multi-node)")
    MASTER_PORT: int = Field(
        29500, ge=1, le=65534, description="torch.distributed rendezvous port (+1: the node check)"
    )
    NODE_CHECK_TIMEOUT: float = Field(
        300.0,
        description="seconds node 0 waits for the others (and they for it) at start-up",
        json_schema_extra=least(1, "a connection between two nodes is not made in less"),
    )

    # Memory and monitoring
    MEMORY_CHECK: Literal["error", "warn", "off"] = Field(
        "error",
        description="what a predicted out-of-memory does: error refuses the run, warn prints it, off skips "
        "the check",
    )
    PROMPT_TOKENS: int = Field(
        0,
        ge=0,
        description="longest prompt in tokens, for the memory plan; 0: estimate it from a local JSONL "
        "dataset or generated tasks, take a known hub dataset's (budget.HUB_PROMPT_TOKENS), else assume 512",
    )
    AUTO_SHAPE: bool = Field(
        True,
        description="let the planner choose PER_DEVICE_TRAIN_BATCH_SIZE, GRADIENT_ACCUMULATION_STEPS, "
        "GRADIENT_CHECKPOINTING, USE_LIGER_KERNEL, VLLM_GPU_MEMORY_UTILIZATION, SLEEP_LEVEL, "
        "VLLM_SCHEDULER_STEPS and PYTORCH_CUDA_ALLOC_CONF where the recipe leaves them unset "
        "(entrypoint/plan/shape.py)",
    )
    VLLM_SCHEDULER_STEPS: int = Field(
        0,
        ge=0,
        le=64,
        description="decode steps a colocated vLLM schedules at once: > 1 runs vLLM's V0 engine with "
        "multi-step scheduling (VLLM_USE_V1=0; 0.8.5's V1 engine has none), 1 ms-swift's V1 engine; 0: the "
        "planner chooses (entrypoint/plan/shape.py), else 1",
    )
    EMULATE_VRAM_GB: float = Field(0.0, ge=0, description="cap each process's CUDA memory (GiB); 0: off")
    GPU_MONITOR_INTERVAL: float = Field(
        2.0,
        description="seconds between NVML samples into gpu.jsonl",
        json_schema_extra=least(
            0.1, "NVML's counters move no faster, and gpu.jsonl would grow by the megabyte"
        ),
    )
    CONSOLE: Literal["steps", "all"] = Field(
        "steps",
        description="steps: a line per step, milestones, failures, a heartbeat (console.py); all: every line",
    )

    # The children's hooks (entrypoint/child/hooks/: what each patches upstream, why, when it can go)
    DISABLE_HOOKS: str = Field(
        "",
        description="hooks left out of every child, comma-separated names (empty: none; `plan` shows the "
        f"children's GRPO_RIG_* variables): {', '.join(HOOK_NAMES)}",
    )

    # Lifecycle
    STALL_TIMEOUT: float = Field(
        0.0,
        description="seconds without a sign of progress (a phase finished, a step line, a save, bytes "
        "written under train/) after which the run is ended as stalled (a reward that never returns, a hung "
        "weight sync, a hang at exit or in the merged export), watched from the trainer's start-up "
        "(supervise/stall.py); 0: 10 x the longest wait this attempt has shown or the plan's predicted step "
        "(the first: 10 x the start-up), at least 600; a value given is at least 60, as a GRPO step's "
        "rollout alone takes seconds to minutes",
        json_schema_extra=least(60, "a GRPO step's rollout alone takes seconds to minutes"),
    )
    STOP_GRACE_SECONDS: float = Field(
        20.0,
        description="seconds between SIGTERM and SIGKILL for child processes",
        json_schema_extra=least(1, "the children need a moment to stop their workers and close their logs"),
    )
    EXPORT_MERGED: bool = Field(False, description="also export the base model merged with the adapter")

    # Evaluation: `evaluate run=NAME`, the base model against the run's adapter on held-out prompts
    EVAL_PROMPTS: int = Field(32, ge=2, description="held-out prompts `evaluate` asks both models")
    EVAL_GENERATIONS: int = Field(4, ge=1, description="completions per held-out prompt and model")
    EVAL_SEED: int = Field(1234, ge=0, description="seed of the held-out tasks and of the sampling")
    EVAL_DATASET: str = Field(
        "",
        description="JSONL of held-out rows; default: fresh tasks from the run's generator, or its "
        "VAL_DATASET",
    )
    EVAL_ENGINE: Literal["auto", "hf", "vllm"] = Field(
        "auto", description="auto: vLLM when a GPU is visible and vLLM is installed, else HF generate"
    )
    EVAL_GPU_MEMORY_UTILIZATION: float = Field(
        0.5, gt=0, le=1, description="vLLM's share of the card during `evaluate` (vLLM's range: (0, 1])"
    )

    @field_validator(
        "STALL_TIMEOUT",
        "ROLLOUT_STARTUP_TIMEOUT",
        "NODE_CHECK_TIMEOUT",
        "GPU_MONITOR_INTERVAL",
        "STOP_GRACE_SECONDS",
    )
    @classmethod
    def _time_floor(cls, value: float, info: ValidationInfo) -> float:
        """A time setting below its least sensible value (`least`) is refused; STALL_TIMEOUT's 0 means
        automatic. A simulated trainer (context `simulated`) may go lower."""
        field = cls.model_fields[info.field_name]
        floor, why = field.json_schema_extra["least"], field.json_schema_extra["least_why"]
        automatic = field.default == 0 and value == 0  # STALL_TIMEOUT=0: the console's own bound
        simulated = (info.context or {}).get("simulated") and value > 0
        if value >= floor or automatic or simulated:
            return value
        said = (
            f"{value!r} is not a number of seconds"
            if math.isnan(value)
            else (f"{value:g} s is below the {floor:g} s this setting takes: {why}")
        )
        zero = "0 for automatic, or " if field.default == 0 else ""
        raise Refused(
            said, f"set {info.field_name}={zero}a value >= {floor:g} (the default: {field.default:g})"
        )

    @field_validator("DATASET_GENERATOR")
    @classmethod
    def _generator(cls, value: str) -> str:
        if value and value not in TASKS:
            close = difflib.get_close_matches(value, list(TASKS), n=1)
            raise Refused(
                f"{value!r} is not a task generator; generators: {', '.join(TASKS)} (rewards/tasks.py)",
                f"did you mean DATASET_GENERATOR={close[0]}?"
                if close
                else f"use one of {', '.join(TASKS)}, or DATASET_GENERATOR= (empty) with DATASET=<your file>",
            )
        return value

    @field_validator("DISABLE_HOOKS", mode="before")
    @classmethod
    def _hook_names(cls, value: str) -> str:
        """Names separated by commas (spaces around them and case ignored), each a hook of
        entrypoint/child/hooks/; kept as "a,b" in the registry's order."""
        names = [n.strip().lower() for n in str(value).split(",") if n.strip()]
        unknown = [n for n in names if n not in HOOK_NAMES]
        if unknown:
            close = difflib.get_close_matches(unknown[0], HOOK_NAMES, n=1)
            fix = f"did you mean DISABLE_HOOKS={close[0]}?" if close else "name hooks from the list above"
            raise Refused(
                f"{', '.join(map(repr, unknown))} "
                f"{'is not a hook' if len(unknown) == 1 else 'are not hooks'}; hooks: "
                f"{', '.join(HOOK_NAMES)} (entrypoint/child/hooks/)",
                fix,
            )
        return ",".join(n for n in HOOK_NAMES if n in names)

    @property
    def disabled_hooks(self) -> frozenset[str]:
        """The hook names DISABLE_HOOKS leaves out."""
        return frozenset(filter(None, self.DISABLE_HOOKS.split(",")))

    @field_validator("RUN_NAME")
    @classmethod
    def _run_name(cls, value: str) -> str:
        problem = run_name_problem(value)
        if problem:
            raise Refused(*problem)
        return value

    @field_validator("OUTPUT_DIR")
    @classmethod
    def _output_dir(cls, value: str) -> str:
        why = too_long(value)
        if why:
            raise Refused(
                f"{_shown(value)!r} cannot be a directory: {why}",
                f"choose a shorter OUTPUT_DIR: names of at most {NAME_MAX} bytes, {PATH_MAX - 1} bytes in "
                "all",
            )
        return value

    @field_validator("EVAL_ENGINE", mode="before")
    @classmethod
    def _lower(cls, value: str) -> str:
        return str(value).strip().lower()

    @field_validator("ROLLOUT_HOST", "ROLLOUT_BIND", "MASTER_ADDR", mode="before")
    @classmethod
    def _address(cls, value: str, info: ValidationInfo) -> str:
        """A bare host name or IP: no scheme, port or path (ms-swift takes the port separately). A URL or
        host:port is refused with the key line that splits it."""
        value = str(value).strip()
        if "://" in value or "/" in value or (value.count(":") == 1):
            host, port = split_address(value)
            port_key = "MASTER_PORT" if info.field_name == "MASTER_ADDR" else "ROLLOUT_PORT"
            line = f"{info.field_name}={host}" + (f" {port_key}={port}" if port else "") if host else ""
            raise Refused(
                f"{value!r} is not a bare address: write the host or IP only (the port has its own key, "
                f"{port_key})",
                f"write {line}" if line else f"set {info.field_name} to a host name or IP address",
            )
        return value


def accepted(field) -> str:
    """The values an owned key accepts, read from the same field that checks them (for `keys`)."""
    import typing

    annotation = field.annotation
    if typing.get_origin(annotation) is typing.Literal:
        return " | ".join(repr(v) if v == "" else str(v) for v in typing.get_args(annotation))
    if annotation is bool:
        return "true | false"
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    floor = extra.get("least")  # a time setting's least (settings.least)
    bounds = [f"0 (automatic) or >= {floor:g}" if field.default == 0 else f">= {floor:g}"] if floor else []
    for item in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(item, attr, None) is not None:
                bounds.append(f"{sign} {getattr(item, attr)}")
    kind = {int: "integer", float: "number", str: "text"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )
    return f"{kind} {' and '.join(bounds)}".strip()
