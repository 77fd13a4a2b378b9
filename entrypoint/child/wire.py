"""What the children tell the entrypoint, in one place: the hooks in the children write it, supervise/ (the
console, the start-up table, the explanations of a death, the stall's stacks) and commands/train.py read it.

Standard library only: a child imports it at start-up, before torch, vLLM or ms-swift.

The events file (GRPO_RIG_EVENTS, <run>/logs/events.jsonl; child/hooks/events.py writes it): one JSON object
per line, `t` in unix seconds first, then its `phase`:

    {"phase": START, "process": ENTRYPOINT | SWIFT | LAUNCHER | WORKER}     a process started
    {"phase": IMPORT, "module": ..., "seconds": ...}                        a heavy import of the worker ended
    {"phase": STARTUP, "mark": one of STARTUP_MARKS, "seconds": ...}        a start-up mark
    {"phase": SYNC | GENERATE | ROLLOUT | TRAIN | SAVE, "seconds": ..., "step": ...}   a GRPO phase ended

The lines a child prints that the entrypoint looks for in its output: NOTICE (a hook that did not install),
REWARD_MARK and INPUTS_MARK (the checks that end a run). Stack dumps of a stalled run: STACKS_DIR.
"""

from __future__ import annotations

import re

# the `phase` of an event row
START = "start"  # a process started ("process" says which)
IMPORT = "import"  # one of the worker's heavy imports finished
STARTUP = "startup"  # a start-up mark ("mark" says which)
SYNC = "sync"  # the weight push to vLLM
GENERATE = "generate"  # generation, inside a rollout
ROLLOUT = "rollout"  # generation plus scoring and log-probs
TRAIN = "train"  # one micro-batch's training step
SAVE = "save"  # a checkpoint written
GRPO_PHASES = (SYNC, GENERATE, ROLLOUT, TRAIN)  # the step's phases: rows that also record `gc_seconds`

# the `process` of a START row: the entrypoint's own (commands/train.py), then the trainer's tree
ENTRYPOINT = "entrypoint"
SWIFT = "swift"  # ms-swift's CLI
LAUNCHER = "launcher"  # torchrun
WORKER = "worker"  # a training process (torchrun's rank, or the lone worker)
TRAINER_PROCESSES = (SWIFT, LAUNCHER, WORKER)


def attempt_start(row: dict) -> bool:
    """Whether an events row opens an attempt of the run: the entrypoint's own START row, written before the
    trainer starts. A resumed run appends to the same file; its readers take the rows after the last one."""
    return row.get("phase") == START and row.get("process") == ENTRYPOINT


# the `mark` of a STARTUP row, in the order of a colocated vLLM run
ARGUMENTS_PARSED = "arguments parsed"
MODEL_LOADED = "model loaded"
DATASET_READY = "dataset ready"
VLLM_STARTING = "vLLM engine starting"
VLLM_READY = "vLLM engine ready"
TRAINER_READY = "trainer ready"
FIRST_STEP_LOGGED = "first step logged"
STARTUP_MARKS = (
    ARGUMENTS_PARSED,
    MODEL_LOADED,
    DATASET_READY,
    VLLM_STARTING,
    VLLM_READY,
    TRAINER_READY,
    FIRST_STEP_LOGGED,
)

# The line a hook that cannot install prints, once per process; the console shows it once per hook name,
# whichever process or rank printed it.
NOTICE = (
    "grpo-rig hook {name} not installed: {reason}; the run goes on without it (DISABLE_HOOKS={name} turns it "
    "off)"
)
NOT_INSTALLED = re.compile(r"grpo-rig hook (?P<hook>\w+) not installed: ")

# the line the reward check prints before it ends a run (supervise/deaths.py names the failure by it)
REWARD_MARK = "grpo-rig reward check:"
# the line a dataset changed since the run recorded it ends the run with
INPUTS_MARK = "grpo-rig inputs check:"

# beside the events file: <run>/logs/stacks/<process>-rank<R>-<pid>.txt, each process's stacks at a stall
STACKS_DIR = "stacks"
