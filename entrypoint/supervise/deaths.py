"""Why a child died, in a user's words. Pure: supervisor.py and commands/train.py read the world and pass it
in.

Before this module, a trainer killed by SIGKILL was reported as "trainer exited with status 247. Its last
lines:" followed by the model's module tree from start-up; the signal, the step it died at and that re-running
resumes were never said. Here:

- `signal_of` decodes an exit status: negative (Popen: killed by -N), 128+N (a shell's convention, 137 is
  SIGKILL, 139 SIGSEGV) and 256-N (ms-swift's `swift` CLI hands its child's -N to sys.exit, which exits
  256-N: 247 is SIGKILL; v3.6.4:swift/cli/main.py `sys.exit(result.returncode)`), or the signal torchrun
  reported in the log (launch.exit_signal);
- `likely_cause` says who sends such a signal: the kernel's OOM killer when its OOM-kill count
  rose during the run (/proc/vmstat `oom_kill`, else the cgroup's: monitor.OOM_FILES), else someone or
  something stopping it;
- `Tail` keeps a child's last lines without start-up dumps (ms-swift prints the model's module tree and
  `RLHFArguments(...)`, hundreds of lines each): a dump becomes one line saying where it is;
- `cuda_oom`, `disk_full` and `reward_failure` find the one line that says what happened;
- `explain` composes the lines a user sees at the end of a failed run.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import signal
from collections.abc import Iterable, Iterator, Sequence

from entrypoint.child.wire import REWARD_MARK

# A line in a dump that is the start of ordinary output again: the dump was cut short (the process died
# while printing it), so what follows must not be folded away.
_OUTPUT_AGAIN = re.compile(
    r"^(\[(INFO|WARNING|ERROR|rank)|Traceback |\w+(\.\w+)*(Error|Exception): |Killed$)"
)
_BRACKETS = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}


def _balance(line: str) -> int:
    return sum(_BRACKETS.get(c, 0) for c in line)


_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")  # torchrun's prefix on a rank's lines
TRACEBACK_START = "Traceback (most recent call last)"


def in_traceback(line: str) -> bool:
    """Whether a line inside a traceback is one of its frames (a frame, its code, the ^^^^ marks, a blank):
    the first line that is not is the exception itself. Shared by Tail and console.Console."""
    body = _RANK_PREFIX.sub("", line)
    return not body.strip() or body.startswith((" ", "\t"))


class Tail:
    """The last `size` lines worth showing of a child's output. A line that ends by opening a bracket it
    does not close (ms-swift's `[INFO:swift] model: PeftModelForCausalLM(`, `args: RLHFArguments(`) starts a
    dump; the dump, up to the line that closes it, is kept as one line naming its length. A traceback keeps
    its exception line only, after one line saying its frames are in the log (the console folds them alike:
    console.Console; the cases re-run saw torch's save traceback twice in a failed run's last lines)."""

    def __init__(self, size: int):
        self.lines: collections.deque[str] = collections.deque(maxlen=size)
        self._depth, self._head, self._count = 0, "", 0
        self._traceback = False  # inside a traceback's frames

    def __iter__(self) -> Iterator[str]:
        return iter([*self.lines, *([self._folded()] if self._depth else [])])

    def __len__(self) -> int:
        return len(self.lines) + (1 if self._depth else 0)

    def _folded(self) -> str:
        return f"{self._head} ... ({self._count} lines of start-up output, left out here; the log has them)"

    def append(self, line: str) -> None:
        if self._traceback:
            if in_traceback(line):
                return
            self._traceback = False  # the first unindented line: the exception itself
        elif TRACEBACK_START in line:
            self._traceback = True
            if self._depth > 0:
                self.lines.append(self._folded())
                self._depth = 0
            self.lines.append("a traceback (its frames are in the log):")
            return
        if self._depth > 0 and not _OUTPUT_AGAIN.match(line):
            self._depth += _balance(line)
            self._count += 1
            if self._depth <= 0:
                self.lines.append(self._folded())
                self._depth = 0
            return
        if self._depth > 0:  # ordinary output again: keep the dump's line, then this one
            self.lines.append(self._folded())
            self._depth = 0
        opened = _balance(line)
        if opened > 0 and line.rstrip()[-1:] in "([{":
            self._depth, self._head, self._count = opened, line.rstrip(), 1
            return
        self.lines.append(line)


def signal_of(returncode: int | None, reported: str | None = None) -> str | None:
    """The name of the signal that ended a process with exit status `returncode` (see the module's
    docstring for the three conventions), else the one torchrun `reported` in its log, else None."""
    number = None
    if returncode is not None and returncode < 0:
        number = -returncode
    elif returncode is not None and 128 < returncode <= 192:
        number = returncode - 128
    elif returncode is not None and 192 < returncode <= 255:
        number = 256 - returncode
    try:
        return signal.Signals(number).name if number else reported
    except ValueError:
        return reported


def describe_exit(returncode: int | None, reported: str | None = None) -> str:
    """'was killed by SIGKILL (exit status 247)', 'exited with status 1 (torchrun reports a process killed by
    SIGSEGV)', 'exited with status 7'; `reported`: the signal torchrun named in the log."""
    own = signal_of(returncode)
    if own and returncode is not None and returncode < 0:
        return f"was killed by {own}"
    if own:
        return f"was killed by {own} (exit status {returncode})"
    if reported:
        return f"exited with status {returncode} (torchrun reports a process killed by {reported})"
    return f"exited with status {returncode}"


