"""The commands of `python -m entrypoint`: each reads the world once at the edge (edge.py), decides, checks,
and acts. The top layer below cli.py: a command may use every package beneath it; nothing below imports a
command (`rerun` runs `train` with a recorded run's values).

Each command is one module with `NAME` (its command word), `add_parser(subparsers)` (its arguments and
help; returns its parser) and `main(args, environ) -> int` (the exit status; BadInput for bad input, exit 2).
REGISTRY holds them in the order `--help` lists them; cli.py builds the parser from it and calls the
chosen command's main.
"""

from entrypoint.commands import (
    doctor,
    evaluate,
    import_,
    keys,
    plan,
    prepare_model,
    recipes,
    rerun,
    rollout,
    train,
    validate,
)

REGISTRY = (train, rollout, plan, validate, doctor, prepare_model, keys, recipes, import_, evaluate, rerun)
