"""`import`: turn an ms-swift command line (or a shell script holding one) into a recipe.

    python -m entrypoint import examples/train/grpo/external/grpo_7b.sh > recipes/mine.env
    python -m entrypoint import -- CUDA_VISIBLE_DEVICES=0 swift rlhf --rlhf_type grpo --model ...

What the entrypoint composes itself is dropped with a comment saying why (--rlhf_type, --output_dir,
--vllm_mode and the server address); the GPU layout comes from CUDA_VISIBLE_DEVICES / NPROC_PER_NODE and
the `swift rollout` command, commented out or not (ms-swift's examples keep it in comments); flags of other
ms-swift versions are translated where the 3.6.4 spelling is mechanical (keys.RENAMED says the rest);
values equal to recipes/defaults.env are left out. The result is a recipe for `validate` to judge: the
importer translates, it does not decide whether the run fits.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

from entrypoint import redact
from entrypoint.recipe import keys, shell, swift_schema
from entrypoint.recipe.load import DEFAULTS_FILE, RECIPES_DIR, read_env_file
from entrypoint.recipe.settings import split_address

LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "::1")
DROPPED = {
    "rlhf_type": "this image always runs GRPO (--rlhf_type grpo)",
    "output_dir": "runs go to OUTPUT_DIR/RUN_NAME (the mounted volume)",
    "vllm_mode": "the mode follows the layout: ROLLOUT_GPUS / ROLLOUT_HOST set -> server, else colocate",
    "vllm_server_host": "composed from ROLLOUT_GPUS (local) or ROLLOUT_HOST",
    "vllm_server_port": "composed from ROLLOUT_PORT (a free port when unset)",
    "vllm_server_base_url": "its port became ROLLOUT_PORT and its host ROLLOUT_HOST, or ROLLOUT_GPUS for a "
    "server on this node (a base URL alone does not enable server mode in ms-swift 3.6.4)",
    "add_version": "the run directory is OUTPUT_DIR/RUN_NAME",
    "logging_dir": "logs go under the run directory",
}
# Renamed flags whose 3.6.4 spelling is mechanical (keys.RENAMED explains each).
TRANSLATED = {
    "sft_type": lambda v: {"TRAIN_TYPE": v},
    "tuner_type": lambda v: {"TRAIN_TYPE": v},
    "lora_r": lambda v: {"LORA_RANK": v},
    # ms-swift's RLHF reads either as max_completion_length: _trainer_flags' last step writes the one it uses
    "max_new_tokens": lambda v: {},
    "response_length": lambda v: {},
    "lora_target_modules": lambda v: {"TARGET_MODULES": all_linear(v)},
    "target_modules": lambda v: {"TARGET_MODULES": all_linear(v)},
    "load_in_4bit": lambda v: {"QUANT_METHOD": "bnb", "QUANT_BITS": "4"} if _true(v) else {},
    "load_in_8bit": lambda v: {"QUANT_METHOD": "bnb", "QUANT_BITS": "8"} if _true(v) else {},
    # ms-swift 3.6.4 loads --ckpt_dir as the model, over --model: _trainer_flags' last step writes MODEL
    "ckpt_dir": lambda v: {},
}
SECRET_RE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
# Where ms-swift and its loggers read a secret flag's value when the flag is absent: a secret goes there,
# never into a recipe file. Hubs: ms-swift logs in with MODELSCOPE_API_TOKEN when --hub_token is None
# (v3.6.4:swift/hub/hub.py:189-192; base_args.py:171), huggingface_hub reads HF_TOKEN itself.
_HUB_TOKEN = (
    "HF_TOKEN (the Hugging Face hub, USE_HF=true) or MODELSCOPE_API_TOKEN (ModelScope, ms-swift's default)"
)
SECRET_VARIABLES = {
    "hub_token": _HUB_TOKEN,
    "push_to_hub_token": _HUB_TOKEN,
    # swanlab.login() only with a token (v3.6.4:swift/llm/argument/train_args.py:83-84); swanlab reads this
    "swanlab_token": "SWANLAB_API_KEY",
}


def all_linear(value: str) -> str:
    """Target modules as ms-swift 3.6.4 spells them: ms-swift 2.x's ALL (every linear layer) is all-linear
    now (v3.6.4:swift/llm/train/tuner.py:97); other names pass unchanged."""
    return " ".join("all-linear" if m.upper() == "ALL" else m for m in value.split())


def _true(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on", "")


@dataclasses.dataclass
class Command:
    """One `swift rlhf` / `swift rollout` (or torchrun .../rlhf.py) command of a script."""

    sub: str  # "rlhf" | "rollout"
    env: dict[str, str]  # VAR=value prefixes and earlier `export`s
    flags: list[tuple[str, list[str]]]  # (name, values) in order
    commented: bool = False
    torchrun: dict[str, str] = dataclasses.field(default_factory=dict)  # --nproc_per_node etc.
    cut: tuple[int, str] | None = None  # a comment line inside its `\` continuation ended it: (line, text)


def parse(text: str) -> list[Command]:
    """Every swift rlhf / rollout command in a shell script or command line, read as bash reads it
    (recipe/shell.py), commented-out ones included. Raises ValueError where bash would not read the text
    (an unclosed quote) or where it is more than plain commands (control flow, command substitution)."""
    lines = text.splitlines()
    try:
        read = shell.read(text)
    except shell.ShellError as exc:
        source = lines[exc.line - 1].strip() if 0 < exc.line <= len(lines) else ""
        raise ValueError(f"line {exc.line}: cannot read {source[:60]!r}: {exc.reason}") from None
    commands: list[Command] = []
    exported: dict[str, str] = {}  # `export`ed: reach the commands' environment
    variables: dict[str, str] = {}  # every assignment: what $VAR expands to
    for found in read:
        if found.control and not found.commented:
            source = lines[found.line - 1].strip() if found.line <= len(lines) else ""
            raise ValueError(
                f"line {found.line}: {source[:60]!r} is shell control flow or command substitution "
                f"({found.control}); import reads plain commands: give the one command alone "
                "(python -m entrypoint import -- swift rlhf ...)"
            )
        words = found.expand(variables)
        commented = found.commented
        if not words:
            continue
        if words[0] == "export" and not commented:
            for w in words[1:]:
                if "=" in w:
                    name, value = w.split("=", 1)
                    exported[name] = variables[name] = value
            continue
        env: dict[str, str] = {}
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            name, value = words.pop(0).split("=", 1)
            env[name] = value
        if not words and not commented:  # VAR=value alone: a shell variable for later $VAR
            variables.update(env)
            continue
        while words and words[0] in ("nohup", "env", "exec"):
            words.pop(0)
        torchrun: dict[str, str] = {}
        if len(words) > 1 and _is_python(words[0]) and words[1].endswith(_WORKER_FILES):
            # what ms-swift's CLI runs (its "run sh:" line) and what `plan` shows for one process
            words = ["swift", Path(words[1]).stem, *words[2:]]
        if words[:1] == ["torchrun"] or (
            words[:1] and _is_python(words[0]) and words[1:3] == ["-m", "torch.distributed.run"]
        ):
            words = words[1:] if words[0] == "torchrun" else words[3:]
            while words and words[0].startswith("--"):
                name, eq, value = words.pop(0)[2:].partition("=")
                if not eq and words and not words[0].startswith("--") and not words[0].endswith(".py"):
                    value = words.pop(0)  # `--nproc_per_node 2`, as ms-swift's CLI writes it
                torchrun[name] = value
            if not words or not words[0].endswith(("rlhf.py", "rollout.py")):
                continue
            words = ["swift", Path(words[0]).stem, *words[1:]]
        if len(words) < 2 or words[0] != "swift" or words[1] not in ("rlhf", "rollout"):
            continue
        flags: list[tuple[str, list[str]]] = []
        for word in words[2:]:
            if word.startswith("--"):
                name, eq, value = word[2:].partition("=")
                flags.append((name, [value] if eq else []))
            elif flags:
                flags[-1][1].append(word)
        commands.append(Command(words[1], {**exported, **env}, flags, commented, torchrun, found.cut))
    return commands


_WORKER_FILES = ("cli/rlhf.py", "cli/rollout.py")  # ms-swift's swift/cli/<command>.py


def _is_python(word: str) -> bool:
    """python, python3, python3.10, /opt/venv/bin/python: an interpreter's name, wherever it lives."""
    return re.fullmatch(r"python(\d+(\.\d+)?)?", Path(word).name) is not None