def likely_cause(signame: str | None, oom_kills: tuple[int | None, int | None]) -> str:
    """Who sends `signame`, given the kernel's OOM-kill count (monitor.oom_kills: before, after; None: not
    readable here)."""
    before, after = oom_kills
    if signame == "SIGKILL":
        if before is not None and after is not None and after > before:
            return (
                f"the kernel's out-of-memory killer (its kill count rose from {before} to {after} during the "
                "run): the run needed more RAM than the machine or the container's memory limit gives; give "
                "it more memory, shorten the prompts or MAX_LENGTH, or lower PER_DEVICE_TRAIN_BATCH_SIZE or "
                "DATALOADER_NUM_WORKERS"
            )
        if before is not None and after is not None:
            return (
                "someone or something stopped it (kill -9, docker kill, docker stop after its timeout, a job "
                "scheduler's limit); not the kernel's out-of-memory killer: its kill count did not change"
            )
        return (
            "the kernel's out-of-memory killer, or someone or something stopping it (kill -9, docker kill, a "
            "job scheduler); this host does not let the run read the kernel's OOM-kill count (/proc/vmstat, "
            "memory.events) to tell which"
        )
    if signame in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"):
        return "someone or something asked it to stop (kill, docker stop, a job scheduler)"
    if signame in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE"):
        return (
            "a crash inside native code (CUDA, NCCL, vLLM or another library; a too small /dev/shm gives "
            "SIGBUS): the last lines below may name it"
        )
    return ""


def _last(lines: Iterable[str], pattern: str) -> str | None:
    found = [line for line in lines if re.search(pattern, line)]
    return found[-1].strip() if found else None


def cuda_oom(lines: Sequence[str]) -> dict | None:
    """{"gpu": ordinal as the child saw it or None, "tried": "2.00 GiB" or None} of a CUDA out-of-memory
    error in `lines` (torch's `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`)."""
    line = _last(lines, r"CUDA out of memory|OutOfMemoryError")
    if line is None:
        return None
    tried = re.search(r"Tried to allocate ([\d.]+ [KMGT]i?B)", line)
    gpu = re.search(r"GPU (\d+) has a total capacity", line)
    return {"gpu": int(gpu.group(1)) if gpu else None, "tried": tried.group(1) if tried else None}


def disk_full(lines: Iterable[str]) -> str | None:
    """The line saying the disk is full (ENOSPC, errno 28), or None."""
    return _last(lines, r"No space left on device|\[Errno 28\]")


def reward_failure(lines: Iterable[str]) -> str | None:
    """What the reward check in the trainer (child/hooks/reward_check.py) said when it ended the run (the line
    after REWARD_MARK), or None."""
    line = _last(lines, re.escape(REWARD_MARK))
    return line.split(REWARD_MARK, 1)[1].strip() if line else None


@dataclasses.dataclass(frozen=True)
class Context:
    """What commands/train.py knows of the run at its end, for `explain`."""

    step: int | None = None  # the last step logged (logging.jsonl)
    planned: int | None = None  # max_steps
    checkpoint: str = ""  # the newest complete checkpoint, relative to the run directory
    exported: str = ""  # where it was exported ("adapter/"), "" when nothing was
    oom_kills: tuple[int | None, int | None] = (None, None)
    predicted: str = ""  # "21.3 of 24.0 GiB on GPU 0" (plan.memory), "" without a memory plan
    oom_knobs: str = ""  # what to lower after a CUDA out-of-memory error, for the failed role
    disk: str = ""  # "/out/r has 0.0 MiB free of 64.0 MiB" when the disk filled up
    disk_need: str = ""  # "88 MiB": the free space validate asks of this run before it starts again
    cut_short: tuple[
        str, ...
    ] = ()  # incomplete checkpoints with their sizes ("train/checkpoint-2 (75.0 MiB)")


