"""Plan: recipe + inventory + facts -> the exact processes a run will execute. A pure function.

`build(recipe, inventory, facts)` reads nothing but its arguments (host.gather read the world once), so
`plan` works on a machine with no GPU and tests feed it made-up machines; `train` executes the same Plan.
It runs once and is a short list of named stages, each a screen at most:

    _layout       which GPUs train and serve the rollout (layout.py)
    _nccl         the NCCL variables and why (nccl.py)
    _run          run name and directory; resume from the newest complete checkpoint
    _model        what --model gets (an embedded model's converted directory)
    _dataset      the dataset files, or the generator that writes one
    _budget       the batch arithmetic, the workload and vLLM's settings, once per shape (budget.py)
    _shape        the batch shape the planner chooses where the recipe leaves it open (shape.py)
    _child_env    the environment every child gets
    _rollout      the `swift rollout` server (server mode on this node)
    _trainer      the `swift rlhf` trainer
    _export       the merged export after training (EXPORT_MERGED=true)
    _memory       the per-GPU memory estimate of the budget (budget.py, memory.py)

Each process lists only the environment the entrypoint sets on top of the inherited one, and its argv.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from entrypoint.child import hooks
from entrypoint.errors import Problem
from entrypoint.facts import catalog
from entrypoint.facts.facts import MANIFEST, ROLLOUT_PORT_START, WEIGHT_SYNC_PORT, Facts, resolved, run_dir_of
from entrypoint.facts.inventory import Inventory
from entrypoint.plan import budget as budget_mod
from entrypoint.plan import layout as layout_mod
from entrypoint.plan import memory, nccl, schedule, shape, speed
from entrypoint.plan.budget import Budget
from entrypoint.plan.layout import Layout
from entrypoint.plan.memory import GpuEstimate
from entrypoint.recipe import keys
from entrypoint.recipe.keys import SHARED_WITH_ROLLOUT
from entrypoint.recipe.load import Choice, Origin, Recipe
from entrypoint.redact import argv as redact_argv
from entrypoint.redact import env as redact_env
from entrypoint.rewards import PLUGIN_FILE

TRAIN_SUBDIR = "train"  # ms-swift's output_dir inside the run directory
EVENTS_FILE = "events.jsonl"  # the trainer's phase timings (entrypoint/child/hooks/events.py)
INPUTS_FILE = (
    "inputs.json"  # the dataset files' sha256 the trainer checks (entrypoint/child/hooks/inputs_check.py)
)
SITE_DIR = Path(__file__).resolve().parents[1] / "child" / "site"  # its sitecustomize installs the hooks
SITE_HOOK_VARIABLES = tuple(h.variable for h in hooks.ALL)  # the GRPO_RIG_* variables that turn hooks on
CHECKPOINT = "<newest complete checkpoint>"  # the export's --adapters, known once training ends


Role = Literal["rollout", "trainer", "export"]


@dataclasses.dataclass(frozen=True)
class Shaped:
    """A value the planner chose: its key, its text as the argv and the manifest have it, and why."""

    key: str
    value: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Flag:
    """One `--name value ...` of a child's command line, as the plan built it."""

    name: str  # without the dashes
    values: tuple[str, ...] = ()

    def words(self) -> list[str]:
        return [f"--{self.name}", *self.values]


def flags(*pairs: tuple[str, object]) -> list[Flag]:
    """Flags of (name, value) pairs, each value one word (str of it)."""
    return [Flag(name, (str(value),)) for name, value in pairs]


