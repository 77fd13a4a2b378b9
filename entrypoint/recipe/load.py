"""Recipes: env files of KEY=VALUE, layered, classified and type-checked.

Precedence, lowest to highest (README, "Recipes"):

    recipes/defaults.env  <  recipes/<RECIPE>.env  <  process environment  <  command-line KEY=VALUE

The process environment only contributes keys this module knows (a stray `COLUMNS` or `DEBUG` from a
shell is not a recipe value). Every resolved value remembers its layer (`source`), which the manifest
records. Keys are case-insensitive on the command line (`recipe=smoke`); env files use upper case.

Key kinds (`classify`):
    owned    keys of `settings.Settings` (placement, run identity, ...)
    trainer  `swift rlhf` arguments, upper-cased: NUM_GENERATIONS=6 -> --num_generations 6
    rollout  `swift rollout` arguments behind ROLLOUT_: ROLLOUT_MAX_MODEL_LEN -> --max_model_len
    nccl     NCCL environment variables (keys.NCCL_VARIABLES), given to trainer and rollout alike
    env      a few environment variables for the children (wandb, hub, allocator settings)
Anything else is refused with a did-you-mean, and keys the entrypoint composes itself are refused with
the key to use instead.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import io
import os
import stat
from collections import ChainMap
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from dotenv.parser import parse_stream
from pydantic import ValidationError

from entrypoint import redact
from entrypoint.child import hooks as child_hooks
from entrypoint.errors import BadInput, Problem
from entrypoint.recipe import keys, swift_schema
from entrypoint.recipe.args import RolloutArgs, TrainerArgs
from entrypoint.recipe.keys import MANAGED, NCCL_VARIABLES
from entrypoint.recipe.settings import Settings, default_run_name_problem

PROJECT_DIR = Path(__file__).resolve().parents[2]
RECIPES_DIR = PROJECT_DIR / "recipes"


def recipes_dir(environ: Mapping[str, str]) -> Path:
    """Where recipe names are looked up: GRPO_RIG_RECIPES (the image's mounted recipes), else the
    checkout's."""
    return Path(environ.get("GRPO_RIG_RECIPES") or RECIPES_DIR)


DEFAULTS_FILE = "defaults.env"


class Origin(enum.Enum):
    """Where a recipe value came from, with its precedence (`layer`)."""

    DEFAULTS_FILE = "defaults file"  # a line of recipes/defaults.env
    RECIPE_FILE = "recipe file"  # a line of the recipe file
    MANIFEST = "manifest"  # an earlier run's manifest, edited after that run (record/rerun.py)
    ENVIRONMENT = "environment"  # the process environment
    COMMAND_LINE = "command line"  # KEY=VALUE words
    PLANNER = "planner"  # plan/build.py chose it, for the reason its detail gives

    @property
    def layer(self) -> int:
        """0 recipes/defaults.env, 1 the recipe file (or the edited manifest standing in for it), 2 the
        process environment, 3 the command line, 4 the planner."""
        return _LAYERS[self]


_LAYERS = {
    Origin.DEFAULTS_FILE: 0,
    Origin.RECIPE_FILE: 1,
    Origin.MANIFEST: 1,
    Origin.ENVIRONMENT: 2,
    Origin.COMMAND_LINE: 3,
    Origin.PLANNER: 4,
}


@dataclasses.dataclass(frozen=True)
class Value:
    """A value as a layer gave it: its text, where it came from, and the detail of that place (the file and
    line, the planner's reason, the manifest's path)."""

    value: str
    origin: Origin
    detail: str = ""

    @property
    def source(self) -> str:
        """Where the value came from, in words (the manifest's "source", a problem's place):
        "recipes/smoke.env:7", "environment", "command line", "planner: <reason>"."""
        if self.origin is Origin.ENVIRONMENT:
            return "environment"
        if self.origin is Origin.COMMAND_LINE:
            return "command line"
        if self.origin is Origin.PLANNER:
            return f"planner: {self.detail}" if self.detail else "planner"
        return self.detail


Typed = int | float | bool | str  # a value set over the layers (Choice), before it is written as text


def text_of(value: Typed) -> str:
    """The text of a typed value as a layer would write it (the manifest's value, the argv's token): true or
    false, a float to two decimals (the floats set over the layers are shares of a card, which vLLM and the
    plan print at that precision), else str."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


@dataclasses.dataclass(frozen=True)
class Choice:
    """A value set over the layers, typed: the planner's (with its reason), or a fix tried as if given on the
    command line (preflight/memory_check.py)."""

    key: str  # recipe key, e.g. PER_DEVICE_TRAIN_BATCH_SIZE
    value: Typed
    reason: str
    origin: Origin = Origin.PLANNER


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A resolved recipe: what each key is, and which layer set it."""

    name: str
    values: dict[str, Value]
    settings: Settings
    trainer: dict[str, list[str]]  # swift rlhf argument name -> argv tokens after --name
    rollout: dict[str, list[str]]  # swift rollout argument name -> argv tokens
    nccl: dict[str, Value]  # NCCL variables from the recipe, the environment or the command line
    env: dict[str, str]  # pass-through environment for the children
    problems: list[Problem]  # found while resolving: warnings, and (strict=False) the refused values
    dropped: frozenset[str] = frozenset()  # keys whose values were refused (strict=False), left at defaults

    @functools.cached_property
    def trainer_args(self) -> TrainerArgs:
        """The `swift rlhf` arguments the decisions read, typed, ms-swift's defaults filled in (args.py)."""
        return TrainerArgs.of(self.trainer)

    @functools.cached_property
    def rollout_args(self) -> RolloutArgs:
        """The `swift rollout` arguments, typed (args.py)."""
        return RolloutArgs.of(self.rollout)

    @functools.cached_property
    def vllm_use_v1(self) -> bool | None:
        """The recipe's VLLM_USE_V1 as vLLM reads it (`bool(int(...))`, vllm 0.8.5.post1 envs.py): True for
        V1, False for V0, None when the recipe leaves vLLM its choice. The one reader of that variable;
        values vLLM cannot read never get here (`_env_value` refuses them)."""
        value = self.env.get("VLLM_USE_V1")
        return None if value is None else bool(int(value))

    def raw(self, key: str) -> str | None:
        """The text a layer gave `key`, as the user wrote it (None when no layer sets it): for what repeats
        the user's own words (a fix that moves a value to another key, the identity record). A decision reads
        `settings`, `trainer_args`, `rollout_args` or `env`, typed."""
        v = self.values.get(key)
        return v.value if v is not None else None

    def identity(self) -> dict[str, str]:
        """The values that define what a run trains (keys.IDENTITY); a resume must keep them."""
        return {k: self.raw(k) or "" for k in keys.IDENTITY}

    def is_set(self, key: str) -> bool:
        """True when the key has a non-empty value from any layer."""
        return bool(self.raw(key))

    def source(self, key: str) -> str:
        """Where `key`'s value came from, in words (Value.source); "default" when no layer sets it."""
        v = self.values.get(key)
        return v.source if v is not None else "default"

    def origin(self, key: str) -> Origin | None:
        """Where `key`'s value came from; None when no layer sets it."""
        v = self.values.get(key)
        return v.origin if v is not None else None

    def layer(self, key: str) -> int:
        """Precedence of the layer that set `key` (Origin.layer); -1 unset."""
        return self.values[key].origin.layer if key in self.values else -1

    def with_values(self, chosen: Iterable[Choice]) -> Recipe:
        """A copy with swift arguments (ROLLOUT_ ones for `swift rollout`), owned keys or environment
        variables for the children set to the typed values `chosen`: the settings take the value itself, the
        argv and the environment its text (text_of), written here once. Keys must be unset here."""
        rlhf, rollout_schema = swift_schema.load("rlhf"), swift_schema.load("rollout")
        values = dict(self.values)
        trainer, rollout, env = dict(self.trainer), dict(self.rollout), dict(self.env)
        owned: dict[str, Typed] = {}
        for c in chosen:
            text = text_of(c.value)
            values[c.key] = Value(text, c.origin, c.reason)
            kind = getattr(keys.lookup(c.key), "kind", None)
            if kind == "env":
                env[c.key] = text
            elif kind == "owned":  # typed like any layer's value (VLLM_SCHEDULER_STEPS)
                owned[c.key] = c.value
            elif c.key.startswith("ROLLOUT_") and c.key[len("ROLLOUT_") :].lower() in rollout_schema:
                spec = rollout_schema[c.key[len("ROLLOUT_") :].lower()]
                rollout[spec.name] = spec.coerce(text)
            else:
                spec = rlhf[c.key.lower()]
                trainer[spec.name] = spec.coerce(text)
        # only the chosen keys are typed here: the others stand as recipe.load read them
        typed = Settings.model_validate(owned) if owned else self.settings
        settings = self.settings.model_copy(update={k: getattr(typed, k) for k in owned})
        return dataclasses.replace(
            self, values=values, settings=settings, trainer=trainer, rollout=rollout, env=env
        )

    def without_planner(self) -> Recipe:
        """A copy without the values the planner chose (with_values, Origin.PLANNER): the recipe as its
        layers set it, which plan.build shapes again (a fix is checked by planning it:
        preflight/memory_check)."""
        return self.without([k for k, v in self.values.items() if v.origin is Origin.PLANNER])

    def without(self, chosen: Iterable[str]) -> Recipe:
        """A copy with the keys `chosen` unset, as if no layer gave them: an owned key back at its default, a
        swift argument left to ms-swift (what removing a key from the recipe would give)."""
        chosen = [k for k in chosen if k in self.values]
        if not chosen:
            return self
        rlhf, rollout_schema = swift_schema.load("rlhf"), swift_schema.load("rollout")
        trainer, rollout, env = dict(self.trainer), dict(self.rollout), dict(self.env)
        nccl = {k: v for k, v in self.nccl.items() if k not in chosen}
        owned: dict[str, object] = {}
        for key in chosen:
            kind = getattr(keys.lookup(key), "kind", None)
            if kind == "env":
                env.pop(key, None)
            elif kind == "owned":
                owned[key] = Settings.model_fields[key].default
            elif key.startswith("ROLLOUT_") and key[len("ROLLOUT_") :].lower() in rollout_schema:
                rollout.pop(rollout_schema[key[len("ROLLOUT_") :].lower()].name, None)
            elif key.lower() in rlhf:
                trainer.pop(rlhf[key.lower()].name, None)
        settings = (
            Settings.model_validate({**self.settings.model_dump(), **owned}) if owned else self.settings
        )
        values = {k: v for k, v in self.values.items() if k not in chosen}
        return dataclasses.replace(
            self, values=values, settings=settings, trainer=trainer, rollout=rollout, nccl=nccl, env=env
        )

    def resolved(self) -> dict[str, dict[str, str]]:
        """{KEY: {"value", "source"}} for the manifest and `plan --json`."""
        return {k: {"value": v.value, "source": v.source} for k, v in sorted(self.values.items())}


def classify(key: str) -> str | None:
    """The kind of a recipe key ("owned", "trainer", "rollout", "nccl", "env"), or None if unknown.

    Managed and renamed keys return None too; `explain_unknown` says why (entrypoint/recipe/keys.py).
    """
    found = keys.lookup(key)
    return found.kind if found is not None and found.kind not in ("managed", "renamed") else None


# What generates in a recipe, as its keys say before any placement (plan/layout decides the mode): a rollout
# server (ROLLOUT_GPUS or ROLLOUT_HOST set), vLLM colocated on the trainers, or no vLLM (USE_VLLM false).
Generation = Literal["server", "colocated", "no-vllm"]


def generation_of(merged: Mapping[str, Value]) -> Generation:
    """`Generation` from the merged layers' text (USE_VLLM as ms-swift's schema reads it; unreadable counts
    as vLLM, its own problem says what is wrong with it)."""
    if any(merged[k].value.strip() for k in ("ROLLOUT_GPUS", "ROLLOUT_HOST") if k in merged):
        return "server"
    text = merged["USE_VLLM"].value.strip() if "USE_VLLM" in merged else ""
    try:
        use_vllm = swift_schema.load("rlhf")["use_vllm"].coerce(text or "false")  # unset: ms-swift's False
    except ValueError:
        use_vllm = ["true"]
    return "colocated" if use_vllm == ["true"] else "no-vllm"


def in_mode(key: str, generation: Generation) -> str | None:
    """`key` where the recipe's mode takes it, else the key that does its work there (a rollout server's key
    in a recipe without a server: colocated vLLM's, keys.COLOCATED_KEY), None where there is none: a fix
    names only keys the recipe's mode accepts (a server key in a colocate recipe is refused in turn)."""
    if generation == "server" or not keys.server_only(key):
        return key
    return keys.COLOCATED_KEY.get(key) if generation == "colocated" else None


def _renamed_fix(r: keys.Renamed, generation: Generation) -> str:
    """The renamed key's fix in the recipe's mode (keys.Renamed.becomes)."""
    if not r.becomes or in_mode(r.becomes, generation) == r.becomes:
        return r.fix
    why = (
        "this recipe runs no rollout server (ROLLOUT_GPUS and ROLLOUT_HOST are empty"
        if generation == "colocated"
        else "this recipe runs no vLLM (USE_VLLM is false"
    )
    instead = in_mode(r.becomes, generation)
    if instead:
        return f"{instead}=<value>: colocated vLLM's key, as {why}; {r.becomes} is a rollout server's)"
    return f"remove it: {why}; {r.becomes} is a rollout server's key, and nothing else takes it)"


def explain_unknown(key: str, source: str, generation: Generation = "server") -> Problem:
    """The problem for a key `classify` refused: renamed, managed, or unknown with suggestions, each a key
    the recipe's `generation` accepts (in_mode)."""
    where = f"{key} ({source})"
    found = keys.lookup(key)
    if found is not None and found.renamed is not None:
        r = found.renamed
        return Problem(where, f"{r.message} [source: {r.source}]", _renamed_fix(r, generation))
    if found is not None and found.managed:
        return Problem(where, "is set by the entrypoint, not by recipes", found.managed)
    hook = child_hooks.BY_VARIABLE.get(key)
    if hook is not None:  # a child hook's switch: the plan sets it where the hook applies
        instead = f"; {hook.recipe_key} sets its value" if hook.recipe_key else ""
        return Problem(
            where,
            f"turns the child hook {hook.name} on or off, which the entrypoint decides per child (`plan` "
            "shows where; entrypoint/child/hooks/)",
            f"DISABLE_HOOKS={hook.name} turns it off in every child{instead}",
        )
    underscored = key.replace("-", "_")
    if underscored != key and keys.lookup(underscored) is not None:  # `tuner-type`, as on ms-swift's CLI
        if classify(underscored) is not None:
            return Problem(
                where, "is spelled with dashes; recipe keys use underscores", f"write {underscored}"
            )
        inner = explain_unknown(underscored, source, generation)  # renamed or managed: what became of it
        return Problem(where, f"({underscored}) {inner.message}", inner.fix)
    candidates = keys.known() + list(MANAGED)  # never suggest a key that would be refused as renamed
    close = difflib.get_close_matches(key, candidates, n=3, cutoff=0.75)
    prefix = [k for k in candidates if k.startswith(key) and k != key][:3]
    meant = list(dict.fromkeys(prefix + close))[:3]
    suggestions = [s for s in dict.fromkeys(in_mode(k, generation) for k in meant) if s]
    if key.startswith("NCCL_"):
        message = "is not an NCCL variable this image knows (NCCL ignores unknown names silently)"
    else:
        message = "is not a key of this image, of `swift rlhf` or of `swift rollout` (ms-swift 3.6.4)"
    if prefix:
        message += "; abbreviations are refused (ms-swift's argparse would take them silently)"
    fix = f"did you mean {' or '.join(suggestions)}?" if suggestions else "see `python -m entrypoint keys`"
    if suggestions and suggestions[0] in MANAGED:
        fix += f" ({suggestions[0]} itself is set by the entrypoint: {MANAGED[suggestions[0]]})"
    moved = [k for k in meant if in_mode(k, generation) not in (k, None)]
    if moved and suggestions:
        fix += (
            f" ({in_mode(moved[0], generation)}: colocated vLLM's key, as this recipe runs no rollout server)"
        )
    return Problem(where, message, fix)


def path_mode(value: str | os.PathLike) -> int | None:
    """The st_mode of what `value` names on this machine, or None where it names nothing: missing,
    unreachable, or text that cannot be a path at all (a name longer than the file system allows, a NUL
    byte). A recipe value may be a path or literal text (SYSTEM is a prompt or a prompt file, MODEL a hub id
    or a folder, DATASET a hub id or a file), so asking never raises; every "is it a file?" about such a value
    goes through here (pathlib's own is_file/exists raise OSError for ENAMETOOLONG and ValueError for NUL)."""
    try:
        return Path(value).expanduser().stat().st_mode
    except (OSError, ValueError):
        return None


def is_file(value: str | os.PathLike) -> bool:
    """An existing regular file (path_mode: never raises)."""
    mode = path_mode(value)
    return mode is not None and stat.S_ISREG(mode)


def is_dir(value: str | os.PathLike) -> bool:
    """An existing directory (path_mode: never raises)."""
    mode = path_mode(value)
    return mode is not None and stat.S_ISDIR(mode)


def exists(value: str | os.PathLike) -> bool:
    """Anything at all under that name (path_mode: never raises)."""
    return path_mode(value) is not None


TEXT_FILE_LIMIT = 16 * 1024**2  # bytes: a recipe, prompt, script or inventory is text far below this


def read_user_file(path: Path) -> tuple[str | None, str]:
    """(text, "") of a text file a user names (a recipe, a SYSTEM prompt, an inventory, a script to import),
    else (None, why it cannot be used: missing, a directory, not a regular file, unreadable, binary, too
    large), a phrase to follow the path. A UTF-8 byte-order mark (Windows editors) is dropped. Without it
    such files end in UnicodeDecodeError / IsADirectoryError tracebacks."""
    try:
        mode = path.expanduser().stat().st_mode
        if stat.S_ISDIR(mode):
            return None, "is a directory, not a file"
        if not stat.S_ISREG(mode):  # asked before opening: opening a FIFO blocks until a writer comes
            return None, "is not a regular file (a pipe, socket or device)"
        with path.expanduser().open("rb") as f:
            data = f.read(TEXT_FILE_LIMIT + 1)
    except FileNotFoundError:
        return None, "does not exist"
    except IsADirectoryError:
        return None, "is a directory, not a file"
    except NotADirectoryError:
        return None, "does not exist (a part of its path is a file, not a directory)"
    except PermissionError:
        return None, f"cannot be read by this process (uid {os.getuid()}: permission denied)"
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    except ValueError:  # a NUL byte in the name
        return None, "is not a path (it holds a NUL byte)"
    if len(data) > TEXT_FILE_LIMIT:
        return None, f"is larger than {TEXT_FILE_LIMIT // 1024**2} MiB: not a text file of this kind"
    nul = data.find(b"\0")
    if nul >= 0:
        return None, f"is a binary file, not text (a NUL byte at offset {nul})"
    try:
        return data.decode("utf-8-sig"), ""
    except UnicodeDecodeError as exc:
        return None, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): a binary file?"


