"""The argument names, types and choices of the pinned ms-swift's `swift rlhf` and `swift rollout`.

Importing ms-swift takes about 25 s (it imports torch, transformers and deepspeed), far too slow for a
preflight that must answer in seconds. So the schema is generated once from the installed package and
committed as `entrypoint/data/swift_{rlhf,rollout}_args.json`; `tests/recipe/test_swift_schema.py` regenerates
it and fails on any difference, so it cannot drift from the lock.

Source of the lists: `dataclasses.fields(RLHFArguments | RolloutArguments)` (all init fields) and the
argparse actions `transformers.HfArgumentParser` builds from them, the same parser ms-swift's CLI uses
(v3.6.4:swift/utils/utils.py:142-152). Regenerate: `python -m entrypoint.recipe.swift_schema --write`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
import sys
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
COMMANDS = ("rlhf", "rollout")

# string_to_bool in transformers.hf_argparser accepts these (case-insensitive).
TRUE_WORDS = {"yes", "true", "t", "y", "1"}
FALSE_WORDS = {"no", "false", "f", "n", "0"}


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """One `--name` of a swift command: its value type, list-ness, choices and default."""

    name: str
    type: str  # "bool" | "int" | "float" | "str"
    nargs: str | None  # "+" for list values, else None
    choices: tuple[str, ...] | None
    default: Any

    def coerce(self, value: str) -> list[str]:
        """Check `value` as the swift CLI would parse it and return the argv tokens after `--name`.

        Lists (nargs "+") are split on whitespace. Raises ValueError naming the expected type or choices.
        """
        tokens = value.split() if self.nargs == "+" else [value]
        if not tokens:
            raise ValueError("empty list")
        return [self._coerce_one(t) for t in tokens]

    def _coerce_one(self, token: str) -> str:
        if self.type == "bool":
            word = token.strip().lower()
            if word in TRUE_WORDS:
                return "true"
            if word in FALSE_WORDS:
                return "false"
            raise ValueError(f"{token!r} is not a boolean (use true or false)")
        if self.type == "int":
            try:
                int(token)
            except ValueError:
                raise ValueError(f"{token!r} is not an integer") from None
        elif self.type == "float":
            try:
                float(token)
            except ValueError:
                raise ValueError(f"{token!r} is not a number") from None
        if self.choices is not None and token not in self.choices:
            raise ValueError(f"{token!r} is not one of {', '.join(self.choices)}")
        return token


def _type_name(action: argparse.Action) -> str:
    kind = getattr(action.type, "__name__", "")
    if kind == "string_to_bool":
        return "bool"
    if kind in ("int", "float"):
        return kind
    return "str"  # str, Path, DebugOption and the Literal choice lambdas all take the raw string


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def generate(command: str) -> dict[str, dict]:
    """Build the schema of `swift <command>` from the installed ms-swift (slow: imports it)."""
    from swift.llm import RLHFArguments, RolloutArguments
    from transformers import HfArgumentParser

    cls = {"rlhf": RLHFArguments, "rollout": RolloutArguments}[command]
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    parser = HfArgumentParser([cls])
    schema: dict[str, dict] = {}
    for action in parser._actions:
        if action.dest not in names or not action.option_strings[0].startswith(f"--{action.dest}"):
            continue  # --help and the --no_<name> twins of True-default bools
        choices = None if action.choices is None else [str(c) for c in action.choices]
        schema[action.dest] = {
            "type": _type_name(action),
            "nargs": "+" if action.nargs == "+" else None,
            "choices": choices,
            "default": _jsonable(action.default),
        }
    missing = names - schema.keys()
    assert not missing, f"fields without a CLI option: {sorted(missing)}"
    return dict(sorted(schema.items()))


# Environment variables that ms-swift's docs list as model settings ("Specific Model Arguments", read by
# qwen_vl_utils / qwen_omni_utils for the Qwen VL models; v3.6.4:docs/source_en/Instruction/
# Command-line-parameters.md:663-735) and as "Other Environment Variables" (:736-752). The code scan below
# finds the ones ms-swift's own code reads.
DOCUMENTED_ENV = (
    "IMAGE_FACTOR", "MIN_PIXELS", "MAX_PIXELS", "MAX_RATIO", "VIDEO_MIN_PIXELS", "VIDEO_MAX_PIXELS",
    "VIDEO_TOTAL_PIXELS", "FRAME_FACTOR", "FPS", "FPS_MIN_FRAMES", "FPS_MAX_FRAMES", "LOG_LEVEL",
    "SWIFT_DEBUG", "VLLM_USE_V1", "PYTORCH_CUDA_ALLOC_CONF",
)  # fmt: skip
ENV_FILE = DATA_DIR / "swift_env_vars.json"


def scan_environment(package_dir: Path) -> dict[str, list[str]]:
    """Every environment variable the ms-swift source under `package_dir` reads: os.getenv / os.environ
    .get / os.environ[...] / `in os.environ` with a literal name, and swift.utils.get_env_args (which
    upper-cases its name). {NAME: ["swift/path.py:line", ...]}; no import, so it takes a second."""
    import ast

    found: dict[str, list[str]] = {}
    readers = ("os.getenv", "os.environ.get", "environ.get", "get_env_args")
    for path in sorted(package_dir.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                if ast.unparse(node.func) in readers and isinstance(node.args[0].value, str):
                    name = node.args[0].value.upper()
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                if ast.unparse(node.value) == "os.environ" and isinstance(node.slice, ast.Constant):
                    name = node.slice.value
            elif (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Constant)
                and isinstance(node.left.value, str)
                and any(ast.unparse(c) == "os.environ" for c in node.comparators)
            ):
                name = node.left.value
            if name and name.replace("_", "").isalnum() and name.isupper():
                where = f"swift/{path.relative_to(package_dir).as_posix()}:{node.lineno}"
                found.setdefault(name, []).append(where)
    return dict(sorted(found.items()))


@functools.cache
def environment_variables() -> dict[str, list[str]]:
    """The committed scan of the lock's ms-swift (ENV_FILE), plus the documented ones."""
    scanned = json.loads(ENV_FILE.read_text())
    return {
        **{name: ["v3.6.4:docs/source_en/Instruction/Command-line-parameters.md"] for name in DOCUMENTED_ENV},
        **scanned,
    }