@dataclasses.dataclass(frozen=True)
class Process:
    role: Role
    env: dict[str, str]  # set by the entrypoint, on top of the inherited environment
    argv: list[str]  # written from `command` and `flags` (Process.of) where the plan builds it
    host: str = ""  # rollout: the address the trainer reaches it at
    port: int | None = None  # rollout: its HTTP port
    command: tuple[str, ...] = ()  # the program's words before the flags
    flags: tuple[Flag, ...] = ()  # what follows them, typed: readers take a flag from here, never from argv

    @classmethod
    def of(
        cls, role: Role, env: dict[str, str], command: list[str], flags: list[Flag], **where: Any
    ) -> Process:
        """The process running `command` with `flags`: the one place a child's argv is written."""
        argv = [*command, *(word for f in flags for word in f.words())]
        return cls(role, env, argv, command=tuple(command), flags=tuple(flags), **where)

    def flag(self, name: str) -> tuple[str, ...] | None:
        """The values of `--name` (None when the process has no such flag)."""
        return next((f.values for f in self.flags if f.name == name), None)

    @property
    def health_url(self) -> str:
        """rollout: GET this until 200 before starting the trainer ("" for the others)."""
        return f"http://{self.host}:{self.port}/health/" if self.port else ""

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
    model_path: str  # what --model gets (an embedded model's converted directory, an OFFLINE run's local
    #                  snapshot, else MODEL)
    dataset_paths: list[str]
    processes: list[Process]  # started in this order; `export` runs after training, not with the others
    steps: list[str]  # in-process work before the children start (dataset generation, ...)
    problems: list[Problem]  # fatal and warnings found while planning
    resume_from: str = ""
    placed: bool = True  # False: no layout was possible (its problems say why); nothing else is checked
    memory: tuple[GpuEstimate, ...] = ()  # per GPU
    memory_note: tuple[str, ...] = ()
    host_ram: tuple[tuple[str, float], ...] = ()  # (part, GiB) the offloaded copies need (budget.host_ram)
    budget: Budget | None = dataclasses.field(default=None, repr=False, compare=False)
    facts: Facts | None = dataclasses.field(default=None, repr=False, compare=False)
    offline: bool = False  # no hub access (OFFLINE, or a hub's offline variable in the environment)

    @property
    def train_dir(self) -> Path:
        return self.run_dir / TRAIN_SUBDIR

    @property
    def shape(self) -> list[Shaped]:
        """Every value the planner chose (entrypoint/shape.py), with its reason."""
        return [
            Shaped(k, v.value, v.detail) for k, v in self.recipe.values.items() if v.origin is Origin.PLANNER
        ]

    @property
    def hooks_off(self) -> list[hooks.Hook]:
        """The hooks DISABLE_HOOKS leaves out of every child, in install order."""
        return [h for h in hooks.ALL if h.name in self.recipe.settings.disabled_hooks]

    def render_hooks_off(self) -> list[str]:
        """'hooks off by DISABLE_HOOKS: a, b', then a line of what each is about (its `why`); [] for none."""
        off = self.hooks_off
        if not off:
            return []
        head = (
            f"hooks off by DISABLE_HOOKS ({self.recipe.source('DISABLE_HOOKS')}): "
            f"{', '.join(h.name for h in off)}"
        )
        return [head] + [f"  {h.name}: {h.gist}" for h in off]

    def process(self, role: Role) -> Process | None:
        return next((p for p in self.processes if p.role == role), None)

    @property
    def step_seconds(self) -> float:
        """The predicted seconds of one optimizer step on one process (speed.py: training, plus the colocated
        generation round where its engine was measured); 0.0 where the model's dimensions are unknown. Fitted
        on a 0.5B model on an H200: a floor for larger models and slower cards, not a forecast."""
        b = self.budget
        if b is None or b.workload is None or b.batch is None:
            return 0.0
        per_process = shape.step_completions(self.recipe, b.batch).per_process or b.batch.per_device
        seconds = speed.training_time(b.workload, per_process).seconds
        if self.layout.mode == "colocate" and b.colocate is not None:
            # multi-step scheduling exists on vLLM's V0 engine only
            steps = self.recipe.settings.VLLM_SCHEDULER_STEPS if b.colocate.engine_v0 else 0
            gen = speed.generation_time(b.workload, steps, b.colocate.engine_v0)
            seconds += gen.seconds if gen else 0.0
        return seconds

    @property
    def written(self) -> list[str]:
        """Every path this plan tells a process to write (each --output_dir, the events file, a generated
        dataset): preflight proves each is inside the run directory, so no run writes outside its own."""
        paths = [str(self.train_dir), *(self.dataset_paths if self.recipe.settings.DATASET_GENERATOR else [])]
        for p in self.processes:
            # the words that run (a caller may rewrite them: train's export checkpoint), not the flags they
            # came from
            paths += [p.argv[i + 1] for i, a in enumerate(p.argv[:-1]) if a == "--output_dir"]
            paths += [p.env["GRPO_RIG_EVENTS"]] if "GRPO_RIG_EVENTS" in p.env else []
        return paths

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
            "shape": [{"key": c.key, "value": c.value, "reason": c.reason} for c in self.shape],
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
            **({"host_ram_gib": {k: round(v, 2) for k, v in self.host_ram}} if self.host_ram else {}),
            "resume_from": self.resume_from,
            # only when some are off: the plans of the shipped recipes read as before (tests/golden)
            **(
                {"hooks_off": [{"name": h.name, "why": h.why} for h in self.hooks_off]}
                if self.hooks_off
                else {}
            ),
            "processes": [p.to_json() for p in self.processes],
            "warnings": [p.render() for p in self.problems if not p.fatal],
        }

    def host_ram_line(self) -> str:
        """What the run keeps in this node's RAM (the one-weight-copy path), against what the inventory
        says."""
        need = sum(v for _, v in self.host_ram)
        parts = ", ".join(f"{k} {v:.1f}" for k, v in self.host_ram)
        free = self.inventory.ram_free_gib
        have = (
            f"this machine has {free:.1f} GiB available"
            + (f" of {self.inventory.ram_total_bytes / 2**30:.1f}" if self.inventory.ram_total_bytes else "")
            if free is not None
            else "the inventory does not record RAM (doctor --save-inventory records it)"
        )
        return f"host RAM: about {need:.1f} GiB for what waits in CPU memory [{parts}]; {have}"

    def render(self) -> str:
        lines = [f"recipe {self.recipe.name} -> run {self.run_name} in {self.run_dir}"]
        lines.append(f"inventory ({self.inventory.source}):")
        lines += ["  " + line for line in self.inventory.table().splitlines()]
        lines.append(f"layout: {self.layout.describe()}")
        if self.shape:
            lines.append(
                "batch shape, chosen by the planner where the recipe leaves it open (switch off: "
                "AUTO_SHAPE=false):"
            )
            lines += [f"  {c.key}={c.value}: {c.reason}" for c in self.shape]
        lines.append("nccl:")
        lines += [f"  {d.render()}" for d in self.nccl.decisions]
        if self.memory:
            lines.append("memory (predicted peak per GPU, GiB):")
            lines += [f"  {e.render()}" for e in self.memory]
            lines += [f"  ({note})" for note in self.memory_note]
            if self.host_ram:
                lines.append(f"  {self.host_ram_line()}")
        if self.resume_from:
            lines.append(f"resume: from {self.resume_from}")
        lines += [f"step: {step}" for step in self.steps]
        lines += self.render_hooks_off()
        lines += [p.render() for p in self.processes]
        lines += _render_nodes(self)
        lines += [p.render() for p in self.problems if not p.fatal]
        return "\n".join(lines)


def _render_nodes(plan: Plan) -> list[str]:
    s = plan.recipe.settings
    if s.NNODES <= 1:
        return []
    lines = [f"nodes: {s.NNODES}; run the same command on every node, each with its own NODE_RANK:"]
    for rank in range(s.NNODES):
        mark = "  (this node)" if rank == s.NODE_RANK else ""
        lines.append(
            f"  node {rank}: docker compose run --rm train recipe={plan.recipe.name} "
            f"RUN_NAME={plan.run_name} NNODES={s.NNODES} NODE_RANK={rank} MASTER_ADDR={s.MASTER_ADDR} "
            f"MASTER_PORT={s.MASTER_PORT}{mark}"
        )
    lines.append(
        f"  open between nodes: TCP {s.MASTER_PORT} (torchrun), {s.MASTER_PORT + 1} (node check), NCCL's "
        "ports"
    )
    return lines


