"""`import`: an ms-swift command line or script (`swift rlhf ...`, its worker lines) turned into a recipe
(recipe/importer.py), then validated as `validate` would (edge.make_plan), the problems on standard error.
The module is import_ because `import` is a keyword; the command word is `import`.

    python -m entrypoint import FILE [-o OUT] [KEY=VALUE ...]    a script; `-` reads standard input
    python -m entrypoint import [-o OUT] -- swift rlhf ...        the command's words, as typed
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from entrypoint.commands import edge, words
from entrypoint.errors import EXIT_BAD_INPUT, EXIT_OK, BadInput, Problem, tally
from entrypoint.recipe import importer
from entrypoint.recipe.load import read_user_file

NAME = "import"

IMPORT_WORDS = (
    "FILE: a shell script holding `swift rlhf ...` (- for standard input); KEY=VALUE words, anywhere before "
    "`--`, go to the validation of the recipe (INVENTORY=FILE validates it for another machine); the words "
    "after `--` are an ms-swift command line, taken as typed."
)


class ImportWords(NamedTuple):
    """import's free words, sorted."""

    file: str | None  # a shell script, `-` for standard input
    pairs: list[str]  # KEY=VALUE words for the validation
    command: list[str]  # the words after the first `--`


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`import [-o OUTPUT] [FILE | -] [KEY=VALUE ...] [-- CMD ...]`."""
    parser = subparsers.add_parser(
        NAME, description="Turn an ms-swift command line or script into a recipe, and validate it."
    )
    parser.add_argument("-o", "--output", help="write the recipe here instead of standard output")
    return words.take_words(parser, "[-h] [-o OUTPUT] [FILE | -] [KEY=VALUE ...] [-- CMD ...]", IMPORT_WORDS)


def sorted_words(given: list[str]) -> ImportWords:
    """The FILE, the KEY=VALUE words and the command after `--`, from the words argparse left (in the order
    typed). Raises argparse.ArgumentError for any other word before `--` (a second file, an unknown
    option), worded as argparse words its own: 'unrecognized arguments: ...'."""
    cut = given.index("--") if "--" in given else len(given)
    pairs = [w for w in given[:cut] if "=" in w and not w.startswith("-")]
    rest = [w for w in given[:cut] if w not in pairs]
    at = next((i for i, w in enumerate(rest) if w == "-" or not w.startswith("-")), None)
    unknown = [w for i, w in enumerate(rest) if i != at]
    if unknown:
        raise argparse.ArgumentError(None, f"unrecognized arguments: {' '.join(unknown)}")
    return ImportWords(rest[at] if at is not None else None, pairs, given[cut + 1 :])


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `import` command: prints (or writes, -o) the recipe, then validates it: 0 valid, 2 with the
    problems. Raises BadInput when there is no command to import or -o cannot be written."""
    given = sorted_words(args.words)
    text, source = _source(given)
    # the machine it was checked for, so the recipe's own "check it" line works where that machine is not
    machine = " ".join(w for w in given.pairs if w.upper().startswith("INVENTORY="))
    try:
        recipe = importer.to_recipe(text, source, target=args.output or "<this file>", check_with=machine)
    except ValueError as exc:
        raise BadInput(
            [Problem("import", str(exc), "give a file or `-- swift rlhf ...` holding the command")]
        ) from None
    if args.output:
        try:
            Path(args.output).write_text(recipe)
        except OSError as exc:
            raise BadInput(
                [
                    Problem(
                        f"import -o {args.output}",
                        f"cannot be written ({exc.strerror})",
                        "give a writable file path, e.g. recipes/mine.env",
                    )
                ]
            ) from None
        print(f"recipe written to {args.output}", file=sys.stderr)
        return validate_imported(Path(args.output), given.pairs, environ)
    print(recipe, end="")
    sys.stdout.flush()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "imported.env"
        path.write_text(recipe)
        return validate_imported(path, given.pairs, environ, shown_as="the recipe above")


class Source(NamedTuple):
    """The text to import and how to name where it came from."""

    text: str
    name: str  # the file's path, "standard input" or "the command line"


def _source(given: ImportWords) -> Source:
    """The command's text: the file, standard input (`-`), or the words (a FILE word given with `--` is the
    command's first word). Raises BadInput for a file that cannot be read as text."""
    command = [w for w in given.command if w != "--"]
    if given.file and given.file != "-" and not command:
        text, why = read_user_file(Path(given.file))
        if text is None:  # binary, a directory, missing, unreadable: say so, no traceback
            raise BadInput(
                [
                    Problem(
                        "import",
                        f"{given.file} {why}",
                        "give a shell script or text file holding `swift rlhf ...`, or `-- swift rlhf ...`",
                    )
                ]
            )
        return Source(text, given.file)
    if given.file == "-":
        return Source(sys.stdin.read(), "standard input")
    command = ([given.file] if given.file else []) + command
    return Source(" ".join(shlex.quote(w) for w in command), "the command line")


def validate_imported(path: Path, pairs: list[str], environ: Mapping[str, str], shown_as: str = "") -> int:
    """What `validate` says of an imported recipe, on standard error: 0 valid, 2 with the problems.
    `shown_as`: how to name a recipe that was only printed (its temporary file is gone when the user reads
    this; save it with -o)."""

    def named(p: Problem) -> Problem:
        if not shown_as:
            return p
        return dataclasses.replace(
            p, where=p.where.replace(str(path), shown_as), message=p.message.replace(str(path), shown_as)
        )

    try:
        plan = edge.make_plan([f"recipe={path}", *pairs], environ, for_train=True)
    except BadInput as exc:
        save = "; save it with -o FILE" if shown_as else ""
        print(
            f"the imported recipe is not valid yet ({tally(exc.problems)}); fix these in it{save}, then run "
            "validate:",
            file=sys.stderr,
        )
        for problem in exc.problems:
            print(named(problem).render(), file=sys.stderr)
        return EXIT_BAD_INPUT
    warnings = [named(p) for p in plan.problems if not p.fatal]
    for w in warnings:
        print(w.render(), file=sys.stderr)
    print(f"validate: the imported recipe is valid ({tally(warnings)})", file=sys.stderr)
    return EXIT_OK