MODEL_TYPES_FILE = DATA_DIR / "swift_model_types.json"


def model_name(model: str) -> str:
    """The name ms-swift 3.6.4 matches a model by: the last part of a hub id or path, lowercased, a hub
    cache snapshot's repository name, ModelScope's '___' as '.' (swift/llm/model/register.py:382-403)."""
    snapshot = re.search(r"/models--.+?--(.+?)/snapshots/", model)
    name = snapshot.group(1) if snapshot else model.rstrip("/").rsplit("/", 1)[-1]
    return name.replace("___", ".").lower()


def generate_model_types() -> dict[str, dict]:
    """ms-swift's registered model types (swift/llm/model/register.py MODEL_MAPPING): for each, the
    architectures it is registered for, its template and the names of the models it lists (model_name)."""
    from swift.llm.model.register import MODEL_MAPPING

    out = {}
    for model_type, meta in sorted(MODEL_MAPPING.items()):
        ids = {i for g in meta.model_groups for m in g.models for i in (m.ms_model_id, m.hf_model_id) if i}
        out[model_type] = {
            "architectures": sorted(a for a in meta.architectures or [] if a != "null"),
            "template": meta.template,
            "models": sorted({model_name(i) for i in ids}),
        }
    return out


@functools.cache
def model_types() -> dict[str, dict]:
    """The committed registry of the lock's ms-swift (MODEL_TYPES_FILE, generate_model_types)."""
    return json.loads(MODEL_TYPES_FILE.read_text())


def registered_type(model: str) -> str | None:
    """The model type ms-swift 3.6.4 finds for MODEL by its name (a hub id it lists), None when it lists no
    such name (a local folder named otherwise, a model it does not know): then it goes by the config's
    architectures and needs MODEL_TYPE where several types share one (register.py:477-486)."""
    name = model_name(model)
    return next((t for t, v in model_types().items() if name in v["models"]), None)