def _args(mapping: Mapping[str, list[str]], skip: set[str] = frozenset()) -> list[Flag]:
    return [Flag(name, tuple(tokens)) for name, tokens in mapping.items() if name not in skip]


@dataclasses.dataclass
class Draft:
    """What the stages build up; `build` freezes it into a Plan."""

    recipe: Recipe
    inventory: Inventory
    facts: Facts
    rollout_only: bool
    problems: list[Problem]
    layout: Layout | None = None
    nccl: nccl.Policy | None = None
    run_name: str = ""
    run_dir: Path = Path()
    resume_from: str = ""
    resume_problems: list[Problem] = dataclasses.field(default_factory=list)
    trainer_args: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    model_path: str = ""
    offline: bool = False
    dataset_paths: list[str] = dataclasses.field(default_factory=list)
    steps: list[str] = dataclasses.field(default_factory=list)
    plugins: list[str] = dataclasses.field(default_factory=list)
    common: dict[str, str] = dataclasses.field(default_factory=dict)
    processes: list[Process] = dataclasses.field(default_factory=list)
    server_flags: list[Flag] = dataclasses.field(default_factory=list)
    budget: Budget | None = None


def draft(recipe: Recipe, inventory: Inventory, facts: Facts, rollout_only: bool = False) -> Draft:
    """The stages up to the batch shape: layout, NCCL, run directory, model, dataset. Without a layout
    (draft.layout None: no GPU for a GPU recipe) the stages that read none still run, so the recipe's other
    problems are found at once."""
    d = Draft(recipe, inventory, facts, rollout_only, [])
    if _layout(d):
        _nccl(d)
    _run(d)
    _model(d)
    _dataset(d)
    return d


def build(recipe: Recipe, inventory: Inventory, facts: Facts, rollout_only: bool = False) -> Plan:
    """Turn a resolved recipe, an inventory and the host's facts into a Plan. Never raises on bad input:
    problems are collected in `Plan.problems` (callers raise on fatal ones)."""
    d = draft(recipe, inventory, facts, rollout_only)
    if d.layout is None:  # the recipe's and the dataset's problems still count (preflight.check_unplaced)
        d.problems += d.recipe.problems + d.resume_problems
        return _frozen(d, placed=False)
    _context(d)
    _budget(d)
    if _shape(d):  # the planner set values: the stages that read them run on the shaped recipe
        d.problems.clear()
        _layout(d), _nccl(d), _model(d), _dataset(d), _budget(d)
    _child_env(d)
    _rollout(d)
    _trainer(d)
    _export(d)
    d.problems += d.recipe.problems + d.resume_problems
    return _memory(_frozen(d, placed=True))


def _frozen(d: Draft, placed: bool) -> Plan:
    layout = d.layout or Layout(mode="cpu", train_gpus=(), rollout_gpus=(), rollout_host="")
    policy = d.nccl or nccl.Policy({}, [], [])
    run_name = d.run_name or run_dir_of(d.recipe, d.facts.now).name
    return Plan(
        recipe=d.recipe,
        inventory=d.inventory,
        layout=layout,
        nccl=policy,
        run_name=run_name,
        run_dir=d.run_dir if d.run_name else run_dir_of(d.recipe, d.facts.now),
        model_path=d.model_path,
        dataset_paths=d.dataset_paths,
        processes=d.processes,
        steps=d.steps,
        problems=d.problems,
        resume_from=d.resume_from,
        placed=placed,
        facts=d.facts,
        offline=d.offline,
        budget=d.budget,
    )


def _layout(d: Draft) -> bool:
    d.layout = layout_mod.decide(
        d.recipe, d.inventory, d.facts.env, d.rollout_only, d.problems, in_container=d.facts.in_container
    )
    return d.layout is not None


def _nccl(d: Draft) -> None:
    s = d.recipe.settings
    user = dict(d.recipe.nccl)
    gloo_set = "GLOO_SOCKET_IFNAME" in d.recipe.env or "GLOO_SOCKET_IFNAME" in d.facts.env
    d.nccl = nccl.decide(
        d.inventory, d.layout.used_gpus, user, s.ALLOW_P2P_WITHOUT_SUPPORT, s.NNODES, gloo_set
    )
    d.problems += d.nccl.problems


def _run(d: Draft) -> None:
    """Run directory, and what a restart of it resumes (the recipe must train the same thing)."""
    d.run_dir = run_dir_of(d.recipe, d.facts.now)
    d.run_name = d.run_dir.name
    previous = d.facts.previous
    where = f"RUN_NAME {d.run_name}"
    if previous.error:
        d.resume_problems.append(
            Problem(
                where,
                f"{d.run_dir / MANIFEST} exists but cannot be read ({previous.error})",
                "move that run directory aside, or choose another RUN_NAME",
            )
        )
    if previous.manifest is None:
        return
    before = previous.manifest.get("identity", {})
    changed = {k: (before.get(k, ""), v) for k, v in d.recipe.identity().items() if before.get(k, "") != v}
    if changed:
        detail = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
        d.resume_problems.append(
            Problem(
                where,
                f"exists and was started with a different recipe ({detail})",
                "restore those values to resume it, or choose a new RUN_NAME for a new run",
            )
        )
    if isinstance(previous.manifest.get("resolved_recipe"), dict):
        d.resume_problems += _resume_changes(d, previous.manifest["resolved_recipe"])
    d.resume_from = previous.newest_checkpoint