def _gpus(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip().isdigit()]


def _quote(value: str) -> str:
    if value == "" or re.search(r"[\s#'\"$]", value):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return value


def _defaults() -> dict[str, str]:
    path = RECIPES_DIR / DEFAULTS_FILE
    values, _ = read_env_file(path, f"recipes/{DEFAULTS_FILE}") if path.exists() else ({}, [])
    return {k: v.value for k, v in values.items()}


@dataclasses.dataclass
class _Draft:
    """The recipe being written: its values (in order) and the notes that become its header comments."""

    defaults: Mapping[str, str]
    values: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)

    def put(self, key: str, value: str, why: str = "") -> None:
        if self.defaults.get(key) == value:  # keys equal to defaults.env are left out
            if why:
                self.notes.append(f"{key}={value}: {why}; left out, as recipes/defaults.env has it")
            return
        self.values[key] = value
        if why:
            self.notes.append(f"{key}: {why}")


def to_recipe(
    text: str,
    source: str = "the command line",
    defaults: Mapping[str, str] | None = None,
    target: str = "<this file>",
    check_with: str = "",
) -> str:
    """The recipe (an .env text) for the first `swift rlhf` command in `text`, in stages: the layout, the
    node and environment assignments, the trainer's flags, the rollout's flags; its header names `target`,
    the file it is written to, and the command that checks it (with `check_with`: the INVENTORY= the import
    was validated with). Raises ValueError when there is none."""
    commands = parse(text)
    rlhf = next((c for c in commands if c.sub == "rlhf" and not c.commented), None) or next(
        (c for c in commands if c.sub == "rlhf"), None
    )
    if rlhf is None:
        raise ValueError(f"no `swift rlhf` command in {source}")
    rollouts = [c for c in commands if c.sub == "rollout"]
    rollout = next((c for c in rollouts if not c.commented), None) or (rollouts[0] if rollouts else None)
    d = _Draft(_defaults() if defaults is None else defaults)
    for command in (rlhf, rollout):
        if command is not None and command.cut is not None:
            d.notes.append(
                f"line {command.cut[0]}: the comment {command.cut[1][:60]!r} ends the `swift {command.sub}` "
                "command there, as bash does; the lines after it are not part of it"
            )
    env = dict(rlhf.env)
    rollout_gpus = _layout(d, rlhf, rollout, env)
    _node_and_environment(d, rlhf, env)
    _multi_node_run_name(d, target)
    _trainer_flags(d, rlhf, rollout_gpus)
    if rollout is not None and "ROLLOUT_HOST" not in d.values:
        _rollout_flags(d, rollout)
    lines = [
        f"# Imported from {source} by `python -m entrypoint import` (ms-swift 3.6.4 spelling).",
        "# Check it with: .venv/bin/python -m entrypoint validate "
        f"recipe={target}{' ' + check_with if check_with else ''}",
    ]
    lines += [f"# {n}".replace("\n", "\\n") for n in d.notes]
    lines.append("")
    lines += [f"{k}={_quote(v)}" for k, v in d.values.items()]
    return "\n".join(lines) + "\n"


