"""`rollout`: serve only the vLLM rollout on this node's ROLLOUT_GPUS, for trainers on other nodes
(docs/multi-node.md). Its directory is nodes/rollout/ of the run (edge.here_of), locked as train's is."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TextIO

from entrypoint.commands import edge, words
from entrypoint.errors import EXIT_OK, EXIT_RUNTIME_FAILURE
from entrypoint.facts.facts import WEIGHT_SYNC_PORT
from entrypoint.plan.build import Plan, Process
from entrypoint.record import runlock
from entrypoint.supervise.printer import Printer
from entrypoint.supervise.signals import Interrupted, interruptible
from entrypoint.supervise.supervisor import ChildFailed, Supervisor, supervised

NAME = "rollout"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`rollout [recipe=NAME] [KEY=VALUE ...]`: the words go to the recipe parser, as train's do."""
    parser = subparsers.add_parser(
        NAME,
        description="Serve only the vLLM rollout on this node's ROLLOUT_GPUS, for trainers on other nodes, "
        "until stopped.",
        allow_abbrev=False,
    )
    return words.take_recipe_words(parser, "[-h] [KEY=VALUE ...]")


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `rollout` command: the exit status of the rollout server (errors.EXIT_*)."""
    return rollout(words.recipe_words(args.words, environ), environ)


def rollout(cli_pairs: list[str], environ: Mapping[str, str], console: TextIO | None = None) -> int:
    """Serve the vLLM rollout on this node's ROLLOUT_GPUS for trainers on other nodes, until stopped."""
    printer = Printer(console) if console else Printer()
    with runlock.RunLock() as lock, interruptible():
        plan = edge.make_plan(cli_pairs, environ, for_train=True, rollout_only=True, lock=lock, launches=True)
        here = edge.here_of(plan.run_dir, plan.recipe.settings.NODE_RANK, rollout_only=True)
        lock.take(here)
        for line in plan.render().splitlines():
            printer.say(line)
        process = plan.process("rollout")
        grace, secrets = plan.recipe.settings.STOP_GRACE_SECONDS, list(plan.facts.secret_values)
        try:
            with supervised(here / "logs", grace, printer, secrets, environ) as supervisor:
                return _serve(plan, process, supervisor, printer)
        except ChildFailed as exc:
            printer.say(exc.render())
            return EXIT_RUNTIME_FAILURE
        except Interrupted as exc:
            return 128 + exc.signum


def _serve(plan: Plan, process: Process, supervisor: Supervisor, printer: Printer) -> int:
    """Start the rollout server, wait for its health, then for its end."""
    child = supervisor.start(process)
    supervisor.wait_healthy(child, process.health_url, plan.recipe.settings.ROLLOUT_STARTUP_TIMEOUT)
    printer.say(
        "rollout server healthy; trainers on other nodes: ROLLOUT_HOST=<this node's address> "
        f"ROLLOUT_PORT={process.port}"
    )
    printer.say(
        f"open to the trainer nodes: TCP {process.port} (HTTP) and {WEIGHT_SYNC_PORT} (weight sync), plus "
        "NCCL's ports"
    )
    rc = supervisor.wait(child)
    printer.say(f"rollout server exited with status {rc}")
    return EXIT_OK if rc == 0 else EXIT_RUNTIME_FAILURE