def types_for_architecture(architecture: str | None) -> list[str]:
    """ms-swift's model types registered for a config.json architecture ("LlamaForCausalLM"), in name
    order."""
    return [t for t, v in model_types().items() if architecture in v["architectures"]] if architecture else []


REGISTRY_FILE = DATA_DIR / "swift_registry.json"
# What names ms-swift 3.6.4 registers, and where: a value outside them fails after the model has loaded.
REGISTRY_SOURCES = {
    "train_types": "v3.6.4:swift/llm/argument/base_args/base_args.py:23-25 (get_supported_tuners, with "
    "swift.plugin.extra_tuners)",
    "loss_types": "v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:1179-1186 (GRPOTrainer's loss "
    "branches)",
    "multi_turn_schedulers": "v3.6.4:swift/plugin/multi_turn.py:99 (multi_turns)",
    "orms": "v3.6.4:swift/plugin/orm.py:398 (orms)",
    "rm_plugins": "v3.6.4:swift/plugin/rm_plugin.py:228 (rm_plugins)",
    "optimizers": "v3.6.4:swift/plugin/optimizer.py:161 (optimizers_map)",
    "templates": "v3.6.4:swift/llm/template/register.py (TEMPLATE_MAPPING)",
    "transformers_model_types": "transformers 4.51.3:src/transformers/models/auto/configuration_auto.py "
    "(CONFIG_MAPPING_NAMES)",
}


# Keyword arguments ms-swift passes to every reward function besides the dataset columns
# (v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:927-929).
PROVIDED_TO_REWARDS = {"messages", "is_truncated", "trainer_state", "completions"}


def reward_columns(cls) -> list[str]:
    """Dataset columns a reward class's __call__ needs: parameters without defaults, after the first
    positional one (which receives the completions), minus what ms-swift always passes."""
    import inspect

    params = list(inspect.signature(cls.__call__).parameters.values())[1:]  # drop self
    if params and params[0].kind in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        params = params[1:]
    return [
        p.name
        for p in params
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.name not in PROVIDED_TO_REWARDS
    ]


