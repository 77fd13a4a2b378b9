"""Plan: recipe + inventory -> the exact processes a run will execute, with no side effects.

`build()` is a pure function of its inputs (the port chooser is injected), so `plan` works on a machine
with no GPU and tests feed it made-up machines. `train` executes the same Plan.

Each process lists only the environment the entrypoint sets on top of its own (inherited) environment,
and its full argv.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from entrypoint import layout as layout_mod
from entrypoint import models, nccl, ports
from entrypoint.errors import Problem
from entrypoint.hardware import Inventory
from entrypoint.keys import SHARED_WITH_ROLLOUT
from entrypoint.layout import Layout
from entrypoint.recipe import PROJECT_DIR, Recipe
from entrypoint.redact import argv as redact_argv
from entrypoint.redact import env as redact_env

PLUGIN_FILE = Path(__file__).resolve().parent / "plugins" / "grpo_rig_rewards.py"


def swift_executable() -> str:
    """ms-swift's CLI: GRPO_RIG_SWIFT if set (tests put a fake there), else the one installed beside
    this interpreter (the venv may not be on PATH), else `swift` from PATH."""
    if os.environ.get("GRPO_RIG_SWIFT"):
        return os.environ["GRPO_RIG_SWIFT"]
    beside = Path(sys.executable).parent / "swift"
    return str(beside) if beside.exists() else (shutil.which("swift") or "swift")


TRAIN_SUBDIR = "train"  # ms-swift's output_dir inside the run directory
EVENTS_FILE = "events.jsonl"  # the trainer's phase timings (entrypoint/site/sitecustomize.py)
SITE_DIR = Path(__file__).resolve().parent / "site"
SITE_HOOK_VARIABLES = ("GRPO_RIG_EMULATE_VRAM_GB", "GRPO_RIG_VLLM_KEEP_POOLS", "GRPO_RIG_EVENTS")


@dataclasses.dataclass(frozen=True)
class Process:
    role: str  # "rollout" | "trainer"
    env: dict[str, str]  # set by the entrypoint, on top of the inherited environment
    argv: list[str]
    health_url: str = ""  # rollout: GET this until 200 before starting the trainer

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "env": redact_env(self.env), "argv": redact_argv(self.argv)}

    def render(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(redact_env(self.env).items()))
        return f"[{self.role}]\n  env: {env or '-'}\n  argv: {shlex.join(redact_argv(self.argv))}"


@dataclasses.dataclass(frozen=True)
class Plan:
    recipe: Recipe
    inventory: Inventory
    layout: Layout
    nccl: nccl.Policy
    run_name: str
    run_dir: Path
    model_path: str  # what --model gets (an embedded model's converted directory, else MODEL)
    dataset_paths: list[str]
    processes: list[Process]
    steps: list[str]  # in-process work before the children start (dataset generation, ...)
    problems: list[Problem]  # fatal and warnings found while planning
    resume_from: str = ""
    placed: bool = True  # False: no layout was possible (its problems say why); nothing else is checked
    memory: list = dataclasses.field(default_factory=list)  # memory.GpuEstimate per GPU, set by preflight
    memory_note: list = dataclasses.field(default_factory=list)

    @property
    def train_dir(self) -> Path:
        return self.run_dir / TRAIN_SUBDIR

    @property
    def shape(self) -> list[tuple[str, str, str]]:
        """(key, value, reason) of every value the planner chose (entrypoint/shape.py)."""
        return [
            (k, v.value, v.source.removeprefix("planner: "))
            for k, v in self.recipe.values.items()
            if v.source.startswith("planner")
        ]

    def process(self, role: str) -> Process | None:
        return next((p for p in self.processes if p.role == role), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe.name,
            "run_name": self.run_name,
            "run_dir": str(self.run_dir),
            "layout": {
                "mode": self.layout.mode,
                "train_gpus": list(self.layout.train_gpus),
                "rollout_gpus": list(self.layout.rollout_gpus),
                "rollout_host": self.layout.rollout_host,
                "nproc_per_node": self.layout.nproc_per_node,
                "description": self.layout.describe(),
            },
            "gpus": [g.model_dump() for g in self.inventory.gpus],
            "nccl": [dataclasses.asdict(d) for d in self.nccl.decisions],
            "shape": [{"key": k, "value": v, "reason": why} for k, v, why in self.shape],
            "steps": self.steps,
            "memory": [
                {
                    "gpu": e.gpu,
                    "role": e.role,
                    "card_gib": round(e.card_gib, 2),
                    "peak_gib": round(e.peak_gib, 2),
                    "parts": {k: round(v, 2) for k, v in e.parts.items()},
                }
                for e in self.memory
            ],
            "resume_from": self.resume_from,
            "processes": [p.to_json() for p in self.processes],
            "warnings": [p.render() for p in self.problems if not p.fatal],
        }

    def render(self) -> str:
        lines = [f"recipe {self.recipe.name} -> run {self.run_name} in {self.run_dir}"]
        lines.append(f"inventory ({self.inventory.source}):")
        lines += ["  " + line for line in self.inventory.table().splitlines()]
        lines.append(f"layout: {self.layout.describe()}")
        if self.shape:
            lines.append(
                "batch shape, chosen by the planner where the recipe leaves it open (AUTO_SHAPE=false: off):"
            )
            lines += [f"  {key}={value}: {why}" for key, value, why in self.shape]
        lines.append("nccl:")
        lines += [f"  {d.render()}" for d in self.nccl.decisions]
        if self.memory:
            lines.append("memory (predicted peak per GPU, GiB):")
            lines += [f"  {e.render()}" for e in self.memory]
            lines += [f"  ({note})" for note in self.memory_note]
        if self.resume_from:
            lines.append(f"resume: from {self.resume_from}")
        for step in self.steps:
            lines.append(f"step: {step}")
        lines += [p.render() for p in self.processes]
        s = self.recipe.settings
        if s.NNODES > 1:
            lines.append(
                f"nodes: {s.NNODES}; run the same command on every node, each with its own NODE_RANK:"
            )
            for rank in range(s.NNODES):
                mark = "  (this node)" if rank == s.NODE_RANK else ""
                lines.append(
                    f"  node {rank}: docker compose run --rm train recipe={self.recipe.name} RUN_NAME={self.run_name} "
                    f"NNODES={s.NNODES} NODE_RANK={rank} MASTER_ADDR={s.MASTER_ADDR} MASTER_PORT={s.MASTER_PORT}{mark}"
                )
            lines.append(
                f"  open between nodes: TCP {s.MASTER_PORT} (torchrun), {s.MASTER_PORT + 1} (node check), NCCL's ports"
            )
        lines += [p.render() for p in self.problems if not p.fatal]
        return "\n".join(lines)


def default_run_name(recipe_name: str, now: dt.datetime) -> str:
    return f"{Path(recipe_name).stem}-{now.strftime('%Y%m%d-%H%M%S')}"


def _args(mapping: Mapping[str, list[str]], skip: set[str] = frozenset()) -> list[str]:
    out: list[str] = []
    for name, tokens in mapping.items():
        if name not in skip:
            out += [f"--{name}", *tokens]
    return out


def _resolve_file(value: str) -> str:
    """A relative file path from a recipe resolves against the project directory when it exists there."""
    path = Path(value)
    if path.is_absolute() or not (PROJECT_DIR / path).exists():
        return value
    return str(PROJECT_DIR / path)


def _absolute_if_local(spec: str) -> str:
    """A relative dataset path that exists here (optionally with ms-swift's #N suffix) made absolute."""
    path, sep, rows = spec.partition("#")
    if Path(path).is_absolute() or not Path(path).exists():
        return spec
    return str(Path(path).absolute()) + sep + rows


def build(
    recipe: Recipe,
    inventory: Inventory,
    environ: Mapping[str, str],
    now: dt.datetime | None = None,
    choose_port: Callable[[int, str], int | None] = ports.first_free,
    ephemeral_port: Callable[[], int] = ports.ephemeral,
    resume_from: str = "",
    rollout_only: bool = False,
) -> Plan:
    """Turn a resolved recipe and an inventory into a Plan. Never raises on bad input: problems are
    collected in `Plan.problems` (callers raise on fatal ones)."""
    s = recipe.settings
    now = now or dt.datetime.now(dt.timezone.utc)
    layout, problems = layout_mod.decide(recipe, inventory, environ, rollout_only)
    placed = layout is not None
    if layout is None:
        layout = Layout(mode="cpu", train_gpus=(), rollout_gpus=(), rollout_host="")
    user_nccl = {k: (v.value, v.source) for k, v in recipe.nccl.items()}
    policy = nccl.decide(
        inventory,
        layout.used_gpus,
        user_nccl,
        s.ALLOW_P2P_WITHOUT_SUPPORT,
        s.NNODES,
        "GLOO_SOCKET_IFNAME" in recipe.env or "GLOO_SOCKET_IFNAME" in environ,
    )
    problems += policy.problems

    run_name = s.RUN_NAME or default_run_name(recipe.name, now)
    run_dir = (Path(s.OUTPUT_DIR).expanduser() / run_name).absolute()
    steps: list[str] = []
    trainer_args = dict(recipe.trainer)

    # Model
    model_value = trainer_args.pop("model", [""])[0]
    model_path = model_value
    if not model_value:
        problems.append(Problem("MODEL", "no model named", "set MODEL=<hub id or /path/to/model>"))
    elif s.MODEL_SOURCE == "embedded":
        try:
            embedded = models.lookup(model_value)
        except KeyError as exc:
            problems.append(
                Problem(f"MODEL ({recipe.source('MODEL')})", str(exc.args[0]), "set MODEL_SOURCE=hub")
            )
        else:
            model_path = str(models.model_dir(embedded, Path(s.EMBEDDED_MODEL_DIR)))
            trainer_args.setdefault("model_type", [embedded.model_type])
            trainer_args.setdefault("template", [embedded.template])

    # Dataset
    dataset_paths = trainer_args.pop("dataset", [])
    if s.DATASET_GENERATOR:
        if dataset_paths and recipe.layer("DATASET_GENERATOR") > recipe.layer("DATASET"):
            problems.append(
                Problem(
                    f"DATASET ({recipe.source('DATASET')})",
                    f"replaced by DATASET_GENERATOR={s.DATASET_GENERATOR} ({recipe.source('DATASET_GENERATOR')}), "
                    "which a later layer set",
                    fatal=False,
                )
            )
        elif dataset_paths:
            problems.append(
                Problem(
                    "DATASET",
                    f"set together with DATASET_GENERATOR={s.DATASET_GENERATOR} in the same layer",
                    "keep one of the two",
                )
            )
        generated = run_dir / "data" / f"{s.DATASET_GENERATOR}.jsonl"
        seed = int(trainer_args.get("seed", ["42"])[0])
        steps.append(f"generate {s.DATASET_ROWS} {s.DATASET_GENERATOR} tasks (seed {seed}) into {generated}")
        dataset_paths = [str(generated)]
    elif not dataset_paths:
        problems.append(Problem("DATASET", "no dataset named", "set DATASET=/data/train.jsonl (or a hub id)"))
    else:
        dataset_paths = [_absolute_if_local(d) for d in dataset_paths]

    if "system" in trainer_args:
        trainer_args["system"] = [_resolve_file(trainer_args["system"][0])]
    plugins = [str(PLUGIN_FILE)] + [_resolve_file(p) for p in trainer_args.pop("external_plugins", [])]

    # Environment common to the children
    common: dict[str, str] = {"PYTHONUNBUFFERED": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    common.update(policy.env)
    common.update(recipe.env)
    if s.OFFLINE:
        common.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    no_proxy = [v for v in (environ.get("NO_PROXY", ""), "127.0.0.1,localhost,::1") if v]
    if (
        environ.get("HTTP_PROXY")
        or environ.get("HTTPS_PROXY")
        or environ.get("http_proxy")
        or environ.get("https_proxy")
    ):
        # The trainer's HTTP client to the rollout server must not go through a proxy.
        common["NO_PROXY"] = common["no_proxy"] = ",".join(no_proxy)
    if s.EMULATE_VRAM_GB:
        common["GRPO_RIG_EMULATE_VRAM_GB"] = str(s.EMULATE_VRAM_GB)
    processes: list[Process] = []
    server_flags: list[str] = []
    if layout.mode == "server":
        port = s.ROLLOUT_PORT
        if layout.local_rollout:
            if not port:
                port = choose_port(ports.ROLLOUT_PORT_START, s.ROLLOUT_BIND) or 0
                if not port:
                    problems.append(
                        Problem(
                            "ROLLOUT_PORT", "no free port in 8000-8099", "set ROLLOUT_PORT to a free port"
                        )
                    )
            rollout_shared = {k: trainer_args[k] for k in recipe_shared(trainer_args)}
            rollout_argv = (
                [swift_executable(), "rollout", "--model", model_path]
                + _args(rollout_shared)
                + ["--external_plugins", *plugins]
                + ["--host", s.ROLLOUT_BIND, "--port", str(port)]
                + [
                    "--tensor_parallel_size",
                    str(layout.rollout_tp),
                    "--data_parallel_size",
                    str(layout.rollout_dp),
                ]
                + _args(recipe.rollout, skip={"tensor_parallel_size"})
            )
            processes.append(
                Process(
                    role="rollout",
                    env={**common, "CUDA_VISIBLE_DEVICES": ",".join(map(str, layout.rollout_gpus))},
                    argv=rollout_argv,
                    health_url=f"http://{layout.rollout_host}:{port}/health/",
                )
            )
        elif not port:
            port = ports.ROLLOUT_PORT_START
        server_flags = [
            "--vllm_mode", "server",
            "--vllm_server_host", layout.rollout_host, "--vllm_server_port", str(port),
            "--vllm_server_timeout", str(int(s.ROLLOUT_STARTUP_TIMEOUT)),
        ]  # fmt: skip
        trainer_args.pop("vllm_server_timeout", None)
    elif layout.mode == "colocate":
        server_flags = ["--vllm_mode", "colocate"]

    trainer_env = dict(common)
    # The trainer's hooks (entrypoint/site/sitecustomize.py says why each exists).
    trainer_env["GRPO_RIG_EVENTS"] = str(run_dir / "logs" / EVENTS_FILE)
    if layout.mode == "colocate" and int((trainer_args.get("sleep_level") or ["0"])[0]) >= 1:
        trainer_env["GRPO_RIG_VLLM_KEEP_POOLS"] = "1"
    if layout.train_gpus:
        trainer_env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, layout.train_gpus))
        trainer_env["NPROC_PER_NODE"] = str(layout.nproc_per_node)
    else:
        trainer_env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run must not initialise a GPU it was not given
    if s.NNODES > 1:
        trainer_env.update(
            {
                "NNODES": str(s.NNODES),
                "NODE_RANK": str(s.NODE_RANK),
                "MASTER_ADDR": s.MASTER_ADDR,
                "MASTER_PORT": str(s.MASTER_PORT),
            }
        )
        trainer_env.setdefault("NPROC_PER_NODE", "1")
    elif layout.nproc_per_node > 1 or layout.train_gpus:
        # torchrun's default 29500 collides with any other run on the host; pick a free one unless set.
        trainer_env["MASTER_PORT"] = str(s.MASTER_PORT if recipe.is_set("MASTER_PORT") else ephemeral_port())

    trainer_argv = [swift_executable(), "rlhf", "--rlhf_type", "grpo", "--model", model_path]
    trainer_argv += ["--dataset", *dataset_paths] if dataset_paths else []
    trainer_argv += _args(trainer_args)
    trainer_argv += server_flags
    trainer_argv += ["--external_plugins", *plugins]
    trainer_argv += [
        "--output_dir",
        str(run_dir / TRAIN_SUBDIR),
        "--add_version",
        "false",
        "--run_name",
        run_name,
    ]
    if resume_from:
        trainer_argv += ["--resume_from_checkpoint", resume_from]
    if not rollout_only:
        processes.append(Process(role="trainer", env=trainer_env, argv=trainer_argv))

    processes = [_with_site_hooks(p, environ) for p in processes]

    if layout.local_rollout:
        for port_needed, what in (
            (ports.WEIGHT_SYNC_PORT, "the weight-sync rendezvous (fixed in ms-swift 3.6.4)"),
        ):
            if not ports.is_free(port_needed, "127.0.0.1"):
                problems.append(
                    Problem(
                        f"port {port_needed}",
                        f"is in use; it is {what}",
                        "stop the other GRPO run or rollout server on this machine (only one server-mode run fits per host)",
                    )
                )

    problems += recipe.warnings
    return Plan(
        recipe=recipe,
        inventory=inventory,
        layout=layout,
        nccl=policy,
        run_name=run_name,
        run_dir=run_dir,
        model_path=model_path,
        dataset_paths=dataset_paths,
        processes=processes,
        steps=steps,
        problems=problems,
        resume_from=resume_from,
        placed=placed,
    )


def _with_site_hooks(process: Process, environ: Mapping[str, str]) -> Process:
    """Put entrypoint/site first on PYTHONPATH of a child that has a GRPO_RIG_* hook variable."""
    if not any(k in process.env for k in SITE_HOOK_VARIABLES):
        return process
    path = [str(SITE_DIR)] + ([environ["PYTHONPATH"]] if environ.get("PYTHONPATH") else [])
    return dataclasses.replace(process, env={**process.env, "PYTHONPATH": ":".join(path)})


def recipe_shared(trainer_args: Mapping[str, list[str]]) -> list[str]:
    """Trainer arguments the rollout server must share (same template, dtype, ...)."""
    return [k.lower() for k in SHARED_WITH_ROLLOUT if k.lower() in trainer_args and k != "MODEL"]


def dumps(plan: Plan) -> str:
    return json.dumps(plan.to_json(), indent=2)