def _layout(d: _Draft, rlhf: Command, rollout: Command | None, env: dict[str, str]) -> list[int]:
    """TRAIN_GPUS / ROLLOUT_GPUS / ROLLOUT_HOST from CUDA_VISIBLE_DEVICES, NPROC_PER_NODE, the server flags,
    ms-swift <= 3.5's --vllm_device and the `swift rollout` line; returns the rollout GPUs. Pops what it
    reads from `env`."""
    flags = dict((name, vals) for name, vals in rlhf.flags)
    visible = _gpus(env.pop("CUDA_VISIBLE_DEVICES", ""))
    nproc_text = env.pop("NPROC_PER_NODE", "") or rlhf.torchrun.get("nproc_per_node", "")
    nproc = int(nproc_text) if nproc_text.isdigit() else None
    mode = (flags.get("vllm_mode") or [""])[0]
    host = (flags.get("vllm_server_host") or [""])[0]
    port = (flags.get("vllm_server_port") or [""])[0]
    base_url = (flags.get("vllm_server_base_url") or [""])[0]
    if base_url:  # http://10.0.0.5:8000: the same server as host + port
        url_host, url_port = split_address(base_url)
        host, port = host or url_host, port or str(url_port or "")
    device = (flags.get("vllm_device") or [""])[0]
    timeout = (flags.get("vllm_server_timeout") or [""])[0]
    train = visible or (list(range(nproc)) if nproc else [])
    rollout_gpus: list[int] = []
    if device:
        train, rollout_gpus = _vllm_device(d, device, visible, nproc, train)
    if mode == "server" or host or (device and rollout_gpus):
        if timeout:
            d.put(
                "ROLLOUT_STARTUP_TIMEOUT",
                timeout,
                "--vllm_server_timeout: the entrypoint's health wait, passed on to the trainer",
            )
        if host and host not in LOCAL_HOSTS:
            d.put("ROLLOUT_HOST", host, "the rollout server runs on another node; put its address here")
        elif not rollout_gpus:
            rollout_gpus = _gpus(rollout.env.get("CUDA_VISIBLE_DEVICES", "")) if rollout is not None else []
            if not rollout_gpus:
                # the GPU after the trainers; a script naming neither gets trainer 0 and rollout 1 (was 0 and
                # 0: the overlap the layout then refused)
                train = train or [0]
                rollout_gpus = [max(train) + 1]
                d.notes.append(
                    f"ROLLOUT_GPUS: the script names no GPU for `swift rollout`; guessed {rollout_gpus[0]}, "
                    f"the one after the trainers' ({','.join(map(str, train))})"
                )
        if port:
            d.put("ROLLOUT_PORT", port)
    if timeout and "ROLLOUT_STARTUP_TIMEOUT" not in d.values:
        d.notes.append(f"--vllm_server_timeout {timeout}: dropped, there is no rollout server in this layout")
    if nproc and visible and len(visible) != nproc and not device:
        d.notes.append(
            f"NPROC_PER_NODE={nproc} but CUDA_VISIBLE_DEVICES lists {len(visible)} GPUs; ms-swift 3.6.4 "
            "needs them equal, so TRAIN_GPUS takes the first NPROC_PER_NODE"
        )
        train = visible[:nproc]
    d.put("TRAIN_GPUS", ",".join(map(str, train)) if train else "0")
    if rollout_gpus:
        d.put("ROLLOUT_GPUS", ",".join(map(str, rollout_gpus)))
    return rollout_gpus


