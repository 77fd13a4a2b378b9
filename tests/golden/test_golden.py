"""The plans and refusals users see stay what they were (tests/golden/scenarios.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import scenarios

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    # the same scratch path every time, so the normalised paths in the outputs match
    tmp = tmp_path_factory.mktemp("golden")
    scenarios._write_inputs(tmp)
    return tmp


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_output_is_unchanged(name, inputs):
    expected = (scenarios.GOLDEN / f"{name}.txt").read_text()
    assert scenarios.run(name, inputs) == expected
