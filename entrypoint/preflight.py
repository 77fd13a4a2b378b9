"""Preflight: checks that run before any download, model load or GPU process (filled in by issue 4)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from entrypoint.errors import Problem
from entrypoint.plan import Plan


def check(plan: Plan, environ: Mapping[str, str], for_train: bool) -> list[Problem]:
    """Every problem found in the plan's inputs; fatal ones stop `train`, `plan` and `validate`."""
    problems: list[Problem] = []
    if for_train:
        problems += [
            dataclasses.replace(p, fatal=True)
            for p in plan.problems
            if p.where == "MODEL" and "not converted" in p.message
        ]
    return problems
