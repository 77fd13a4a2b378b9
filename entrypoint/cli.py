"""Command line: `python -m entrypoint [COMMAND] [KEY=VALUE ...]`
(`validate smoke` is `validate recipe=smoke`).

    train     (default) run GRPO for a recipe: recipe=NAME [KEY=VALUE ...]
    rollout   serve only the vLLM rollout on this node's ROLLOUT_GPUS, for trainers on other nodes
    plan      print the processes `train` would run, with their environment and argv (--json for JSON)
    validate  run every preflight check and print all problems
    doctor    show the GPU inventory, NCCL-relevant facts and /dev/shm (--save-inventory FILE)
    prepare-model   download and convert the embedded model (image build, `make smoke`)
    keys      list the keys the entrypoint owns, with their defaults
    recipes   list the shipped recipes, each with what it is for
    import    turn an ms-swift command line or script into a recipe: import FILE [-o OUT] | import -- CMD...
    evaluate  base model vs the run's adapter on held-out prompts, scored by the run's rewards: run=NAME
    rerun     repeat a run from its manifest into a new run directory, drift refused: run=NAME [--plan]

Exit statuses: 0 ok, 1 runtime failure (a child process failed), 2 bad input (refused before heavy
work), 130 / 143 stopped by SIGINT / SIGTERM.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import NamedTuple

from entrypoint import redact
from entrypoint.errors import EXIT_BAD_INPUT, EXIT_OK, BadInput, Problem, tally
from entrypoint.recipe import load as recipe_mod

DEFAULT = "train"  # the command of a line whose first word names none (`python -m entrypoint recipe=smoke`)
# They load a model in this process. The libraries read their quiet settings when imported, and importing
# the commands imports some of them (tqdm, through huggingface_hub): quiet_libraries runs first.
QUIET = ("prepare-model", "evaluate")
HELP = ("help", "-h", "--help")  # `help` and `help train` are `--help` and `train --help`


class Command(NamedTuple):
    """A registered command: its module (NAME, add_parser, main: commands/__init__.py) and its parser."""

    module: ModuleType
    parser: argparse.ArgumentParser


class Parsers(NamedTuple):
    """The command line's parsers, built from the registry."""

    top: argparse.ArgumentParser  # its --help is this module's docstring
    commands: dict[str, Command]  # by command word, in the registry's order