def read_env_file(
    path: Path, label: str, origin: Origin = Origin.RECIPE_FILE
) -> tuple[dict[str, Value], list[Problem]]:
    """Parse one env file with python-dotenv's parser, reporting malformed lines instead of skipping them;
    each value's detail is `label:line`.

    No variable interpolation: a recipe means the same on every machine.
    """
    values: dict[str, Value] = {}
    problems: list[Problem] = []
    text, why = read_user_file(path)
    if text is None:
        return values, [
            Problem(label, f"{path} {why}", "give a recipe name or the path to an .env text file")
        ]
    for binding in parse_stream(io.StringIO(text)):
        # python-dotenv counts from where the binding's text starts, blank lines before it included
        raw = binding.original.string
        line = binding.original.line + raw[: len(raw) - len(raw.lstrip())].count("\n")
        where = f"{label}:{line}"
        if binding.error:
            snippet = binding.original.string.strip().splitlines()[0][:60]
            problems.append(
                Problem(where, f"not a KEY=VALUE line: {snippet!r}", "write KEY=VALUE, # comment")
            )
            continue
        if binding.key is None:
            continue  # blank line or comment
        key = binding.key.upper()
        if key == "RECIPE":
            problems.append(
                Problem(
                    where, "RECIPE inside a recipe file", "remove it; name the recipe on the command line"
                )
            )
            continue
        if key in values:
            problems.append(
                Problem(
                    where,
                    f"{key} set twice (first at {values[key].source}); the later value wins",
                    fatal=False,
                )
            )
        values[key] = Value(binding.value if binding.value is not None else "", origin, where)
    return values, problems


