"""Which interpreters run the entrypoint: any Python from 3.10 with the locked stack's packages (the image's
3.10, the lent GPU machine's 3.12 builds of the same lock), checked in process, on whichever interpreter runs
the tests."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import entrypoint
from entrypoint.__main__ import refusal

SKIPPED = {"entrypoint.__main__", "entrypoint.rewards.grpo_rig_rewards"}  # the script; ms-swift's plugin shim


def present(name: str) -> object:
    return object()


def test_the_locked_stack_not_the_minor_version_decides_which_interpreter_runs_the_entrypoint():
    for version in ((3, 10, 13), (3, 11, 7), (3, 12, 1), (3, 13, 0)):
        assert refusal(version, present) is None, version
    assert "needs Python 3.10 or later" in refusal((3, 9, 18), present)


def test_an_interpreter_without_the_locked_stack_is_told_which_package_is_missing():
    why = refusal((3, 12, 1), lambda name: None if name == "dotenv" else object())
    assert "lacks the locked stack (no python-dotenv)" in why and ".venv/bin/python -m entrypoint" in why


def test_no_dataclass_default_is_one_that_python_3_11_refuses():
    """Python 3.11's dataclasses refuse a default whose type is unhashable (a mappingproxy before 3.12, a
    list, a non-frozen dataclass) when the class is defined; the same rule read here fails on 3.10 too."""
    refused = []
    for info in pkgutil.walk_packages(entrypoint.__path__, "entrypoint."):
        if info.name in SKIPPED:
            continue
        module = importlib.import_module(info.name)
        classes = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == info.name]
        for cls in filter(dataclasses.is_dataclass, classes):
            for field in dataclasses.fields(cls):
                default = field.default
                if default is not dataclasses.MISSING and type(default).__hash__ is None:
                    refused.append(f"{info.name}.{cls.__qualname__}.{field.name}: {type(default).__name__}")
    assert refused == []