def summary(role: str, returncode: int | None, reason: str, tail: Sequence[str], ctx: Context) -> str:
    """One line: what happened to `role` (the reward, the disk, CUDA memory, a signal, or its exit)."""
    reward = reward_failure(tail)
    if reward:
        return f"{role} stopped by the reward check: {reward}"
    if ctx.disk or disk_full(tail):
        return (
            f"disk full (No space left on device): {ctx.disk or 'the output volume is full'}; {role} {reason}"
        )
    oom = cuda_oom(tail)
    if oom:
        where = f" on GPU {oom['gpu']}" if oom["gpu"] is not None else ""
        tried = f" while allocating {oom['tried']}" if oom["tried"] else ""
        planned = f"; the plan predicted a peak of {ctx.predicted}" if ctx.predicted else ""
        return f"{role} ran out of CUDA memory{where}{tried}{planned}: {ctx.oom_knobs}".rstrip(": ")
    return f"{role} {reason}"


def explain(
    role: str,
    returncode: int | None,
    reason: str,
    tail: Sequence[str],
    ctx: Context,
    signame: str | None = None,
) -> list[str]:
    """The lines a user sees at the end of a failed run: what happened, the likely cause, the last step,
    what the run left and how to resume."""
    of = f" of {ctx.planned}" if ctx.planned else ""
    step = (
        ""
        if ctx.step is None
        else f" (last step logged: {ctx.step}{of})"
        if ctx.step
        else " (before its first step)"
    )
    lines = [summary(role, returncode, reason, tail, ctx) + step]
    cause = likely_cause(signame, ctx.oom_kills)
    if cause and not (reward_failure(tail) or cuda_oom(tail) or ctx.disk):
        lines.append(f"likely cause: {cause}")
    for cut in ctx.cut_short if ctx.disk else ():
        lines.append(
            f"{cut} was cut short by the full disk: delete it to free that space (an incomplete "
            "checkpoint is never resumed from)"
        )
    # the same command alone would fail the same way where the cause is in the input, not the machine
    fix = (
        "free space on that volume"
        f"{f' (at least {ctx.disk_need} free: one checkpoint, the export and a margin)' if ctx.disk_need else ''}"  # noqa: E501
        ", then run"
        if ctx.disk
        else "fix the reward function named above, then run"
        if reward_failure(tail)
        else "raise ROLLOUT_STARTUP_TIMEOUT if the server is only slow to start (a first vLLM start compiles "
        "for minutes), then run"
        if "ROLLOUT_STARTUP_TIMEOUT" in reason
        else "raise STALL_TIMEOUT if a step can truly take this long, then run"
        if reason.startswith("stalled")
        else "run"
    )
    if ctx.checkpoint:
        to = f", exported to {ctx.exported}" if ctx.exported else ""
        lines.append(f"it left {ctx.checkpoint} (the newest complete checkpoint{to})")
        lines.append(f"{fix} the same command again to resume from {ctx.checkpoint.rsplit('/', 1)[-1]}")
    else:
        lines.append(f"no complete checkpoint yet: {fix} the same command again to start over")
    return lines


# faulthandler's dump (Python 3.10-3.12): a block per thread, "Thread 0x... (most recent call first):" or
# "Current thread 0x...", then its frames, most recent first
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
STACK_FRAMES = 12  # frames of the main thread a stalled run's console shows (the rest are in the file)


def main_thread_stack(text: str) -> list[str]:
    """The main thread's block of a faulthandler dump: the one whose oldest frame is a module's top level
    (`in <module>`); the last dump in `text` when the file holds several. [] when there is none."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if _THREAD.match(line.strip()):
            blocks.append([line.strip()])
        elif blocks and line.strip():
            blocks[-1].append(line.rstrip())
    main = [b for b in blocks if len(b) > 1 and b[-1].rstrip().endswith("in <module>")]
    return main[-1] if main else []


def stall_excerpt(stacks: Sequence[tuple[str, str]]) -> list[str]:
    """What a stalled run's console shows of where it waits: the training process's main thread (the worker
    of rank 0, else the first process whose dump has a main thread), its newest STACK_FRAMES frames, named
    by its file. `stacks`: (file name, its text) per process (child/hooks/events.py writes them)."""

    def rank(name: str) -> int:
        return 0 if name.startswith("worker-rank0-") else 1 if name.startswith("worker-") else 2

    for name, text in sorted(stacks, key=lambda item: (rank(item[0]), item[0])):
        block = main_thread_stack(text)
        if block:
            return [f"the main thread of {name} (logs/stacks/{name}):", *block[1 : STACK_FRAMES + 1]]
    return []
