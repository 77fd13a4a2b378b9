"""Figures about the test suite go stale with every test added: the README's and CONTRIBUTING.md's words on
the tests state none (no count of tests, no duration); dated measurements of the suite live in docs/ci.md,
under their date."""

from __future__ import annotations

import re

from tests.conftest import ROOT

COUNT = re.compile(r"\b\d+ (?:GPU |in-process |short )?tests?\b|\b\d+ (?:passed|skipped|failed)\b")
DURATION = re.compile(r"\b\d+(?:\.\d+)? ?(?:s|min|seconds|minutes)\b")


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def test_the_words_on_the_tests_state_no_count_and_no_duration():
    parts = {
        "README.md, Tests and CI": section((ROOT / "README.md").read_text(), "## Tests and CI"),
        "CONTRIBUTING.md": (ROOT / "CONTRIBUTING.md").read_text(),
    }
    found = [f"{where}: {m.group(0)!r}" for where, text in parts.items() for m in COUNT.finditer(text)]
    found += [f"{where}: {m.group(0)!r}" for where, text in parts.items() for m in DURATION.finditer(text)]
    assert not found, found