def parse_cli_pairs(pairs: list[str]) -> tuple[dict[str, Value], list[Problem]]:
    """`KEY=VALUE` command-line words; keys are case-insensitive."""
    values: dict[str, Value] = {}
    problems: list[Problem] = []
    i, last = 0, ""
    while i < len(pairs):
        word = pairs[i]
        if word.startswith("-"):  # an ms-swift style --flag [value ...]: say the KEY=VALUE spelling
            name, _, value = word.lstrip("-").partition("=")
            following = []
            while (
                not value
                and i + 1 < len(pairs)
                and not pairs[i + 1].startswith("-")
                and "=" not in pairs[i + 1]
            ):
                following.append(pairs[i + 1])
                i += 1
            value = value or " ".join(following)
            value = redact.REDACTED if value and redact.is_secret(name) else value
            spelled = f'{name.upper()}="{value}"' if " " in value else f"{name.upper()}={value or '<value>'}"
            found = keys.lookup(name.upper())
            fix = (  # a flag the entrypoint composes has no KEY=VALUE spelling: name the key that owns it
                f"--{name.lower()} has no recipe key: {found.managed}"
                if found is not None and found.kind == "managed"
                else f"write {spelled}"
            )
            problems.append(
                Problem(
                    f"command line {redact.words([word])[0]!r}",
                    "arguments are KEY=VALUE words, not --flags",
                    fix,
                )
            )
        elif "=" not in word:
            bare = [word]
            while i + 1 < len(pairs) and "=" not in pairs[i + 1] and not pairs[i + 1].startswith("-"):
                bare.append(pairs[i + 1])
                i += 1
            if last:  # REWARD_FUNCS=accuracy format: the shell split an unquoted list
                whole = " ".join([values[last].value, *bare])
                fix = f'quote the whole value: {last}="{whole}"'
                message = (
                    f"{' '.join(bare)!r} follows {last}=...: a list value must be quoted on the command line"
                )
            else:
                fix, message = (
                    "write KEY=VALUE (for example recipe=smoke NUM_GENERATIONS=8)",
                    "is not a KEY=VALUE word",
                )
            problems.append(Problem(f"command line {word!r}", message, fix))
        else:
            key, value = word.split("=", 1)
            last = key.strip().upper()
            values[last] = Value(value, Origin.COMMAND_LINE)
        i += 1
    return values, problems


