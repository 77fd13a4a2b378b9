"""`validate`: every preflight check `train` runs, without starting anything; prints the warnings, and
refuses (exit 2) with all the problems at once."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from entrypoint.commands import edge, words
from entrypoint.errors import EXIT_OK, tally

NAME = "validate"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`validate [recipe=NAME] [KEY=VALUE ...]`: the words go to the recipe parser, as train's do."""
    parser = subparsers.add_parser(
        NAME,
        description="Run every preflight check of `train` and print all problems; nothing is started. "
        "INVENTORY=FILE checks the recipe for the machine the file describes.",
        allow_abbrev=False,
    )
    return words.take_recipe_words(parser, "[-h] [KEY=VALUE ...]")


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `validate` command: 0 with the warnings printed, or BadInput (exit 2) with every problem."""
    plan = edge.make_plan(words.recipe_words(args.words, environ), environ, for_train=True)
    warnings = [p for p in plan.problems if not p.fatal]
    for line in plan.render_hooks_off():
        print(line)
    for w in warnings:
        print(w.render())
    print(f"recipe {plan.recipe.name}: valid ({tally(warnings)})")
    return EXIT_OK
