"""Reward plugins: the files exist, import the way ms-swift imports them (world/plugin_probe.py, run at the
edge by host.gather), and register every reward function the recipe names; and which dataset columns
each of those functions reads."""

from __future__ import annotations

import dataclasses
import difflib

from entrypoint.errors import Problem
from entrypoint.rewards import PLUGIN_FILE

NOT_PROBED = (
    "not imported: this command starts nothing"  # host.gather(probe_plugins=False): the probe's error
)


@dataclasses.dataclass(frozen=True)
class RewardInfo:
    name: str
    cls: str
    columns: list[str]  # dataset columns its __call__ requires


def _unscored(calls: dict, reward_funcs: list[str]) -> list[Problem]:
    """A probe completion that every reward left at None/NaN: ms-swift 3.6.4 cannot score it (its warning
    about such a row fails with "'TrainerState' object is not subscriptable";
    tests/child/test_hook_patches.py). Only when every reward was called (a built-in's answer is not
    probed)."""
    answered = [calls[n] for n in reward_funcs if n in calls and calls[n].get("scored")]
    if not reward_funcs or len(answered) != len(reward_funcs):
        return []
    count = len(answered[0]["scored"])
    unscored = [i for i in range(count) if not any(c["scored"][i] for c in answered)]
    if not unscored:
        return []
    return [
        Problem(
            f"REWARD_FUNCS {' '.join(reward_funcs)}",
            f"every reward returned None or NaN for {len(unscored)} of the {count} probe completions "
            "(a right and a wrong answer per dataset row): ms-swift 3.6.4 cannot score such a completion "
            "and fails after the first rollout",
            "return 0.0 where a reward does not apply, or add a reward that scores every completion",
        )
    ]


def _unusable_plugin(f: str, why: str, in_container: bool) -> Problem:
    """A plugin file that cannot be read: a missing one is named where it was looked for (the image or
    the user's host), with the fix for that side."""
    if why != "does not exist":
        return Problem(f"EXTERNAL_PLUGINS {f}", why, "give a readable Python file (a .py plugin)")
    if in_container:
        return Problem(
            f"EXTERNAL_PLUGINS {f}",
            "does not exist inside the container",
            "mount it (e.g. under ./data, which compose mounts at /data) and give its container path",
        )
    return Problem(
        f"EXTERNAL_PLUGINS {f}",
        "does not exist on this machine",
        "check the path (a relative one is read from the checkout, else the current directory); "
        "in the image, files under ./data are at /data",
    )


def check(
    plugin_files: list[str],
    reward_funcs: list[str],
    result: dict | None,
    error: str,
    unusable,
    in_container: bool = True,
) -> tuple[dict[str, RewardInfo], list[Problem]]:
    """What the probe's `result` (world/plugin_probe.py; None with `error` when it failed) says of the plugin
    files and the rewards the recipe names. `unusable(path)` says why a file cannot be read ("" when it
    can: facts.PathInfo.unusable_file); `in_container`: inside the grpo-rig image (facts.in_container),
    else on a user's host, which the messages name. Returns (name -> RewardInfo for the requested rewards,
    problems)."""
    problems: list[Problem] = []
    for f in plugin_files:
        why = unusable(f)
        if why:
            problems.append(_unusable_plugin(f, why, in_container))
    if result is None and error == NOT_PROBED:  # `rerun --plan`: the files are compared by their sha256
        # the image's own rewards are the image's code, not the user's: nothing to say of them
        theirs = [f for f in plugin_files if f != str(PLUGIN_FILE)]
        said = f"reward plugins {error} ({', '.join(theirs)}: compared with the run's by sha256)"
        return {}, problems + ([Problem("EXTERNAL_PLUGINS", said, fatal=False)] if theirs else [])
    if result is None:
        return {}, problems + [
            Problem(
                "EXTERNAL_PLUGINS",
                f"importing the reward plugins failed: {error}",
                "run the plugin file with python to see the error",
            )
        ]

    slow = result.get("slow")
    if slow:  # the import did not fail: it outlasted the probe's bound on this machine
        problems.append(
            Problem(
                "EXTERNAL_PLUGINS",
                f"importing the reward plugins had not finished after {slow['seconds']} s "
                f"(the probe waits {slow['bound']}), so what they register and the columns their "
                "rewards read were not checked; the import did not fail, and ms-swift imports them "
                "itself at start-up",
                "nothing, where this machine is only busy; else look for slow top-level code in the "
                "plugins (a download or a model load at import runs in every process ms-swift starts)",
                fatal=False,
            )
        )
        registered = result["registered"]  # ms-swift's built-ins only: the plugins' names are unknown
        infos = {
            n: RewardInfo(n, registered[n]["class"], registered[n]["columns"])
            for n in reward_funcs
            if n in registered
        }
        return infos, problems
    for s in result["shadowed"]:
        problems.append(
            Problem(
                f"EXTERNAL_PLUGINS {s['file']}",
                f"its file name makes ms-swift import it as module {s['module']!r}, which is already the "
                f"installed {s['origin']}: the plugin would silently never load",
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
    for name, call in (result.get("calls") or {}).items():
        if call["raised"]:
            problems.append(
                Problem(
                    f"REWARD_FUNCS {name}",
                    f"raised when called on two rows of the dataset: {call['raised']}",
                    "check the reward on a real completion (the probe's completions are made up)",
                    fatal=False,
                )
            )
        elif not call["ok"]:
            problems.append(
                Problem(
                    f"REWARD_FUNCS {name}",
                    f"returned {call['returned']} for {call.get('count', '?')} completions; ms-swift needs "
                    "one number (or None where the reward does not apply) per completion and would fail "
                    "after the first rollout",
                    "return a list of floats, one per completion, in the order given (not inf, not a string)",
                )
            )
    problems += _unscored(result.get("calls") or {}, reward_funcs)
    registered = result["registered"]
    infos: dict[str, RewardInfo] = {}
    for name in reward_funcs:
        if name in registered:
            infos[name] = RewardInfo(name, registered[name]["class"], registered[name]["columns"])
        else:
            known = ", ".join(sorted(registered))
            close = difflib.get_close_matches(name, list(registered), n=1, cutoff=0.6)
            problems.append(
                Problem(
                    f"REWARD_FUNCS {name}",
                    f"no reward function is registered under {name!r} (registered: {known})",
                    (f"did you mean {close[0]}? " if close else "")
                    + "use a registered name, or add a plugin file that sets orms[name] = YourORM to "
                    "EXTERNAL_PLUGINS (docs/rewards.md)",
                )
            )
    return infos, problems