def environment_strays(environ: Mapping[str, str], generation: Generation) -> list[Problem]:
    """Warnings for process-environment variables that look meant for the recipe but are not read
    (environment_layer leaves them out): a renamed key (VLLM_DEVICE, LOAD_IN_4BIT) or a near miss of a
    recipe key (ROLLOUT_HSOT). Warned, not refused: the environment holds other programs' variables too (no
    vLLM or shell variable is this close to a recipe key: checked against vllm.envs of the lock)."""
    recipe_keys = [k for k in keys.known() if classify(k) in ("owned", "trainer", "rollout")]
    out = []
    for key in sorted(environ):
        found = keys.lookup(key) if key.isupper() else None
        if not key.isupper() or (found is not None and found.renamed is None):
            continue
        if found is None and not difflib.get_close_matches(key, recipe_keys, n=1, cutoff=0.85):
            continue
        p = explain_unknown(key, Origin.ENVIRONMENT.value, generation)
        unread = f"{p.message}; from the environment it is not read"
        out.append(dataclasses.replace(p, message=unread, fatal=False))
    return out


def _valid_fix(key: str, spec: swift_schema.ArgSpec) -> str:
    """What a refused swift argument takes, and that an empty value leaves ms-swift's default (the way to
    turn off a recipe's QUANT_METHOD=bnb is QUANT_METHOD=, not QUANT_METHOD=none)."""
    what = {"bool": "true or false", "int": "an integer", "float": "a number"}.get(spec.type, "a valid value")
    if spec.choices:
        what = f"one of {', '.join(spec.choices)}"
    d = spec.default
    default = "none" if d is None else str(d).lower() if isinstance(d, bool) else repr(d)
    return f"set {key} to {what}, or leave it empty ({key}=) for ms-swift's default, {default}"