def _resume_changes(d: Draft, before: Mapping[str, Any]) -> list[Problem]:
    """Values changed since the run's last attempt (its manifest's resolved recipe, which lists every key a
    layer set: a key absent from it was unset): refused where the checkpoint restores the old one
    (keys.RESUME_RESTORED), a warning where the steps from here on use the new one (keys.RESUME_CHANGES).
    Nothing to resume, nothing to say."""
    if not d.facts.previous.newest_checkpoint:
        return []

    def changed(names: tuple[str, ...]) -> dict[str, tuple[str, str]]:
        old = {k: str((before.get(k) or {}).get("value", "")) for k in names}
        return {k: (v, d.recipe.raw(k) or "") for k, v in old.items() if v != (d.recipe.raw(k) or "")}

    def said(pairs: dict[str, tuple[str, str]]) -> str:
        return "; ".join(
            f"{k}: {old or '(unset)'!s} -> {new or '(unset)'!s}" for k, (old, new) in pairs.items()
        )

    where, problems = f"RUN_NAME {d.run_name}", []
    restored = changed(keys.RESUME_RESTORED)
    if restored and not d.recipe.trainer_args.resume_only_model:
        problems.append(
            Problem(
                where,
                f"resumes from {d.facts.previous.newest_checkpoint}, whose optimizer and "
                f"learning-rate schedule keep the old values ({said(restored)}): the run would "
                "train with the old ones while its record said the new",
                "restore those values to resume it; or RESUME_ONLY_MODEL=true to resume the weights "
                "with a new optimizer and schedule at the new values; or a new RUN_NAME",
            )
        )
    problems += _resumed_schedule(d, before)
    changes = changed(keys.RESUME_CHANGES)
    if changes:
        problems.append(
            Problem(
                where,
                f"resumes from {d.facts.previous.newest_checkpoint} with changed values "
                f"({said(changes)}): the steps before it used the old ones (manifest.json keeps "
                "each attempt's recipe)",
                "restore them to resume unchanged, or choose a new "
                "RUN_NAME for a run with the new values throughout",
                fatal=False,
            )
        )
    return problems


def _resumed_schedule(d: Draft, before: Mapping[str, Any]) -> list[Problem]:
    """A warning where a resume with another MAX_STEPS trains its new steps at under half of LEARNING_RATE:
    transformers lays the schedule over the new total (plan/schedule.py), so a short extension of a
    finished cosine or linear run trains at that schedule's tail ("train longer" that barely moves)."""
    a = d.recipe.trainer_args
    old_text = str((before.get("MAX_STEPS") or {}).get("value", ""))
    done, total = d.facts.previous.newest_step, a.max_steps
    if (
        a.resume_only_model
        or total <= 0
        or not old_text.isdigit()
        or int(old_text) == total
        or done is None
        or done >= total
        or a.lr_scheduler_type not in schedule.KNOWN
    ):
        return []

    def rate(step: int, max_steps: int) -> float:  # step's share of LEARNING_RATE in a max_steps-step run
        warmup = schedule.warmup_steps(max_steps, a.warmup_ratio, a.warmup_steps)
        return schedule.step_rate(a.lr_scheduler_type, step, max_steps, warmup)

    first = rate(done + 1, total)
    if first >= 0.5:
        return []
    last = rate(total, total)
    span = f"step {total}" if done + 1 == total else f"steps {done + 1}-{total}"
    enough = next((n for n in range(total + 1, 100 * total + 1) if rate(done + 1, n) >= 0.5), None)
    fix = "a larger MAX_STEPS spreads the schedule over more steps" + (
        f": from MAX_STEPS={enough} step {done + 1} trains at half of LEARNING_RATE or more" if enough else ""
    )
    return [
        Problem(
            "MAX_STEPS",
            f"{old_text} -> {total}: the {a.lr_scheduler_type} learning-rate schedule is laid over the new "
            f"{total} steps (transformers rebuilds it for the new total), so {span} train at "
            f"{first:.0%} to {last:.0%} of LEARNING_RATE"
            + (f" {a.learning_rate:g}" if a.learning_rate else ""),
            fix,
            fatal=False,
        )
    ]


OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "MODELSCOPE_OFFLINE", "TRANSFORMERS_OFFLINE")
HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def offline(recipe: Recipe, env: Mapping[str, str]) -> bool:
    """No hub access for this run: OFFLINE=true, or a hub's offline variable set in the environment."""
    truthy = lambda v: (v or "").strip().lower() not in ("", "0", "false", "no", "off")  # noqa: E731
    return recipe.settings.OFFLINE or any(truthy(env.get(k)) for k in OFFLINE_VARIABLES)


def _model(d: Draft) -> None:
    r, s = d.recipe, d.recipe.settings
    d.trainer_args = dict(r.trainer)
    value = d.trainer_args.pop("model", [""])[0]
    d.model_path = value
    d.offline = offline(r, d.facts.env)
    if not value:
        d.problems.append(Problem("MODEL", "no model named", "set MODEL=<hub id or /path/to/model>"))
    elif s.MODEL_SOURCE == "hub" and d.offline and HUB_ID_RE.match(value) and not d.facts.path(value).exists:
        _offline_model(d, value)
    elif s.MODEL_SOURCE == "embedded":
        try:
            embedded = catalog.lookup(value)
        except KeyError as exc:
            # `SmolLM2-135M-Instruct` for `HuggingFaceTB/SmolLM2-135M-Instruct`: name the embedded one first
            near = [
                m for m in catalog.CATALOG if value.lower() in m.lower() or m.lower().endswith(value.lower())
            ]
            fix = f"set MODEL={near[0]}" if near else "name an embedded model"
            d.problems.append(
                Problem(
                    f"MODEL ({r.source('MODEL')})",
                    str(exc.args[0]),
                    f"{fix}, or MODEL_SOURCE=hub to download {value} from the hub",
                )
            )
        else:
            d.model_path = str(catalog.model_dir(embedded, Path(s.EMBEDDED_MODEL_DIR)))
            d.trainer_args.setdefault("model_type", [embedded.model_type])
            d.trainer_args.setdefault("template", [embedded.template])


def _offline_model(d: Draft, value: str) -> None:
    """Point --model at the local snapshot: ms-swift asks ModelScope for a hub id whatever the offline
    variables say (modelscope 1.28 has no offline switch: swift/hub/hub.py:302-313), and it still finds the
    model type from a snapshot's directory name (v3.6.4:swift/llm/model/register.py:390-402)."""
    use_hf = d.recipe.trainer_args.use_hf
    local = d.facts.hub_cached(value, "models", use_hf) or d.facts.hub_cached(value, "models", not use_hf)
    if local:
        d.model_path = local
        return
    hub = "Hugging Face" if use_hf else "ModelScope"
    d.problems.append(
        Problem(
            f"MODEL ({d.recipe.source('MODEL')})",
            f"this run is offline ({_offline_reason(d)}) and {value} has no local snapshot; {hub}'s library "
            f"would look in {d.facts.hub_where(value, 'models', use_hf)}",
            "download it there once with network access (the cache volume keeps it), or set MODEL to a local "
            "directory with config.json",
        )
    )


