"""`keys`: the keys the entrypoint owns (recipe/settings.py), each with its default, what it accepts and what
it does, in one column of comments (a recipe file's own layout)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from entrypoint.errors import EXIT_OK
from entrypoint.recipe.settings import Settings, accepted

NAME = "keys"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`keys`: no arguments."""
    return subparsers.add_parser(NAME, description="List the keys the entrypoint owns, with their defaults.")


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `keys` command: one line per key, KEY=default  # accepted: description; 0."""
    assigned = {name: f"{name}={_text(field.default)}" for name, field in Settings.model_fields.items()}
    width = max(len(left) for left in assigned.values())
    for name, field in Settings.model_fields.items():
        print(f"{assigned[name]:<{width}}  # {accepted(field)}: {field.description}")
    return EXIT_OK


def _text(default: object) -> str:
    # as a recipe file writes it: booleans lower case
    return str(default).lower() if isinstance(default, bool) else str(default)