def environment_layer(environ: Mapping[str, str]) -> dict[str, Value]:
    """Known keys set in the process environment (upper-case names only)."""
    layer: dict[str, Value] = {}
    for key, value in environ.items():
        found = keys.lookup(key)
        if not key.isupper() or (found is not None and not found.from_environment):
            continue
        if (
            classify(key) in ("owned", "nccl", "trainer", "rollout")
            or key in MANAGED
            and key != "CUDA_VISIBLE_DEVICES"
        ):
            layer[key] = Value(value, Origin.ENVIRONMENT)
        elif key.startswith("NCCL_") and difflib.get_close_matches(key, NCCL_VARIABLES, n=1, cutoff=0.85):
            # a likely typo; unrelated NCCL_* names pass through
            layer[key] = Value(value, Origin.ENVIRONMENT)
    return layer


def _dataset_replaces_generator(merged: dict[str, Value], problems: list[Problem]) -> None:
    """A DATASET from a later layer than the recipe's DATASET_GENERATOR replaces the generator, as any later
    layer replaces a value (`validate recipe=smoke DATASET=data/my.jsonl` trains on the file). The other
    order, and both in one layer, plan._dataset judges."""
    dataset, generator = merged.get("DATASET"), merged.get("DATASET_GENERATOR")
    if not (dataset and dataset.value and generator and generator.value):
        return
    if dataset.origin.layer > generator.origin.layer:
        problems.append(
            Problem(
                f"DATASET_GENERATOR ({generator.source})",
                f"{generator.value}: not used, DATASET={dataset.value} ({dataset.source}) replaces the "
                "recipe's generated tasks",
                fatal=False,
            )
        )
        merged["DATASET_GENERATOR"] = dataclasses.replace(dataset, value="")


