"""`plan`: the processes `train` would run, with their environment and argv, from the recipe and the machine
(or the INVENTORY file that describes one); nothing is started or written."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping

from entrypoint.commands import edge, words
from entrypoint.errors import EXIT_OK

NAME = "plan"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`plan [--json] [recipe=NAME] [KEY=VALUE ...]`, --json anywhere among the words."""
    parser = subparsers.add_parser(
        NAME,
        description="Print the processes `train` would run, with their environment and argv; nothing is "
        "started. INVENTORY=FILE plans for the machine the file describes.",
        allow_abbrev=False,  # `--js` is a word for the recipe parser, not --json
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    return words.take_recipe_words(parser, "[-h] [--json] [KEY=VALUE ...]")


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `plan` command: prints the plan; 0, or BadInput (exit 2) with every problem found."""
    plan = edge.make_plan(words.recipe_words(args.words, environ), environ, for_train=False)
    print(json.dumps(plan.to_json(), indent=2) if args.json else plan.render())
    return EXIT_OK
