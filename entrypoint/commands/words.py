"""The free words of a command line: the KEY=VALUE words (and ms-swift-style `--flag VALUE` words) that train,
rollout, plan and validate hand to the recipe parser, and import's FILE, KEY=VALUE and `-- CMD ...` words.

A command that reads free words declares only its options to argparse (`--json`, `-o`) and calls
`take_words`; cli.py parses with `parse_known_args`, whose leftovers keep the order the words were typed
in, and hands them to the command as `args.words`. A declared positional would lose that order: argparse
fills a positional from one run of plain words, so in `--num_generations 8 recipe=smoke` the `8` and the
recipe would land in the positional and the flag among the leftovers. The recipe parser needs the flag
beside its value to answer it with the KEY=VALUE spelling (recipe/load.py). `evaluate` takes KEY=VALUE
words only, so it declares them as a positional and argparse refuses anything else.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping

from entrypoint.errors import BadInput, Problem
from entrypoint.recipe import load as recipe_mod

WORDS = "words"  # the attribute a parser that takes free words sets, and cli.py fills

RECIPE_WORDS = (
    "recipe=NAME [KEY=VALUE ...]: the recipe (a shipped name, or the path of an .env file) and the keys that "
    "override it (`keys` lists them). A recipe's bare name first is recipe=NAME (`validate smoke`). "
    "ms-swift's --flag VALUE spelling is refused, naming the KEY=VALUE to write (--num_generations 8: "
    "NUM_GENERATIONS=8)."
)


def take_words(parser: argparse.ArgumentParser, usage: str, described: str) -> argparse.ArgumentParser:
    """Let `parser`'s command receive the words argparse does not know, in the order typed (`args.words`,
    filled by cli.py). `usage`: the usage line after the command's name, words included (argparse cannot
    show words it does not declare); `described`: what the words are, under the heading `words` of --help."""
    parser.usage = f"%(prog)s {usage}"
    parser.add_argument_group("words", described)
    parser.set_defaults(**{WORDS: []})
    return parser


def take_recipe_words(parser: argparse.ArgumentParser, usage: str) -> argparse.ArgumentParser:
    """take_words for the commands that read a recipe (train, rollout, plan, validate)."""
    return take_words(parser, usage, RECIPE_WORDS)


def recipe_words(words: list[str], environ: Mapping[str, str]) -> list[str]:
    """The words as the recipe parser takes them: a recipe's bare name as the first word is recipe=NAME
    (`validate smoke`) when no recipe is named otherwise (recipe=..., RECIPE in the environment). A first
    word that is neither KEY=VALUE nor a recipe's name but close to one is refused with that name; others
    go on as they are, for the recipe parser to refuse. Raises BadInput."""
    first = words[0] if words else ""
    named = any(w.lower().startswith("recipe=") for w in words) or environ.get("RECIPE")
    if not first or "=" in first or first.startswith("-") or named:
        return list(words)
    folder = recipe_mod.recipes_dir(environ)
    if recipe_mod.is_file(recipe_mod.recipe_path(first, folder)):
        return [f"recipe={first}", *words[1:]]
    close = difflib.get_close_matches(
        first, recipe_mod.available_recipes(folder) if folder.is_dir() else [], n=1
    )
    if close:
        raise BadInput(
            [
                Problem(
                    f"command line {first!r}",
                    "is neither KEY=VALUE nor a recipe's name",
                    f"did you mean recipe={close[0]}?",
                )
            ]
        )
    return list(words)
