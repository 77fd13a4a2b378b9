"""Import reward plugins the way ms-swift does, in a throwaway process, and report what they register.

Run as `python -m entrypoint.world.plugin_probe [--real] FILE ...`; prints one JSON object:

    {"registered": {name: {"class": str, "columns": [required dataset columns]}},
     "errors": [{"file": str, "error": str}], "shadowed": [{"file": str, "module": str, "origin": str}],
     "stub": bool, "calls": {name: {"ok": bool, "returned": str, "raised": str}},
     "registries": {"multi_turn_schedulers" | "rm_plugins" | "optimizers" | "train_types": [names]}}

`registries`: the names in ms-swift's other plugin registries once the plugins are imported (the built-in
ones and those a plugin added: a multi-turn scheduler, a reward-model plugin, an optimizer, a tuner).

With `--call NAME,... --rows FILE` (a JSON list of a few dataset rows), each named plugin reward is also
called once the way ms-swift calls it (v3.6.4:swift/trainers/rlhf_trainer/grpo_trainer.py:920-940: the
completions first, then the rows' columns as lists, messages and trainer_state), on two completions per
row; `ok` says whether it returned one number (NaN included: ms-swift turns None into NaN and skips both)
or None per completion, `scored` which completions got a finite number.

ms-swift imports a plugin by putting its folder first on sys.path and calling
`importlib.import_module(<file stem>)` (v3.6.4:swift/utils/utils.py:318-323). A stem that names an
installed module (say `datasets.py`) is never loaded: the installed module is already imported. Such
stems are reported as `shadowed` and not imported.

Importing ms-swift itself costs ~10 s (torch, transformers), too slow for a preflight. Unless `--real`,
`swift.plugin` is replaced by a stub holding `ORM` and the built-in `orms` names; a plugin that imports
other parts of ms-swift fails under the stub and the caller retries with `--real`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

from entrypoint.recipe import swift_schema

# ms-swift 3.6.4's registries as committed (swift_schema.registry()): the built-in ORMs with the dataset
# columns their __call__ requires, and the other names a plugin may add to.
BUILTIN_COLUMNS = swift_schema.registry()["orms"]
REGISTRIES = {
    "multi_turns": "multi_turn_schedulers",
    "rm_plugins": "rm_plugins",
    "optimizers_map": "optimizers",
    "extra_tuners": "train_types",
}


def install_stub() -> None:
    swift = types.ModuleType("swift")
    swift.__path__ = []  # a package, so `swift.plugin` resolves
    plugin = types.ModuleType("swift.plugin")

    class ORM:
        def __call__(self, **kwargs):
            raise NotImplementedError

    plugin.ORM = ORM
    plugin.orms = {name: None for name in BUILTIN_COLUMNS}
    for name, key in REGISTRIES.items():
        setattr(plugin, name, dict.fromkeys(swift_schema.registry()[key]))
    swift.plugin = plugin
    sys.modules["swift"] = swift
    sys.modules["swift.plugin"] = plugin


required_columns = swift_schema.reward_columns


def probe(files: list[str], stub: bool) -> dict:
    if stub:
        install_stub()
    result: dict = {"registered": {}, "errors": [], "shadowed": [], "stub": stub}
    for file in files:
        path = Path(file)
        stem = path.stem
        spec = importlib.util.find_spec(stem) if stem not in sys.modules else None
        existing = sys.modules.get(stem)
        origin = getattr(existing, "__file__", None) or (spec.origin if spec else None)
        if (existing is not None or spec is not None) and (
            origin is None or Path(origin).resolve() != path.resolve()
        ):
            result["shadowed"].append({"file": file, "module": stem, "origin": str(origin)})
            continue
        sys.path.insert(0, str(path.parent))
        try:
            importlib.import_module(stem)
        except BaseException as exc:  # noqa: BLE001 - report whatever the plugin raises
            result["errors"].append(
                {
                    "file": file,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=3),
                }
            )
    import swift.plugin
    from swift.plugin import orms

    result["registries"] = {key: sorted(getattr(swift.plugin, name, {})) for name, key in REGISTRIES.items()}
    for name, cls in orms.items():
        if cls is None:
            result["registered"][name] = {
                "class": f"ms-swift built-in {name}",
                "columns": BUILTIN_COLUMNS[name],
            }
        else:
            try:
                columns = required_columns(cls)
            except (TypeError, ValueError):
                columns = []
            result["registered"][name] = {"class": getattr(cls, "__name__", str(cls)), "columns": columns}
    return result


def _number(value) -> bool:
    """One reward as ms-swift takes it: None, or anything torch.tensor turns into a finite float (Python and
    numpy numbers, 0-d tensors); never a string."""
    import math

    if value is None:
        return True
    if isinstance(value, str | bytes) or not hasattr(value, "__float__"):
        return False
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(number) or math.isnan(number)  # NaN is None to ms-swift; inf breaks the mean


def _finite(value) -> bool:
    import math

    try:
        return value is not None and not isinstance(value, str | bytes) and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def call_rewards(names: list[str], rows: list[dict]) -> dict:
    """Call each plugin reward in `names` on two completions per row (the row's own `solution` when it has
    one, and a wrong answer); {name: {"ok", "returned", "raised"}}. Built-ins (ms-swift's) are skipped."""
    from types import SimpleNamespace

    from swift.plugin import orms

    completions, columns, messages = [], {}, []
    for row in rows:
        for text in (str(row.get("solution") or "42"), "I do not know."):
            completions.append(text)
            messages.append([*(row.get("messages") or []), {"role": "assistant", "content": text}])
            for key, value in row.items():
                if key != "messages":
                    columns.setdefault(key, []).append(value)
    state = SimpleNamespace(global_step=0, max_steps=1, epoch=0.0)
    out: dict = {}
    for name in names:
        cls = orms.get(name)
        if cls is None or name in BUILTIN_COLUMNS or not completions:
            continue
        try:
            func = cls() if inspect.isclass(cls) else cls
            returned = func(completions, messages=messages, trainer_state=state, **columns)
        except BaseException as exc:  # noqa: BLE001 - the plugin's own failure, reported as a warning
            out[name] = {"ok": True, "returned": "", "raised": f"{type(exc).__name__}: {exc}"}
            continue
        try:
            values = list(returned)
        except TypeError:
            values = None
        ok = values is not None and len(values) == len(completions) and all(_number(v) for v in values)
        out[name] = {
            "ok": ok,
            "returned": repr(returned)[:200],
            "raised": "",
            "count": len(completions),
            "scored": [_finite(v) for v in values] if ok else [],
        }
    return out


# How long the probe waits for one import round. The --real fallback imports ms-swift: ~10 s on 2 idle cores,
# minutes where other work shares them. The base scales with the load per core (os.getloadavg), up to MAX;
# past the bound the probe stops waiting and says so: a slow import is a warning, the run goes on (ms-swift
# imports the plugins itself); only an import that fails is an error.
PROBE_BASE_SECONDS = 120.0
PROBE_MAX_SECONDS = 600.0


def probe_bound(load: float | None, cpus: int | None) -> tuple[float, str]:
    """(seconds the probe waits, why that long): the base, times the load average per core when above 1."""
    per_core = (load or 0.0) / max(1, cpus or 1)
    if per_core <= 1.0:
        return PROBE_BASE_SECONDS, f"{PROBE_BASE_SECONDS:.0f} s"
    seconds = min(PROBE_MAX_SECONDS, PROBE_BASE_SECONDS * per_core)
    return seconds, (
        f"{PROBE_BASE_SECONDS:.0f} s x {per_core:.1f} for a load average of {load:.1f} on {cpus} "
        f"core(s){', capped' if seconds == PROBE_MAX_SECONDS else ''}"
    )


def _machine_bound() -> tuple[float, str]:
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return probe_bound(load, os.cpu_count())


def _run_probe(files: list[str], real: bool, call: list[str] | None, rows: str, timeout: float) -> dict:
    extra = ["--call", ",".join(call), "--rows", rows] if call and rows else []
    argv = [
        sys.executable,
        "-m",
        "entrypoint.world.plugin_probe",
        *(["--real"] if real else []),
        *extra,
        *files,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=Path.cwd())  # noqa: S603
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        )
    return json.loads(lines[-1])


