"""Problems found before heavy work, and the exit statuses the entrypoint returns.

Every check reports `Problem`s instead of raising on the first one (torchtune's ConfigError style), so a
user sees everything wrong with a recipe at once. Each problem names the key, what is wrong and the fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

# Exit statuses (README, "Exit statuses"). 2 matches argparse's usage errors.
EXIT_OK = 0
EXIT_RUNTIME_FAILURE = 1  # a child process (trainer, rollout server, export) failed, or a write of the run's
#                            own did (a full disk); the manifest says which
EXIT_BAD_INPUT = 2  # refused before heavy work: recipe, dataset, plugin, environment, a run dir in use
EXIT_SIGINT = 130  # 128 + SIGINT (Ctrl-C)
EXIT_SIGTERM = 143  # 128 + SIGTERM (docker stop)


# Kinds of problem (`Problem.kind`), which decide how a command treats them, never their text:
INPUT = "input"  # the recipe, the command line or a file's content is wrong
LOCAL = "local"  # something on this machine is not in place yet (a dataset file, the converted embedded
#                  model, a writable output volume): `train` and `validate` refuse, `plan` only warns


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with the input. `fatal` problems stop the run; the others are warnings."""

    where: str  # the key, file or check the problem is about, e.g. "NUM_GENERATIONS" or "dataset"
    message: str  # what is wrong, in the user's terms
    fix: str = ""  # what to do about it
    fatal: bool = True
    kind: str = INPUT

    def render(self) -> str:
        level = "error" if self.fatal else "warning"
        text = f"{level}: {self.where}: {self.message}"
        return f"{text}\n  fix: {self.fix}" if self.fix else text


class BadInput(Exception):
    """Raised with every fatal problem found; the CLI prints them all and exits with EXIT_BAD_INPUT."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(p.render() for p in self.problems))


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def tally(problems: Iterable[Problem]) -> str:
    """What a list of problems holds, errors and warnings counted apart: "1 error and 1 warning",
    "2 errors", "no problems"."""
    problems = list(problems)
    errors, warnings = sum(p.fatal for p in problems), sum(not p.fatal for p in problems)
    parts = [_plural(n, word) for n, word in ((errors, "error"), (warnings, "warning")) if n]
    return " and ".join(parts) or "no problems"


def raise_if_fatal(problems: Iterable[Problem]) -> None:
    """Raise BadInput carrying all problems (warnings included, for context) if any is fatal; the errors
    first, so the reason for the refusal is not read past under a warning (each group in found order)."""
    problems = list(problems)
    if any(p.fatal for p in problems):
        raise BadInput(sorted(problems, key=lambda p: not p.fatal))
