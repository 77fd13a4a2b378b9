"""What the child hooks share: the notice of a hook that is not installed, the rank-0 test, the phase-event
writer, the garbage collector's clock, and the two wrappers most hooks are made of (`timed`, `once_built`).

Standard library only: this runs in every child at start-up, before torch, vLLM or ms-swift is imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from entrypoint.child import wire

_SAID: set[str] = set()  # hooks whose notice this process printed


class MissingTarget(LookupError):
    """An upstream module lacks the function, class or attribute a hook patches."""


def say(text: str) -> None:
    """A line of the hooks on the child's stderr (the role's log; the console shows failures only)."""
    print(f"grpo-rig site: {text}", file=sys.stderr, flush=True)


def not_installed(name: str, reason: str) -> None:
    """Say, once per process, that hook `name` is not (or no longer) in effect, and why."""
    if name in _SAID:
        return
    _SAID.add(name)
    print(wire.NOTICE.format(name=name, reason=reason), file=sys.stderr, flush=True)


def need(owner: Any, attribute: str, where: str) -> Any:
    """owner.attribute, or MissingTarget naming `where` (e.g. "swift....grpo_trainer.GRPOTrainer")."""
    try:
        return getattr(owner, attribute)
    except AttributeError:
        raise MissingTarget(f"{where} has no {attribute}") from None


def rank0() -> bool:
    """Rank 0 of torchrun's ranks, or a process torchrun did not start."""
    return os.environ.get("RANK", "0") == "0"


def process_label() -> str:
    """Which process of the trainer's tree this is: ms-swift's CLI, torchrun, or the training worker."""
    argv = getattr(sys, "orig_argv", sys.argv)
    if "torch.distributed.run" in argv:  # its argv names rlhf.py too
        return wire.LAUNCHER
    if any(a.endswith(os.path.join("cli", "rlhf.py")) for a in argv):  # torchrun's ranks and a lone worker
        return wire.WORKER
    return os.path.basename(argv[1]) if len(argv) > 1 else os.path.basename(argv[0])


@dataclasses.dataclass(frozen=True)
class Events:
    """The phase-event file (GRPO_RIG_EVENTS): one JSON object per line, `t` in unix seconds first."""

    path: str

    def write(self, row: dict) -> None:
        """Append `row` with the time; a file that cannot be written loses the row, never the run."""
        row = {"t": round(time.time(), 3), **row}
        with contextlib.suppress(OSError), open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


class GcClock:
    """Seconds the garbage collector ran in this process since `start` (gc.callbacks)."""

    seconds = 0.0
    _started = False

    @classmethod
    def start(cls) -> None:
        """Count from now on (once per process)."""
        import gc

        if cls._started:
            return
        cls._started = True
        began = [0.0]

        def callback(stage, info):
            if stage == "start":
                began[0] = time.perf_counter()
            else:
                cls.seconds += time.perf_counter() - began[0]

        gc.callbacks.append(callback)


def timed(cls: type, name: str, make_row: Callable[[Any, tuple, float], dict | None], events: Events) -> None:
    """Wrap cls.name: after each call, `make_row(self, args, seconds)` gives the event to write (or None).
    A class without `name` is a MissingTarget: the phase it times would silently go unrecorded."""
    method = need(cls, name, f"{cls.__module__}.{cls.__qualname__}")

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        start, collected = time.time(), GcClock.seconds
        try:
            return method(self, *args, **kwargs)
        finally:
            with contextlib.suppress(Exception):
                row = make_row(self, args, round(time.time() - start, 3))
                if row:
                    if row.get("phase") in wire.GRPO_PHASES:
                        row["gc_seconds"] = round(GcClock.seconds - collected, 3)
                    events.write(row)

    setattr(cls, name, wrapper)


def once_built(cls: type, then: Callable[[Any], None], hook: str) -> None:
    """Wrap cls.__init__ so that `then(self)` runs once the object is built; a failure of `then` is the
    hook's not-installed notice, never raised (a hook must never take the trainer down)."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        try:
            then(self)
        except Exception as exc:
            not_installed(hook, f"once {cls.__name__} was built: {exc!r}")

    cls.__init__ = __init__