def _model_replaces_its_type(merged: dict[str, Value], problems: list[Problem]) -> None:
    """A MODEL from a later layer than the recipe's MODEL_TYPE or TEMPLATE: those came with the recipe's own
    model. Where ms-swift 3.6.4 registers the new MODEL under another type (by its name), they are left out
    and ms-swift takes the type and its template from its registry; otherwise they stay (a local folder or a
    model ms-swift does not list needs MODEL_TYPE where several types share its architecture: the values
    check compares it with the model's config.json)."""
    model = merged.get("MODEL")
    found = swift_schema.registered_type(model.value) if model and model.value else None
    if found is None:
        return
    registered = {"MODEL_TYPE": found, "TEMPLATE": swift_schema.model_types()[found]["template"]}
    for key, right in registered.items():
        value = merged.get(key)
        if not value or not value.value or value.value == right or value.origin.layer >= model.origin.layer:
            continue
        problems.append(
            Problem(
                f"{key} ({value.source})",
                f"{value.value}: not used, it came with the recipe's own model; ms-swift 3.6.4 registers "
                f"MODEL={model.value} ({model.source}) as {found}, and takes its {key.lower()} "
                f"({right}) from there",
                fatal=False,
            )
        )
        merged[key] = dataclasses.replace(model, value="")


def recipe_path(name: str, recipes_dir: Path = RECIPES_DIR) -> Path:
    """`recipes/<name>.env`, or `name` itself when it is a path to an env file."""
    if name.endswith(".env") or "/" in name:
        return Path(name)
    return recipes_dir / f"{name}.env"


def available_recipes(recipes_dir: Path = RECIPES_DIR) -> list[str]:
    return sorted(p.stem for p in recipes_dir.glob("*.env") if p.name != DEFAULTS_FILE)