class Chosen(NamedTuple):
    """The command a command line runs, and the words its parser reads (as typed)."""

    command: Command
    words: list[str]


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv` names (sys.argv[1:] by default); returns the exit status. Everything it
    prints goes through redact.Scrubbing: a secret given on the command line or in the environment never
    reaches the console, whichever line names it (an override, a plan, a refusal's fix)."""
    typed = list(sys.argv[1:] if argv is None else argv)
    if typed[:1] and typed[0] in QUIET:
        quiet_libraries(os.environ)
    secrets = redact.values_in(typed, os.environ)
    stdout, stderr = sys.stdout, sys.stderr
    if secrets:
        sys.stdout, sys.stderr = redact.Scrubbing(stdout, secrets), redact.Scrubbing(stderr, secrets)
    try:
        return _main(typed)
    except KeyboardInterrupt:  # Ctrl-C before the command's own handlers (interruptible) are in place
        return stopped_early()
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def _main(typed: list[str]) -> int:
    from entrypoint.commands import REGISTRY  # after quiet_libraries (QUIET says why)
    from entrypoint.supervise.signals import Interrupted

    parsers = build(REGISTRY)
    try:
        if typed[:1] and typed[0] in HELP:
            _help(parsers, typed[1] if typed[0] == "help" and len(typed) > 1 else "", os.environ)
            return EXIT_OK
        chosen = choose(parsers, typed, os.environ)
        return chosen.command.module.main(_parsed(parsers.top, chosen), os.environ)
    except argparse.ArgumentError as exc:  # a word the command's own reading of its words refused (import)
        parsers.top.error(str(exc))
    except Interrupted as exc:  # stopped before anything was written (train's own cleanup says more)
        return 128 + exc.signum
    except BadInput as exc:
        return _refused(exc)
    except BrokenPipeError:  # the reader went away (`keys | head`): what it read stands, no traceback
        return _reader_gone()


def stopped_early() -> int:
    """Ctrl-C where no command's handlers (signals.interruptible) are in place: while the commands are
    imported, their words read, or a command that starts nothing runs (plan, validate): one line and 130,
    as a command stopped later ends, not a traceback."""
    print("grpo-rig: stopped by SIGINT", file=sys.stderr)
    return 128 + signal.SIGINT


def _reader_gone() -> int:
    """Point stdout at /dev/null so the interpreter's flush at exit cannot fail again; 128 + SIGPIPE, the
    status a shell gives a command a closed pipe ended (the Python docs' "Note on SIGPIPE", signal module)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def build(registry: Sequence[ModuleType]) -> Parsers:
    """The top parser (this module's docstring as its --help) with each registered command's parser."""
    top = argparse.ArgumentParser(
        prog="python -m entrypoint", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    subparsers = top.add_subparsers()
    commands = {module.NAME: Command(module, module.add_parser(subparsers)) for module in registry}
    return Parsers(top, commands)


def choose(parsers: Parsers, typed: list[str], environ: Mapping[str, str]) -> Chosen:
    """The command the first word names, reading the words after it; else train, the default, reading them
    all: the image's ENTRYPOINT is `python -m entrypoint`, so `docker compose run train recipe=X` passes
    bare KEY=VALUE words. A first word that is neither a command nor a KEY=VALUE or --flag word is refused
    with the command it is closest to (`trian`), or as a recipe's name given without a command (`smoke`).
    Raises BadInput. The words stay as typed: each command reads its own."""
    first = typed[0] if typed else ""
    if first in parsers.commands:
        return Chosen(parsers.commands[first], typed[1:])
    if first and not first.startswith("-") and "=" not in first:
        raise BadInput([_not_a_command(first, list(parsers.commands), environ)])
    return Chosen(parsers.commands[DEFAULT], typed)


def _not_a_command(word: str, commands: list[str], environ: Mapping[str, str]) -> Problem:
    """Why a first word is not a command, with the fix closest to what was meant."""
    close = difflib.get_close_matches(word, commands, n=1)
    if close:
        fix = f"did you mean {close[0]}?"
    elif recipe_mod.is_file(recipe_mod.recipe_path(word, recipe_mod.recipes_dir(environ))):
        fix = f"write {DEFAULT} recipe={word}"
    else:
        fix = f"the commands: {', '.join(commands)}; KEY=VALUE words go after one ({DEFAULT} is the default)"
    return Problem(f"command line {word!r}", "is not a command", fix)


def _help(parsers: Parsers, word: str, environ: Mapping[str, str]) -> None:
    """`help WORD`: the help of the command WORD picks (choose); without a word, and for -h/--help, this
    module's docstring. Raises BadInput for a word that picks none."""
    if word in ("", "-h", "--help"):
        parsers.top.print_help()
    else:
        choose(parsers, [word], environ).command.parser.print_help()


def _parsed(top: argparse.ArgumentParser, chosen: Chosen) -> argparse.Namespace:
    """The chosen command's arguments. A command that takes free words (its parser's default `words`,
    commands/words.py) gets the words its parser does not know as `args.words`, in the order typed; for
    the others such words are refused as argparse's parse_args refuses them (exit 2)."""
    args, rest = chosen.command.parser.parse_known_args(chosen.words)
    if chosen.command.parser.get_default("words") is not None:
        args.words = rest
    elif rest:
        top.error(f"unrecognized arguments: {' '.join(rest)}")
    return args


def _refused(exc: BadInput) -> int:
    print(f"grpo-rig: refused before any heavy work ({tally(exc.problems)}):", file=sys.stderr)
    for problem in exc.problems:
        print(problem.render(), file=sys.stderr)
    return EXIT_BAD_INPUT


def quiet_libraries(environ: Mapping[str, str]) -> None:
    """Keep the libraries' notices off the console of the commands that load a model in this process
    (prepare-model, evaluate), as the train console keeps them in the log (console.py): transformers'
    warnings (the tokenizer's "legacy" paragraph), DeepSpeed's "Setting accelerator to CPU" lines, tqdm's
    bars, vLLM's INFO lines. Errors still show; CONSOLE=all (environment) keeps everything. Sets this
    process's environment, which its children inherit; to be called before the libraries are imported
    (tqdm reads TQDM_DISABLE when imported, and importing the commands imports it)."""
    if environ.get("CONSOLE") == "all":
        return
    for name, value in (
        ("TRANSFORMERS_VERBOSITY", "error"),
        ("TQDM_DISABLE", "1"),
        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
        ("VLLM_LOGGING_LEVEL", "WARNING"),
    ):
        os.environ.setdefault(name, value)
    # deepspeed.utils.logging sets its logger's level itself when imported; a filter stays on the logger
    logging.getLogger("DeepSpeed").addFilter(lambda record: record.levelno >= logging.ERROR)