def _vllm_device(
    d: _Draft, device: str, visible: list[int], nproc: int | None, train: list[int]
) -> tuple[list[int], list[int]]:
    """(training GPUs, rollout GPUs) for ms-swift <= 3.5's --vllm_device, removed in 3.6, with the note that
    says what became of it. `auto` put vLLM on the GPU after the training processes, the last visible one
    when NPROC_PER_NODE is unset (the trainers take the rest); `cuda:N` on GPU N. Where no GPU is left
    beside the trainers, vLLM is colocated on them, and the note says so."""
    rollout: list[int] = []
    if device == "auto" and len(visible) > (nproc or 1):
        trainers = nproc or len(visible) - 1
        train, rollout = visible[:trainers], visible[trainers:]
    elif device.startswith("cuda:") and device[5:].isdigit():
        # no CUDA_VISIBLE_DEVICES nor NPROC_PER_NODE: ms-swift trained on GPU 0 alone. vLLM on a training GPU
        # shared it (colocated now): a server there left the trainers no GPU ("beside the trainers on GPU -")
        trainers = [g for g in train or [0] if g != int(device[5:])]
        if trainers:
            train, rollout = trainers, [int(device[5:])]
    if rollout:
        d.notes.append(
            f"--vllm_device {device}: removed in 3.6; the rollout becomes a `swift rollout` server on "
            f"GPU {','.join(map(str, rollout))}, beside the trainers on GPU {','.join(map(str, train))}"
        )
    else:
        why = (
            "the script lists no GPUs (CUDA_VISIBLE_DEVICES)"
            if device == "auto" and not visible
            else "no GPU is left beside the trainers"
        )
        d.notes.append(
            f"--vllm_device {device}: removed in 3.6; {why}, so vLLM runs colocated on the training "
            "GPUs (give it its own with ROLLOUT_GPUS)"
        )
    return train, rollout