def _offline_reason(d: Draft) -> str:
    named = [k for k in OFFLINE_VARIABLES if d.facts.env.get(k)]
    return (
        "OFFLINE=true"
        if d.recipe.settings.OFFLINE
        else f"{named[0]}={d.facts.env[named[0]]} in the environment"
    )


def _dataset(d: Draft) -> None:
    r, s = d.recipe, d.recipe.settings
    paths = d.trainer_args.pop("dataset", [])
    d.steps = []
    if s.DATASET_GENERATOR:
        if paths and r.layer("DATASET_GENERATOR") > r.layer("DATASET"):
            d.problems.append(
                Problem(
                    f"DATASET ({r.source('DATASET')})",
                    f"replaced by DATASET_GENERATOR={s.DATASET_GENERATOR} ({r.source('DATASET_GENERATOR')}), "
                    "which a later layer set",
                    fatal=False,
                )
            )
        elif paths:  # a later DATASET replaced the generator already (recipe.load): one layer sets both
            d.problems.append(
                Problem(
                    f"DATASET ({r.source('DATASET')})",
                    f"set together with DATASET_GENERATOR={s.DATASET_GENERATOR} "
                    f"({r.source('DATASET_GENERATOR')}), in the same layer: which one to train on is unclear",
                    "keep one: remove DATASET to train on generated tasks, or write DATASET_GENERATOR= "
                    "(empty) to train on DATASET",
                )
            )
        generated = d.run_dir / "data" / f"{s.DATASET_GENERATOR}.jsonl"
        seed = d.recipe.trainer_args.seed
        d.steps.append(
            f"generate {s.DATASET_ROWS} {s.DATASET_GENERATOR} tasks (seed {seed}) into {generated}"
        )
        d.dataset_paths = [str(generated)]
    elif not paths and "DATASET_GENERATOR" not in r.dropped:  # a refused generator's own error says it
        d.problems.append(
            Problem("DATASET", "no dataset named", "set DATASET=/data/train.jsonl (or a hub id)")
        )
        d.dataset_paths = []
    else:
        d.dataset_paths = [_absolute_if_local(spec, d.facts) for spec in paths]


def _absolute_if_local(spec: str, facts: Facts) -> str:
    """A relative dataset path that exists here (optionally with ms-swift's #N suffix) made absolute."""
    path, sep, rows = spec.partition("#")
    if Path(path).is_absolute() or not facts.path(Path(path)).exists:
        return spec
    return str(Path(path).absolute()) + sep + rows


def _budget(d: Draft) -> None:
    """What the recipe, at its current shape, asks of each GPU (budget.py); read by the later stages."""
    d.budget = budget_mod.compute(d.recipe, d.layout, d.inventory, d.facts, d.dataset_paths)


def _shape(d: Draft) -> bool:
    """The batch shape the planner chooses (shape.py); True when it set values (the recipe changed). The
    one-weight-copy levers first, when nothing else holds the model (shape.one_copy_levers): the shape is
    then chosen on the budget they make."""
    levers = [] if d.rollout_only else shape.one_copy_levers(d.recipe, d.layout, d.budget)
    if levers:
        d.recipe = d.recipe.with_values(levers)
        _budget(d)
    choices, one_copy = _shape_choices(d), bool(levers)
    if not levers and not d.rollout_only and shape.one_copy_open(d.recipe, d.layout, d.budget):
        over = _over_card(d, choices)
        if over:  # both copies fit, nothing trains beside them: one copy at a time, where that fits
            trial = dataclasses.replace(
                d, recipe=d.recipe.with_values(shape.one_copy_levers(d.recipe, d.layout, d.budget, over))
            )
            _budget(trial)
            trial_choices = _shape_choices(trial)
            if not _over_card(trial, trial_choices):
                d.recipe, d.budget, choices, one_copy = trial.recipe, trial.budget, trial_choices, True
    if not choices:
        return one_copy
    d.recipe = d.recipe.with_values(choices)
    return True


def _shape_choices(d: Draft) -> list[shape.Choice]:
    """The rollout share and (for a trainer) the batch shape the planner chooses on d's budget."""
    choices = shape.rollout_share(d.recipe, d.layout, d.budget)
    if not d.rollout_only:  # `rollout` serves; the trainers on other nodes choose their own shape
        choices += shape.choose(d.recipe, d.layout, d.budget)
    return choices


def _over_card(d: Draft, choices: list[shape.Choice]) -> str:
    """Why the recipe shaped by `choices` is predicted over a card ("" when every card holds it)."""
    r = d.recipe.with_values(choices) if choices else d.recipe
    b = budget_mod.compute(r, d.layout, d.inventory, d.facts, d.dataset_paths)
    over = [e for e in b.estimates(d.layout) if e.peak_gib > e.card_gib]
    return (
        (
            "both copies of the weights fit, but even the smallest shape is predicted at "
            f"{over[0].peak_gib:.1f} of {over[0].card_gib:.1f} GiB on GPU {over[0].gpu}"
        )
        if over
        else ""
    )