def load(
    cli_pairs: list[str],
    environ: Mapping[str, str],
    recipes_dir: Path = RECIPES_DIR,
    strict: bool = True,
    base: Mapping[str, Value] | None = None,
) -> Recipe:
    """Resolve a recipe from the four layers (`environ`: the process environment, read by the CLI).
    Raises BadInput listing every problem found; with strict=False only when there is no recipe to read,
    and otherwise returns the recipe without its bad values, the problems in `Recipe.problems`, so that
    the plan's own checks run too and the user sees everything at once.

    `base`: the values of an earlier run with their original sources (`rerun`, record/rerun.py), in place of
    the two files; the environment then adds only keys `base` lacks (a secret the manifest kept redacted),
    and the command line overrides as always."""
    cli, problems = parse_cli_pairs(cli_pairs)
    if base is not None:
        named = cli.get("RECIPE") or base.get("RECIPE") or Value("", Origin.MANIFEST)
        environment = {k: v for k, v in environment_layer(environ).items() if k not in base}
        layers = [dict(base), environment, cli]
    else:
        named = cli.get("RECIPE") or Value(environ.get("RECIPE", ""), Origin.ENVIRONMENT)
        if not named.value:
            names = ", ".join(available_recipes(recipes_dir))
            raise BadInput(
                problems
                + [Problem("RECIPE", "no recipe named", f"add recipe=NAME; shipped recipes: {names}")]
            )
        layers = _file_layers(named.value, recipes_dir, problems) + [environment_layer(environ), cli]
    name = named.value
    merged: dict[str, Value] = dict(ChainMap(*reversed(layers)))
    merged["RECIPE"] = named
    problems += environment_strays(environ, generation_of(merged))
    _dataset_replaces_generator(merged, problems)
    _model_replaces_its_type(merged, problems)
    owned, trainer, rollout, nccl_values, env = _sort_by_kind(merged, problems)
    settings = settings_of(owned, merged, problems, simulated=bool(environ.get("GRPO_RIG_SWIFT")))
    # unset, the run is named <recipe file>-<timestamp> (facts.run_dir_of): a name too long for a directory?
    unnamed = None if settings.RUN_NAME else default_run_name_problem(name)
    if unnamed:
        problems.append(Problem("RUN_NAME (default)", *unnamed))
    if strict and any(p.fatal for p in problems):
        raise BadInput(problems)
    return Recipe(
        name=name,
        values=merged,
        settings=settings,
        trainer=trainer,
        rollout=rollout,
        nccl=nccl_values,
        env=env,
        problems=problems,
        dropped=frozenset(p.where.split(" (")[0] for p in problems if p.fatal),
    )


def _file_layers(name: str, recipes_dir: Path, problems: list[Problem]) -> list[dict[str, Value]]:
    """recipes/defaults.env and the recipe file (raises BadInput when the recipe file is missing or cannot be
    read as text)."""
    layers: list[dict[str, Value]] = []
    defaults_path = recipes_dir / DEFAULTS_FILE
    if exists(defaults_path):
        values, found = read_env_file(defaults_path, f"recipes/{DEFAULTS_FILE}", Origin.DEFAULTS_FILE)
        layers.append(values)
        problems += found
    path = recipe_path(name, recipes_dir)
    _, why = read_user_file(path) if exists(path) else (None, "")
    if why or not exists(path):  # nothing else can be checked without the recipe
        shipped = available_recipes(recipes_dir)
        close = difflib.get_close_matches(name, shipped, n=1) if not why else []
        problems.append(
            Problem(
                "RECIPE",
                f"the recipe file {path} {why}" if why else f"no recipe file {path}",
                (f"did you mean recipe={close[0]}? " if close else "")
                + f"use one of: {', '.join(shipped)}, or a path to an .env text file",
            )
        )
        raise BadInput(problems)
    label = f"recipes/{path.name}" if path.parent.resolve() == recipes_dir.resolve() else str(path)
    values, found = read_env_file(path, label)
    problems += found
    return [*layers, values]


def _sort_by_kind(merged: dict[str, Value], problems: list[Problem]):
    """(owned, trainer, rollout, nccl, env) values by the registry's kinds (keys.py); swift arguments
    type-checked against ms-swift's own schema."""
    owned: dict[str, str] = {}
    trainer: dict[str, list[str]] = {}
    rollout: dict[str, list[str]] = {}
    nccl_values: dict[str, Value] = {}
    env: dict[str, str] = {}
    rlhf_schema, rollout_schema = swift_schema.load("rlhf"), swift_schema.load("rollout")
    generation = generation_of(merged)
    for key, item in sorted(merged.items()):
        kind = classify(key)
        if kind is None:
            problems.append(explain_unknown(key, item.source, generation))
        elif kind == "owned":
            owned[key] = item.value
        elif kind == "nccl":
            nccl_values[key] = item
        elif kind == "env":
            value = _env_value(key, item, problems)
            if value is not None:
                env[key] = value
        elif item.value != "":  # empty swift argument: leave ms-swift's default
            spec = (
                rlhf_schema[key.lower()]
                if kind == "trainer"
                else rollout_schema[key[len("ROLLOUT_") :].lower()]
            )
            try:
                tokens = spec.coerce(item.value)
            except ValueError as exc:
                problems.append(Problem(f"{key} ({item.source})", str(exc), _valid_fix(key, spec)))
                continue
            out_of_range = _out_of_range(key, tokens)
            if out_of_range:  # left out, so that planning goes on with ms-swift's default
                problems.append(Problem(f"{key} ({item.source})", *out_of_range))
                continue
            if key in keys.DEPRECATED:
                message, source = keys.DEPRECATED[key]
                problems.append(
                    Problem(
                        f"{key} ({item.source})", f"{message} [source: {source}]", "remove it", fatal=False
                    )
                )
            (trainer if kind == "trainer" else rollout)[spec.name] = tokens
    return owned, trainer, rollout, nccl_values, env