def _needs_real_swift(result: dict) -> bool:
    return any(
        "swift" in e["error"] and ("ModuleNotFoundError" in e["error"] or "ImportError" in e["error"])
        for e in result["errors"]
    )


def run(
    files: list[str],
    call: list[str] | None = None,
    rows: list[dict] | None = None,
    bound: tuple[float, str] | None = None,
) -> tuple[dict | None, str]:
    """Probe plugin `files` in a throwaway process, with the stub swift.plugin first and the real one
    when a plugin needs more of ms-swift; with `call` and `rows`, call those rewards on the rows too.
    Returns (the probe's answer, "") or (None, the error). An import round that outlasts `bound` (seconds,
    why; default probe_bound of this machine's load) is not an error: the answer then says `slow` (how long
    it waited, why that long) and ms-swift's built-in rewards only."""
    import tempfile

    seconds, why = bound or _machine_bound()
    start = time.monotonic()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(list(rows or [])[:2], f, default=str)
    try:
        result = _run_probe(files, False, call, f.name, seconds)
        if _needs_real_swift(result):
            result = _run_probe(files, True, call, f.name, seconds)
    except subprocess.TimeoutExpired:
        waited = time.monotonic() - start
        builtins = {n: {"class": f"ms-swift built-in {n}", "columns": c} for n, c in BUILTIN_COLUMNS.items()}
        return {
            "registered": builtins,
            "errors": [],
            "shadowed": [],
            "slow": {"seconds": round(waited), "bound": why},
        }, ""
    except (RuntimeError, ValueError) as exc:
        return None, str(exc)
    finally:
        Path(f.name).unlink(missing_ok=True)
    result["seconds"] = round(time.monotonic() - start, 1)
    return result, ""


def main() -> None:
    args = sys.argv[1:]
    real = "--real" in args
    call, rows = [], []
    if "--call" in args:
        i = args.index("--call")
        call = [n for n in args[i + 1].split(",") if n]
        del args[i : i + 2]
    if "--rows" in args:
        i = args.index("--rows")
        rows = json.loads(Path(args[i + 1]).read_text())
        del args[i : i + 2]
    files = [a for a in args if a != "--real"]
    result = probe(files, stub=not real)
    result["calls"] = call_rewards(call, rows) if call and rows else {}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