def _node_and_environment(d: _Draft, rlhf: Command, env: dict[str, str]) -> None:
    """Multi-node variables (from the environment or torchrun's flags), then the other VAR=value prefixes:
    ms-swift's environment knobs are kept, secrets and unknown names left out with a note."""
    for name in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"):
        value = env.pop(name, "") or rlhf.torchrun.get(name.lower(), "")
        if value.startswith("$"):
            d.notes.append(f"{name}: the script reads it from {value}; set it per node")
        elif value:
            d.put(name, value)
    for name, value in env.items():
        found = keys.lookup(name)
        if SECRET_RE.search(name):
            d.notes.append(f"{name}: a secret; export it in the environment, never in a recipe")
        elif found is not None and found.kind not in ("managed", "renamed"):
            d.put(name, value)
        else:
            shown = value if len(value) <= 40 else value[:40] + "..."
            d.notes.append(f"{name}={shown}: not a key this image knows; left out")


def _multi_node_run_name(d: _Draft, target: str) -> None:
    """A run over several nodes needs one RUN_NAME on every node (unset, each node names the run by its own
    clock, and validate refuses it); ms-swift names it per node itself. The import gives it the recipe file's
    name, said in a note, so the command it came from validates as it trains."""
    nodes = d.values.get("NNODES", "")
    if "RUN_NAME" in d.values or not nodes.isdigit() or int(nodes) <= 1:
        return
    name = Path(target).stem if target.endswith(".env") else "multi-node-run"
    d.put("RUN_NAME", name)
    d.notes.append(
        f"RUN_NAME={name}: a run over several nodes needs the same name on every node (each would "
        "name it by its own clock otherwise); give each new run its own"
    )


def _secret_flag(d: _Draft, command: str, name: str) -> bool:
    """A flag whose value is a secret (redact.is_secret_flag, the registry that keeps it off the console) is
    left out, with a note naming the environment variable to set instead: a recipe is a file on disk, shared
    and committed (`import --hub_token XYZ` wrote HUB_TOKEN=XYZ into it). True when `name` is one."""
    if not redact.is_secret_flag(name):
        return False
    where = SECRET_VARIABLES.get(name, "the environment variable its service reads")
    d.notes.append(
        f"{command}--{name}: a secret, left out of this file (never written to a recipe); set {where} in "
        "the environment instead"
    )
    return True