def _env_value(key: str, item: Value, problems: list[Problem]) -> str | None:
    """The value a child gets for a pass-through variable; None leaves it out. VLLM_USE_V1 is read by vLLM as
    `bool(int(os.getenv("VLLM_USE_V1", "1")))` at import (vllm 0.8.5.post1 envs.py), so any other text ends
    the trainer with a ValueError after the model is loaded: refused here instead, and an empty value (this
    project's "leave the default") is left out rather than passed as the "" that int() cannot read."""
    if key != "VLLM_USE_V1":
        return item.value
    value = item.value.strip()
    if not value:
        return None
    try:
        int(value)
    except ValueError:
        problems.append(
            Problem(
                f"VLLM_USE_V1={item.value} ({item.source})",
                "vLLM reads VLLM_USE_V1 as an integer (vllm/envs.py: bool(int(...))) and would stop the run "
                "at its import",
                "set VLLM_USE_V1=1 (ms-swift's V1 engine) or 0 (vLLM's V0 engine), or remove it",
            )
        )
        return None
    return value


def _out_of_range(key: str, tokens: list[str]) -> tuple[str, str] | None:
    """(message, fix) when a numeric argument is outside the values ms-swift / trl / vLLM give it a meaning
    for (keys.RANGES, with sources)."""
    bounds = keys.range_of(key)
    if bounds is None:
        return None
    for token in tokens:
        if not bounds.admits(float(token)):
            return (
                f"{token} is outside its range: {bounds.meaning} [source: {bounds.source}]",
                f"set {key} {bounds.describe()}",
            )
    return None


def settings_of(
    owned: dict[str, str], merged: dict[str, Value], problems: list[Problem], simulated: bool = False
) -> Settings:
    """The owned keys' typed values; every value pydantic refuses becomes a problem naming its source and a
    value that fits. `simulated`: the trainer is a stand-in (GRPO_RIG_SWIFT, the tests' fake ms-swift), whose
    steps take milliseconds, so the time settings may go below a real run's least (settings.least)."""
    context = {"simulated": simulated}
    try:
        return Settings.model_validate(owned, context=context)
    except ValidationError as exc:
        bad = set()
        for err in exc.errors():
            key = str(err["loc"][0]) if err["loc"] else "?"
            bad.add(key)
            source = merged[key].source if key in merged else "default"
            problems.append(Problem(f"{key} ({source})", _said(err, owned.get(key)), _fix(key, err)))
    try:  # the valid values still count, so that the plan's own checks see the recipe as written
        return Settings.model_validate({k: v for k, v in owned.items() if k not in bad}, context=context)
    except ValidationError:  # a validator across keys: nothing to keep
        return Settings()


def _said(err: dict, value: str | None) -> str:
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    limits = {
        "greater_than_equal": ("ge", "is below"),
        "greater_than": ("gt", "is not above"),
        "less_than_equal": ("le", "is above"),
        "less_than": ("lt", "is not below"),
    }
    if kind in limits and value is not None:
        return f"{value} {limits[kind][1]} {ctx[limits[kind][0]]}"
    if kind == "value_error":  # a validator's own sentence, without pydantic's "Value error, " prefix
        return str(ctx.get("error") or err["msg"])
    if kind in ("int_parsing", "float_parsing", "bool_parsing", "literal_error") and value is not None:
        what = {
            "int_parsing": "an integer",
            "float_parsing": "a number",
            "bool_parsing": "true or false",
        }.get(kind)
        return f"{value!r} is not {what}" if what else f"{value!r} is not one of {err['ctx']['expected']}"
    return err["msg"]


def _fix(key: str, err: dict) -> str:
    """A fix that names values the key takes (pydantic's error type and bounds)."""
    ctx, kind = err.get("ctx") or {}, err.get("type", "")
    if kind == "value_error" and getattr(ctx.get("error"), "fix", ""):  # settings.Refused knows its fix
        return ctx["error"].fix
    bounds = {
        "greater_than_equal": ("ge", "or more"),
        "greater_than": ("gt", "above"),
        "less_than_equal": ("le", "or less"),
        "less_than": ("lt", "below"),
    }
    if kind in bounds:
        name, words = bounds[kind]
        return (
            f"set {key} to {ctx[name]} {words}"
            if words.startswith("or")
            else f"set {key} to a value {words} {ctx[name]}"
        )
    if kind == "literal_error":
        return f"use one of {ctx['expected']}"
    if kind == "int_parsing":
        return f"set {key} to an integer"
    if kind == "float_parsing":
        return f"set {key} to a number"
    if kind == "bool_parsing":
        return f"set {key} to true or false"
    return f"set a valid {key}"
