"""Reward plugins: the files exist, import the way ms-swift imports them, and register every reward
function the recipe names; and which dataset columns each of those functions reads."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from entrypoint.errors import Problem

PROBE_TIMEOUT = 120  # seconds; the --real fallback imports ms-swift (~10 s on 2 cores)


@dataclasses.dataclass(frozen=True)
class RewardInfo:
    name: str
    cls: str
    columns: list[str]  # dataset columns its __call__ requires


def _run_probe(files: list[str], real: bool) -> dict:
    argv = [sys.executable, "-m", "entrypoint.preflight.plugin_probe", *(["--real"] if real else []), *files]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT, cwd=Path.cwd())  # noqa: S603
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


def check(plugin_files: list[str], reward_funcs: list[str]) -> tuple[dict[str, RewardInfo], list[Problem]]:
    """Probe the plugins; returns (name -> RewardInfo for the requested rewards, problems)."""
    problems: list[Problem] = []
    existing = []
    for f in plugin_files:
        if Path(f).is_file():
            existing.append(f)
        else:
            problems.append(
                Problem(
                    f"EXTERNAL_PLUGINS {f}",
                    "does not exist inside the container",
                    "mount it (e.g. under ./data, which compose mounts at /data) and give its container path",
                )
            )
    try:
        result = _run_probe(existing, real=False)
        if _needs_real_swift(result):
            result = _run_probe(existing, real=True)
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
        return {}, problems + [
            Problem(
                "EXTERNAL_PLUGINS",
                f"importing the reward plugins failed: {exc}",
                "run the plugin file with python to see the error",
            )
        ]

    for s in result["shadowed"]:
        problems.append(
            Problem(
                f"EXTERNAL_PLUGINS {s['file']}",
                f"its file name makes ms-swift import it as module {s['module']!r}, which is already the installed "
                f"{s['origin']}: the plugin would silently never load",
                f"rename the file to something unique, e.g. my_{s['module']}_rewards.py",
            )
        )
    for e in result["errors"]:
        problems.append(
            Problem(
                f"EXTERNAL_PLUGINS {e['file']}",
                f"import failed: {e['error']}",
                "fix the plugin (ms-swift would fail the same way after loading the model)",
            )
        )
    registered = result["registered"]
    infos: dict[str, RewardInfo] = {}
    for name in reward_funcs:
        if name in registered:
            infos[name] = RewardInfo(name, registered[name]["class"], registered[name]["columns"])
        else:
            known = ", ".join(sorted(registered))
            problems.append(
                Problem(
                    f"REWARD_FUNCS {name}",
                    f"no reward function is registered under {name!r} (registered: {known})",
                    "use a registered name, or add a plugin file that sets orms[name] = YourORM to EXTERNAL_PLUGINS",
                )
            )
    return infos, problems