def _child_env(d: Draft) -> None:
    """The environment every child gets on top of the inherited one."""
    s, env = d.recipe.settings, d.facts.env
    common: dict[str, str] = {"PYTHONUNBUFFERED": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    common.update(d.nccl.env)
    common.update(d.recipe.env)
    if d.offline:  # ModelScope has no switch: the model is given as its local snapshot (_offline_model)
        common.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if any(env.get(k) for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")):
        # The trainer's HTTP client to the rollout server must not go through a proxy.
        no_proxy = [v for v in (env.get("NO_PROXY", ""), "127.0.0.1,localhost,::1") if v]
        common["NO_PROXY"] = common["no_proxy"] = ",".join(no_proxy)
    if s.EMULATE_VRAM_GB:
        common["GRPO_RIG_EMULATE_VRAM_GB"] = str(s.EMULATE_VRAM_GB)
    d.common = common
    if "system" in d.trainer_args:
        d.trainer_args["system"] = [resolved(d.trainer_args["system"][0], d.facts.paths)]
    d.trainer_args.pop("external_plugins", None)
    d.plugins = plugin_files(d.recipe, d.facts)


def input_files(plan: Plan) -> dict[str, list[str]]:
    """The files beside the datasets that the trainer reads and a rerun must find unchanged, by kind:
    "val_dataset", "plugins" (plugin_files) and "system" (a SYSTEM that ms-swift 3.6.4 reads as a file: one
    ending in .txt, swift/llm/argument/base_args/template_args.py:55-58)."""
    a, facts = plan.recipe.trainer_args, plan.facts
    paths = facts.paths if facts is not None else {}
    system = [resolved(a.system, paths)] if a.system and a.system.endswith(".txt") else []
    return {
        "val_dataset": [_absolute_if_local(spec, facts) for spec in a.val_dataset]
        if facts
        else list(a.val_dataset),
        "plugins": plugin_files(plan.recipe, facts) if facts is not None else [str(PLUGIN_FILE)],
        "system": system,
    }


def plugin_files(recipe: Recipe, facts: Facts) -> list[str]:
    """--external_plugins of every child: the image's reward plugin, then the recipe's files (a relative
    path resolved against the checkout when it is there: facts.resolved)."""
    return [str(PLUGIN_FILE)] + [resolved(p, facts.paths) for p in recipe.trainer_args.external_plugins]


def _rollout(d: Draft) -> None:
    """The local `swift rollout` server and the trainer's server flags (server mode)."""
    s, layout = d.recipe.settings, d.layout
    d.processes, d.server_flags = [], []
    if layout.mode == "colocate":
        d.server_flags = flags(("vllm_mode", "colocate"))
    if layout.mode != "server":
        return
    port = s.ROLLOUT_PORT
    if layout.local_rollout:
        _size_rollout(d)
        if not port:
            port = d.facts.ports.rollout_first_free or 0
            if not port:
                d.problems.append(
                    Problem("ROLLOUT_PORT", "no free port in 8000-8099", "set ROLLOUT_PORT to a free port")
                )
        shared = {
            k.lower(): d.trainer_args[k.lower()]
            for k in SHARED_WITH_ROLLOUT
            if k != "MODEL" and k.lower() in d.trainer_args
        }
        args = (
            flags(("model", d.model_path))
            + _args(shared)
            + [Flag("external_plugins", tuple(d.plugins))]
            + flags(("host", s.ROLLOUT_BIND), ("port", port))
            + flags(("tensor_parallel_size", layout.rollout_tp), ("data_parallel_size", layout.rollout_dp))
            + _args(d.recipe.rollout, skip={"tensor_parallel_size", "data_parallel_size"})
        )
        env = {**d.common, "CUDA_VISIBLE_DEVICES": ",".join(map(str, layout.rollout_gpus))}
        env.update(_vllm_env(d.recipe.rollout_args.enforce_eager))
        d.processes.append(
            Process.of("rollout", env, [d.facts.swift, "rollout"], args, host=layout.rollout_host, port=port)
        )
    elif not port:
        port = ROLLOUT_PORT_START
    d.server_flags = flags(
        ("vllm_mode", "server"),
        ("vllm_server_host", layout.rollout_host),
        ("vllm_server_port", port),
        ("vllm_server_timeout", int(s.ROLLOUT_STARTUP_TIMEOUT)),
    )
    d.trainer_args.pop("vllm_server_timeout", None)


def _rollout_context(d: Draft, assumed: bool = False) -> tuple[int, str] | None:
    """(tokens, why) of the longest sequence a GRPO rollout of this run asks vLLM for: MAX_LENGTH (ms-swift
    cuts prompts to it) + MAX_COMPLETION_LENGTH; without MAX_LENGTH, the longest prompt the planner reads
    (generated tasks, the dataset's rows, a known hub dataset; an assumed 512 only where `assumed`) with a
    quarter more, to a multiple of 256. None where that is not below the model's own context, which vLLM takes
    by default (vllm 0.8.5 EngineArgs: max_model_len None)."""
    r = d.recipe
    completion, max_length = r.trainer_args.max_completion_length, r.trainer_args.max_length
    if max_length:
        length, why = max_length + completion, "MAX_LENGTH + MAX_COMPLETION_LENGTH"
    else:
        prompt, source = budget_mod.prompt_tokens(r, d.dataset_paths, d.facts)
        if not assumed and prompt == budget_mod.DEFAULT_PROMPT_TOKENS and source.startswith("assumed"):
            return None
        margin = -(-int(prompt * 1.25) // 256) * 256  # a quarter more, to a multiple of 256
        length, why = (
            margin + completion,
            f"longest prompt ({prompt} tokens, {source}) + 25% + MAX_COMPLETION_LENGTH",
        )
    config = d.facts.model_config.config or {}
    most = (config.get("text_config") or config).get("max_position_embeddings")
    return (length, why) if not most or length < int(most) else None


def _context(d: Draft) -> None:
    """VLLM_MAX_MODEL_LEN of a colocated engine, unless the recipe sets it: without it ms-swift passes none
    and vLLM sizes its KV cache for the model's whole context (40,960 tokens for Qwen3), which alone puts a
    4B-8B model on the one-weight-copy path on a 24 GiB card; a GRPO rollout uses at most the prompt and the
    completion (_rollout_context). Without MAX_LENGTH the prompt is the planner's estimate, which bounds what
    vLLM accepts: a longer prompt would be refused by it (MAX_LENGTH bounds it)."""
    r = d.recipe
    if d.layout.mode != "colocate" or not r.trainer_args.use_vllm or r.is_set("VLLM_MAX_MODEL_LEN"):
        return
    found = _rollout_context(d)
    if found is not None:
        length, why = found
        bound = (
            ""
            if r.trainer_args.max_length
            else "; set MAX_LENGTH to bound the prompts ms-swift passes to vLLM"
        )
        reason = f"{why}: what a GRPO rollout asks of vLLM, not the model's whole context{bound}"
        d.recipe = r.with_values([Choice("VLLM_MAX_MODEL_LEN", length, reason)])


def _size_rollout(d: Draft) -> None:
    """--max_model_len and --max_num_seqs of a local rollout server from this run's budget, unless the recipe
    sets them: without them vLLM sizes for the model's whole context (32k tokens for Qwen2.5-7B) and 256
    sequences, and may refuse to start on a 24 GB card (vllm 0.8.5 EngineArgs defaults)."""
    r = d.recipe
    chosen: list[Choice] = []
    if not r.rollout.get("max_model_len"):
        found = _rollout_context(d, assumed=True)
        if found is not None:
            chosen.append(Choice("ROLLOUT_MAX_MODEL_LEN", found[0], found[1]))
    if not r.rollout.get("max_num_seqs"):
        b = d.budget.batch
        if b is not None:
            seqs = min(256, -(-b.generation_batch // max(1, d.layout.rollout_dp)))
            chosen.append(
                Choice("ROLLOUT_MAX_NUM_SEQS", seqs, "completions per generation round per vLLM engine")
            )
    if chosen:
        d.recipe = r.with_values(chosen)


def _vllm_env(enforce_eager: bool) -> dict[str, str]:
    """The hooks of a process that starts a vLLM engine (entrypoint/child/hooks/ says why):
    top-k/top-p sampled without a sort over the vocabulary (the sort was a fifth of a decode step), and CUDA
    graphs only for the batch sizes it can run (about 35 s of a 24 GiB card's start-up)."""
    graphs = {} if enforce_eager else {"GRPO_RIG_VLLM_GRAPHS_UP_TO_MAX_SEQS": "1"}
    return {"GRPO_RIG_VLLM_TOP_K_FIRST": "1", **graphs}


def _multi_step_env(steps: int) -> dict[str, str]:
    """A colocated engine with `steps` > 1 decode steps per schedule (VLLM_SCHEDULER_STEPS,
    shape.engine_options says when the planner chooses it): vLLM's V0 engine, the only one with multi-step
    scheduling in 0.8.5 (VLLM_USE_V1=1 with it raises: vllm/engine/arg_utils.py:1327-1330), given the steps
    through ms-swift's engine_kwargs (entrypoint/child/hooks/scheduler_steps.py,
    GRPO_RIG_VLLM_SCHEDULER_STEPS)."""
    return {"VLLM_USE_V1": "0", "GRPO_RIG_VLLM_SCHEDULER_STEPS": str(steps)} if steps > 1 else {}


def _trainer_env(d: Draft) -> dict[str, str]:
    s, layout = d.recipe.settings, d.layout
    env = dict(d.common)
    # The trainer's hooks (entrypoint/child/hooks/ says why each exists; DISABLE_HOOKS drops them later).
    env["GRPO_RIG_EVENTS"] = str(d.run_dir / "logs" / EVENTS_FILE)
    env["GRPO_RIG_REWARD_CHECK"] = "1"  # a reward's bad answer ends the run naming it
    env["GRPO_RIG_INPUTS"] = str(d.run_dir / "logs" / INPUTS_FILE)  # the rows loaded are the recorded ones
    a = d.recipe.trainer_args
    if (
        a.use_liger_kernel
    ):  # liger's loss eager: its compiled form can fail recompiling (hooks/liger_eager.py)
        env["GRPO_RIG_LIGER_EAGER"] = "1"
    if layout.mode == "colocate" and a.sleep_level >= 1:
        env["GRPO_RIG_VLLM_KEEP_POOLS"] = "1"
        if a.offload_model:  # else both weight copies meet on the GPU at each generation's start
            env["GRPO_RIG_OFFLOAD_BEFORE_WAKE"] = "1"
    if layout.mode == "colocate" and a.offload_model and a.bnb_bits:
        # else the 4-bit weights' quantization states keep torch's segments reserved for vLLM to find
        env["GRPO_RIG_OFFLOAD_QUANT_STATES"] = "1"
    # vLLM serves the trained adapter on its base weights instead of ms-swift merging it (on the CPU,
    # offloaded) each step (entrypoint/child/hooks/adapter_sync.py), on the one-copy path; and always for
    # QLoRA, whose merged 4-bit weights vLLM cannot load (preflight/values.py _check_quantization);
    # budget.adapter_sync_blocker says where not
    one_copy = a.sleep_level >= 1 and a.offload_model
    blocked = budget_mod.adapter_sync_blocker(d.recipe, d.facts.deepspeed_config)
    if layout.mode == "colocate" and (one_copy or a.bnb_bits) and not blocked:
        # a 4-bit base: vLLM loads the same checkpoint in bitsandbytes 4-bit too (the hook's ":bitsandbytes")
        env["GRPO_RIG_ADAPTER_SYNC"] = str(a.lora_rank) + (":bitsandbytes" if a.bnb_bits else "")
    if layout.mode == "colocate":
        env.update(_vllm_env(a.vllm_enforce_eager))
        # multi-step scheduling exists only through its hook; V0 without it is slower than V1
        steps = 1 if "scheduler_steps" in s.disabled_hooks else s.VLLM_SCHEDULER_STEPS
        env.update(_multi_step_env(steps))
        env["GRPO_RIG_VLLM_INSPECT_HERE"] = "1"  # the engine starts in this process, after CUDA did
        env["GRPO_RIG_VLLM_LEAN"] = "1"  # ms-swift reads only each request's final output
    if layout.train_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, layout.train_gpus))
        if not _worker_directly(d):
            env["NPROC_PER_NODE"] = str(layout.nproc_per_node)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run must not initialise a GPU it was not given
    if s.NNODES > 1:
        env.update(
            {
                "NNODES": str(s.NNODES),
                "NODE_RANK": str(s.NODE_RANK),
                "MASTER_ADDR": s.MASTER_ADDR,
                "MASTER_PORT": str(s.MASTER_PORT),
            }
        )
        env.setdefault("NPROC_PER_NODE", "1")
    elif layout.nproc_per_node > 1 or layout.train_gpus:
        # torchrun's default 29500 collides with any other run on the host; pick a free one unless set.
        env["MASTER_PORT"] = str(s.MASTER_PORT if d.recipe.is_set("MASTER_PORT") else d.facts.ports.ephemeral)
    return env


def _worker_directly(d: Draft) -> bool:
    """One training process on one node starts ms-swift's worker file itself, not through `swift rlhf`.

    ms-swift's CLI only re-executes swift/cli/rlhf.py in a new interpreter, through torchrun when
    NPROC_PER_NODE or NNODES is set (v3.6.4:swift/cli/main.py:28-66); a lone process needs no torchrun, as
    ms-swift sets RANK=0 and WORLD_SIZE=1 itself (v3.6.4:swift/utils/torch_utils.py:373-383, "It runs
    normally with Python as well"). The two extra interpreters cost 5.8 s of the 74 s warm start-up on the
    lent H200: the CLI's imports 3.9 s, torchrun's 1.9 s (bench/startup/2026-12-02-0445-startup/, events).
    Where the worker file cannot be found in this interpreter, or GRPO_RIG_SWIFT names a CLI, the CLI runs."""
    return bool(d.facts.swift_worker) and d.layout.nproc_per_node == 1 and d.recipe.settings.NNODES == 1


def _trainer(d: Draft) -> None:
    command = list(d.facts.swift_worker) if _worker_directly(d) else [d.facts.swift, "rlhf"]
    args = flags(("rlhf_type", "grpo"), ("model", d.model_path))
    args += [Flag("dataset", tuple(d.dataset_paths))] if d.dataset_paths else []
    args += _args(d.trainer_args) + d.server_flags + [Flag("external_plugins", tuple(d.plugins))]
    args += flags(
        ("output_dir", d.run_dir / TRAIN_SUBDIR), ("add_version", "false"), ("run_name", d.run_name)
    )
    if d.resume_from:
        args += flags(("resume_from_checkpoint", d.resume_from))
    if not d.rollout_only:
        d.processes.append(Process.of("trainer", _trainer_env(d), command, args))
    d.processes[:] = [_with_site_hooks(p, d.facts.env, d.recipe.settings.disabled_hooks) for p in d.processes]
    if d.layout.local_rollout and not d.facts.ports.weight_sync_free:
        d.problems.append(
            Problem(
                f"port {WEIGHT_SYNC_PORT}",
                "is in use; it is the weight-sync rendezvous (fixed in ms-swift 3.6.4)",
                "stop the other GRPO run or rollout server on this machine (only one server-mode run fits "
                "per host)",
            )
        )


def _export(d: Draft) -> None:
    """`swift export --merge_lora` of the newest checkpoint into <run>/merged/ (EXPORT_MERGED=true).

    The model, its type, template, dtype and the reward plugins are passed explicitly with
    `--load_args false`: by default ms-swift re-reads them from the checkpoint's args.json, whose absolute
    paths (the plugin file, a mounted model) may not exist where the export runs
    (v3.6.4:swift/llm/argument/base_args/base_args.py:212-260). It writes to a temporary directory first.
    """
    trainer = next((p for p in d.processes if p.role == "trainer"), None)
    if not d.recipe.settings.EXPORT_MERGED or trainer is None or d.recipe.settings.NODE_RANK != 0:
        return
    args = flags(
        ("adapters", CHECKPOINT),
        ("merge_lora", "true"),
        ("load_args", "false"),
        ("model", d.model_path),
        ("output_dir", d.run_dir / MERGED_TMP),
    ) + [Flag("external_plugins", tuple(d.plugins))]
    args += _args(
        {
            name: d.trainer_args[name]
            for name in ("model_type", "template", "torch_dtype", "use_hf")
            if name in d.trainer_args
        }
    )
    env = {
        k: v
        for k, v in trainer.env.items()
        if k not in ("NPROC_PER_NODE", "MASTER_PORT", "NNODES", "NODE_RANK", "MASTER_ADDR")
    }
    env["CUDA_VISIBLE_DEVICES"] = str(d.layout.train_gpus[0]) if d.layout.train_gpus else ""
    d.processes.append(Process.of("export", env, [d.facts.swift, "export"], args))


MERGED_TMP = ".merged.tmp"  # the export's output, renamed to merged/ once complete


def _memory(plan: Plan) -> Plan:
    """The budget's per-GPU peaks (preflight/memory_check.py judges them)."""
    b, w = plan.budget, plan.budget.workload if plan.budget else None
    if plan.layout.mode == "cpu" or plan.recipe.settings.MEMORY_CHECK == "off" or w is None:
        return plan
    note = b.note
    if w.dims.params > memory.CALIBRATED_MAX_PARAMS:
        note += (
            f"; extrapolated: the coefficients were fitted on models up to 1.5B parameters, this one has "
            f"{w.dims.params / 1e9:.1f}B (bench/calibration/memory-calibration.json)"
        )
    ram = tuple(budget_mod.host_ram(plan.recipe, plan.layout, b).items())
    return dataclasses.replace(
        plan, memory=tuple(b.estimates(plan.layout)), memory_note=(note,), host_ram=ram
    )


def _with_site_hooks(process: Process, env: Mapping[str, str], disabled: frozenset[str]) -> Process:
    """Drop the variables of the hooks DISABLE_HOOKS names, then put entrypoint/child/site first on
    PYTHONPATH of a child that still has a GRPO_RIG_* hook variable (its sitecustomize installs them)."""
    off = {h.variable for h in hooks.ALL if h.name in disabled}
    process = dataclasses.replace(process, env={k: v for k, v in process.env.items() if k not in off})
    if not any(k in process.env for k in SITE_HOOK_VARIABLES):
        return process
    path = [str(SITE_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    return dataclasses.replace(process, env={**process.env, "PYTHONPATH": ":".join(path)})


def dumps(plan: Plan) -> str:
    return json.dumps(plan.to_json(), indent=2)