def _trainer_flags(d: _Draft, rlhf: Command, rollout_gpus: list[int]) -> None:
    """Each `swift rlhf` flag as a key: dropped when composed, translated when renamed, moved to the rollout
    server when colocate-only in server mode."""
    schema = swift_schema.load("rlhf")
    for name, vals in rlhf.flags:
        if _secret_flag(d, "", name):
            continue
        if name in DROPPED or name in ("vllm_device", "vllm_server_timeout"):  # _layout read the last two
            if name in DROPPED:
                d.notes.append(f"--{name}: dropped, {DROPPED[name]}")
            continue
        if name == "external_plugins":  # the image's own plugin is always loaded first
            vals = [v for v in vals if not v.endswith("entrypoint/rewards/grpo_rig_rewards.py")]
            if not vals:
                continue
        value = " ".join(vals) if vals else "true"
        key = name.upper()
        if rollout_gpus and key in keys.COLOCATE_ONLY:  # server mode: the rollout's own flag, or nothing
            target = keys.COLOCATE_ONLY[key]
            if target:
                d.put(target, value, f"from --{name}: in server mode the rollout server takes it")
            else:
                d.notes.append(f"--{name} {value}: dropped, ms-swift ignores it in server mode")
        elif name in TRANSLATED:
            for k, v in TRANSLATED[name](value).items():
                d.put(k, v, f"translated from --{name} {value}")
        elif key in keys.RENAMED:
            d.notes.append(f"--{name} {value}: {keys.RENAMED[key].message}; {keys.RENAMED[key].fix}")
        elif name in schema or keys.lookup(key) is not None:
            d.put(key, value)
        else:
            d.put(key, value, "not a `swift rlhf` 3.6.4 argument: validate will say what it is")
    # ms-swift's RLHF takes the completion's length from the first of these it is given, whatever their order
    # on the line (v3.6.4:swift/llm/argument/rlhf_args.py:197-199)
    given = dict(rlhf.flags)
    first = next(
        (f for f in ("response_length", "max_new_tokens", "max_completion_length") if given.get(f)), None
    )
    if given.get("ckpt_dir"):
        d.put(
            "MODEL",
            given["ckpt_dir"][0],
            f"translated from --ckpt_dir {given['ckpt_dir'][0]}: ms-swift 3.6.4 loads "
            "it as the model, over --model (CompatArguments._handle_ckpt_dir, swift/llm/argument/base_args/"
            "base_args.py:33-43); a folder holding adapter_config.json is an adapter instead: then "
            "ADAPTERS=<it> and MODEL=<its base model>",
        )
    if first and first != "max_completion_length":
        d.put(
            "MAX_COMPLETION_LENGTH",
            given[first][0],
            f"translated from --{first} {given[first][0]} (ms-swift's RLHF "
            "reads the first given of --response_length, --max_new_tokens, --max_completion_length)",
        )


def _rollout_flags(d: _Draft, rollout: Command) -> None:
    """The `swift rollout` line's own flags as ROLLOUT_* keys (those shared with the trainer come from it)."""
    rlhf_schema, rollout_schema = swift_schema.load("rlhf"), swift_schema.load("rollout")
    for name, vals in rollout.flags:
        if _secret_flag(d, "swift rollout ", name):
            continue
        if name == "external_plugins":
            _rollout_plugins(d, vals)
            continue
        if name in ("model", "host", "port") or (
            name in rlhf_schema and name.upper() in keys.SHARED_WITH_ROLLOUT
        ):
            continue
        key = "ROLLOUT_" + name.upper()
        found = keys.lookup(key)
        if found is not None and found.kind == "managed":
            d.notes.append(f"swift rollout --{name}: dropped, {found.managed}")
        elif name in rollout_schema and key not in keys.RENAMED:
            d.put(key, " ".join(vals) if vals else "true")
        elif name.startswith("vllm_") and name[len("vllm_") :] in rollout_schema:  # the 3.7+ spelling
            d.put(
                "ROLLOUT_" + name[len("vllm_") :].upper(),
                " ".join(vals) if vals else "true",
                f"translated from swift rollout --{name} (the ms-swift 3.7+ spelling)",
            )
        else:
            d.notes.append(f"swift rollout --{name}: not a 3.6.4 `swift rollout` argument; left out")


def _rollout_plugins(d: _Draft, files: list[str]) -> None:
    """`swift rollout --external_plugins`: the plan gives EXTERNAL_PLUGINS to the rollout and the trainer
    alike, so the rollout's own files (a multi-turn scheduler, its rewards) join the trainer's, or are the
    only ones when the trainer loads none."""
    trainer = d.values.get("EXTERNAL_PLUGINS", "").split()
    extra = [
        f for f in files if f not in trainer and not f.endswith("entrypoint/rewards/grpo_rig_rewards.py")
    ]
    if not extra:
        return
    why = "the trainer loads none" if not trainer else f"beside the trainer's {' '.join(trainer)}"
    d.put(
        "EXTERNAL_PLUGINS",
        " ".join([*trainer, *extra]),
        f"from `swift rollout --external_plugins "
        f"{' '.join(extra)}` ({why}): the plan loads EXTERNAL_PLUGINS in the rollout and the trainer alike",
    )
