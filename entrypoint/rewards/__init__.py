"""This project's rewards, in one package: each reward beside the task generator it scores.

    countdown.py         the countdown task generator and its equation reward
    arithmetic.py        the arithmetic task generator and its exact-answer reward
    tasks.py             the registry of task generators (DATASET_GENERATOR) and the reward of each
    format.py            the <think>/<answer> format reward with partial credit
    tcm.py               the TCM syndrome-differentiation accuracy reward
    grpo_rig_rewards.py  the ms-swift plugin file: a thin shim that registers the rewards above as ORMs
    (world/plugin_probe.py imports reward plugin files the way ms-swift does, in a throwaway process)
    check.py             what preflight makes of the probe's answer (unknown names, import errors, columns)

The reward modules are plain Python (no ms-swift import) and unit-tested on their own; the plugin file
is the only one that imports ms-swift. Writing your own: docs/rewards.md.
"""

from pathlib import Path

# What the trainer gets as --external_plugins first; ms-swift imports it by its (unique) file stem.
PLUGIN_FILE = Path(__file__).resolve().parent / "grpo_rig_rewards.py"
