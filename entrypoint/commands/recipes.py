"""`recipes`: the shipped recipes, each with the first line of its header (what it is for) and its command."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from entrypoint.errors import EXIT_OK
from entrypoint.recipe import load as recipe_mod

NAME = "recipes"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`recipes`: no arguments."""
    return subparsers.add_parser(
        NAME, description="List the recipes under recipes/ (GRPO_RIG_RECIPES), each with what it is for."
    )


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `recipes` command: NAME  what it is for (its header's first line); 0."""
    folder = recipe_mod.recipes_dir(environ)
    names = recipe_mod.available_recipes(folder)
    width = max((len(n) for n in names), default=0)
    for name in names:
        print(
            f"{name:<{width}}  "
            f"{summary(recipe_mod.recipe_path(name, folder).read_text(encoding='utf-8'), name)}"
        )
    print(
        "\nrun one: python -m entrypoint train recipe=NAME (in the image: docker compose run --rm train "
        f"recipe=NAME); plan recipe=NAME shows what it would run; {folder} holds them"
    )
    return EXIT_OK


def summary(text: str, name: str) -> str:
    """What a recipe file says it is for: the first sentence of its header (the comment lines before a blank
    one or its `Run:` line), less the `name:` it opens with."""
    words: list[str] = []
    for line in text.splitlines():
        body = line.lstrip("#").strip()
        if not line.startswith("#") or not body or body.startswith("Run:"):
            break
        words.append(body)
    header = " ".join(words).removeprefix(f"{name}:").strip()
    ends = [header.index(e) + 1 for e in (". ", "? ") if e in header]
    return (header[: min(ends)] if ends else header) or "(no header)"