def _loss_types(trainer_cls) -> list[str]:
    """The strings GRPOTrainer compares `self.loss_type` with: the loss types its loss computes."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(trainer_cls)))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and ast.unparse(node.left) == "self.loss_type":
            found |= {
                c.value for c in node.comparators if isinstance(c, ast.Constant) and isinstance(c.value, str)
            }
    return sorted(found)


def generate_registry() -> dict[str, Any]:
    """The names ms-swift registers (slow: imports it). The reward functions with the dataset columns their
    __call__ requires (reward_columns, the rule the plugin probe applies to plugins' rewards)."""
    from swift.llm.argument.base_args.base_args import get_supported_tuners
    from swift.llm.template import TEMPLATE_MAPPING
    from swift.plugin import multi_turns, optimizers_map, orms, rm_plugins
    from swift.trainers.rlhf_trainer.grpo_trainer import GRPOTrainer
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return {
        "train_types": sorted(get_supported_tuners()),
        "loss_types": _loss_types(GRPOTrainer),
        "multi_turn_schedulers": sorted(multi_turns),
        "orms": {name: reward_columns(cls) for name, cls in sorted(orms.items())},
        "rm_plugins": sorted(rm_plugins),
        "optimizers": sorted(optimizers_map),
        "templates": sorted(TEMPLATE_MAPPING),
        "transformers_model_types": sorted(CONFIG_MAPPING_NAMES),
    }


@functools.cache
def registry() -> dict[str, Any]:
    """The committed names of the lock's ms-swift (REGISTRY_FILE, generate_registry)."""
    return json.loads(REGISTRY_FILE.read_text())


PREPROCESSORS_FILE = DATA_DIR / "swift_preprocessors.json"
PREPROCESSOR_SOURCE = "v3.6.4:swift/llm/dataset/preprocessor/core.py"
_PROMPTS = {
    "messages": {"messages": [{"role": "user", "content": "q"}]},
    "alpaca": {"instruction": "i", "input": "n"},
    "response": {"query": "q"},
}


def generate_preprocessors() -> dict[str, Any]:
    """How ms-swift's AutoPreprocessor reads a dataset's columns (slow: imports ms-swift and runs it on
    one-row datasets): for each of its preprocessors, the columns it renames (`columns`: name -> standard
    name), the standard names its preprocess() consumes into `messages`, and the columns GRPO keeps beside
    them although they are renamed (`kept`: the `__#solution` copy); and which columns choose which
    preprocessor."""
    from datasets import Dataset
    from swift.llm.dataset.preprocessor.core import (
        AlpacaPreprocessor,
        AutoPreprocessor,
        MessagesPreprocessor,
        ResponsePreprocessor,
    )

    classes = {
        "messages": MessagesPreprocessor,
        "alpaca": AlpacaPreprocessor,
        "response": ResponsePreprocessor,
    }
    names = {cls.__name__: name for name, cls in classes.items()}

    def chosen(row: dict) -> str:
        return names[type(AutoPreprocessor()._get_preprocessor(Dataset.from_list([row]))).__name__]

    out: dict[str, Any] = {}
    for name, cls in classes.items():
        columns = dict(cls().columns)
        standard = set(columns.values()) | set(_PROMPTS[name]) | {"history", "output", "probe"}
        special = {"messages": _PROMPTS["messages"]["messages"], "history": []}
        row = {k: special.get(k, "q") for k in standard if k not in ("images", "audios", "videos")}
        after = set(cls().preprocess(dict(row)) or {})
        consumed = sorted(set(row) - after - {"messages"})
        kept = []
        if name == "response":  # a response column that survives its renaming
            for key in (k for k, v in columns.items() if v == "response" and k != "response"):
                result = AutoPreprocessor()(Dataset.from_list([{"query": "q", key: "v"}]))
                if key in result.features:
                    kept.append(key)
        out[name] = {"columns": columns, "consumed": consumed, "kept": sorted(kept)}
    keys = sorted({k for v in out.values() for k in v["columns"]} | {"messages"})
    out["chosen_by"] = {
        "messages": [k for k in keys if chosen({k: _PROMPTS["messages"]["messages"]}) == "messages"],
        "alpaca": ["instruction", "input"] if chosen({"instruction": "i", "input": "n"}) == "alpaca" else [],
    }
    return out


@functools.cache
def preprocessors() -> dict[str, Any]:
    """The committed reading of ms-swift's dataset preprocessors (PREPROCESSORS_FILE,
    generate_preprocessors)."""
    return json.loads(PREPROCESSORS_FILE.read_text())


def path_for(command: str) -> Path:
    return DATA_DIR / f"swift_{command}_args.json"


@functools.cache
def load(command: str) -> dict[str, ArgSpec]:
    """The committed schema of `swift <command>` ("rlhf" or "rollout"), keyed by argument name."""
    raw = json.loads(path_for(command).read_text())
    return {
        name: ArgSpec(
            name=name,
            type=spec["type"],
            nargs=spec["nargs"],
            choices=tuple(spec["choices"]) if spec["choices"] is not None else None,
            default=spec["default"],
        )
        for name, spec in raw.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the committed JSON files")
    args = parser.parse_args(argv)
    import swift

    env = json.dumps(scan_environment(Path(swift.__file__).parent), indent=1) + "\n"
    if args.write:
        ENV_FILE.write_text(env)
        print(f"wrote {ENV_FILE} ({len(json.loads(env))} variables)")
        types = generate_model_types()
        MODEL_TYPES_FILE.write_text(json.dumps(types, indent=0, sort_keys=True) + "\n")
        print(f"wrote {MODEL_TYPES_FILE} ({len(types)} model types)")
        REGISTRY_FILE.write_text(json.dumps(generate_registry(), indent=0) + "\n")
        print(f"wrote {REGISTRY_FILE}")
        PREPROCESSORS_FILE.write_text(json.dumps(generate_preprocessors(), indent=0) + "\n")
        print(f"wrote {PREPROCESSORS_FILE}")
    for command in COMMANDS:
        text = json.dumps(generate(command), indent=1, ensure_ascii=False) + "\n"
        if args.write:
            path_for(command).write_text(text)
            print(f"wrote {path_for(command)} ({len(json.loads(text))} arguments)")
        else:
            sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
