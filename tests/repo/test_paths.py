"""Every path of this repository that the prose names exists: the README, CONTRIBUTING.md, docs/, the
entrypoint's docstrings, comments and messages (`keys` prints some), the recipes' headers, the Makefile, the
Dockerfile and bench/. A file that moves leaves its old path behind in these; this test names each one.

What counts as a path: a word that starts with one of the repository's top-level folders (`entrypoint/`,
`docs/`, `recipes/`, ...), and a markdown link's target. What is left alone: ms-swift's own paths (UPSTREAM),
a user's file in an example (MADE_UP), git-ignored output (GENERATED), placeholders written in capitals
(`bench/QUESTION/NAME.tar.gz`), and a benchmark run's folder or file, which lives in its archive
(`bench/generation/RUN/x.json` is `x.json` in `bench/generation/RUN.tar.gz`)."""

from __future__ import annotations

import fnmatch
import functools
import re
import tarfile
from pathlib import Path

from tests.conftest import ROOT

FOLDERS = ("entrypoint", "tests", "docs", "recipes", "bench", "scripts", "examples", "requirements")
# a path: a top-level folder, then path characters, braces ({a,b}) and globs; a `$` or `<` right after it (a
# shell variable, a placeholder) makes it a prefix
PATH = re.compile(r"(?<![\w./$-])((?:" + "|".join(FOLDERS) + r")/[\w./{},*-]*[\w*}/])([$<])?")
LINK = re.compile(r"\]\(([^)\s]+)\)")
SCANNED = (
    "README.md", "CONTRIBUTING.md", "Makefile", "Dockerfile", "compose.yaml", "compose.cpu.yaml",
    "docs/**/*.md", "entrypoint/**/*.py", "recipes/*.env", "bench/**/*.md", "bench/**/*.py", "bench/**/*.sh",
    "scripts/*",
)  # fmt: skip
# ms-swift's repository, where a source names ms-swift's files
UPSTREAM = ("examples/train/", "docs/source_en/")
MADE_UP = {"recipes/mine.env", "recipes/x.env"}  # a user's own recipe in an example
GENERATED = ("bench/*/latest", "bench/*/latest/*")  # bench/.gitignore: a run's output before it is archived
EXTRACTED = "bench/*/20[0-9][0-9]-*/*"  # an archive unpacked in place (bench/.gitignore): not ours to scan
# "file: path" still stale in a file that another change is rewriting at the same time: mended there. Once it
# is, the test says to take the entry out.
PENDING = {"entrypoint/plan/build.py: entrypoint/shape.py"}


def scanned_files() -> list[Path]:
    found = {p for pattern in SCANNED for p in ROOT.glob(pattern) if p.is_file()}
    rel = {p: p.relative_to(ROOT).as_posix() for p in found}
    return sorted(p for p in found if not fnmatch.fnmatch(rel[p], EXTRACTED) and "__pycache__" not in rel[p])


def expand(path: str) -> list[str]:
    """`a/{b,c}.json` -> `a/b.json`, `a/c.json`; `a/{name}.py` (an f-string's field) -> `a/*.py`."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    head, tail = path[: match.start()], path[match.end() :]
    words = match.group(1).split(",") if "," in match.group(1) else ["*"]
    return [p for word in words for p in expand(head + word + tail)]


@functools.cache
def archive_names(archive: Path) -> frozenset[str]:
    with tarfile.open(archive) as tar:
        return frozenset(name.rstrip("/") for name in tar.getnames())


def in_archive(path: str) -> bool:
    """`bench/q/RUN/x` where `bench/q/RUN.tar.gz` holds `RUN/x`."""
    parts = path.rstrip("/").split("/")
    for i in range(2, len(parts) + 1):
        archive = ROOT.joinpath(*parts[: i - 1], parts[i - 1] + ".tar.gz")
        if archive.is_file():
            member = "/".join(parts[i - 1 :])
            names = archive_names(archive)
            return member in names or any(n.startswith(member + "/") for n in names)
    return False


def exists(path: str, prefix: bool = False) -> bool:
    if prefix or "*" in path:
        return any(ROOT.glob(path + ("*" if prefix else "")))
    return (ROOT / path).exists() or in_archive(path)


def left_alone(path: str) -> bool:
    return (
        path.startswith(UPSTREAM)
        or path in MADE_UP
        or any(fnmatch.fnmatch(path.rstrip("/"), g) for g in GENERATED)
        or any(re.fullmatch(r"[A-Z][A-Z_]+", part.split(".")[0]) for part in path.split("/"))
    )


def stale_paths(rel: str, text: str) -> list[str]:
    """`rel:line: path` for each path that `text` (the file `rel`) names and the tree lacks."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in PATH.finditer(line):
            named, prefix = match.group(1).rstrip("."), bool(match.group(2))
            if left_alone(named):
                continue
            if not all(exists(p, prefix) for p in expand(named)):
                found.append(f"{rel}:{number}: {named}")
        if rel.endswith(".md"):
            for match in LINK.finditer(line):
                target = match.group(1).split("#")[0]
                if not target or re.match(r"[a-z]+:", target):  # an anchor, http:, mailto:
                    continue
                if not (ROOT / rel).parent.joinpath(target).exists():
                    found.append(f"{rel}:{number}: link {match.group(1)}")
    return found


def test_every_path_the_prose_names_exists():
    stale = [
        line
        for path in scanned_files()
        for line in stale_paths(path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"))
    ]
    unlined = {line: re.sub(r":\d+:", ":", line) for line in stale}
    new = sorted(line for line in stale if unlined[line] not in PENDING)
    assert not new, "\n".join(["paths named but not in the tree:", *new])
    mended = PENDING - set(unlined.values())
    assert not mended, f"mended, take out of PENDING: {sorted(mended)}"


def test_the_check_finds_a_moved_file_and_leaves_the_rest_alone():
    text = (
        "`keys` is in entrypoint/recipe/keys.py, not entrypoint/keys.py; "
        "[the tiers](architecture.md#tests),\n"
        "[gone](nowhere.md); entrypoint/data/swift_{rlhf,rollout}_args.json, "
        "entrypoint/data/swift_{rlhf,x}_args.json\n"
        "entrypoint/child/hooks/{hook.name}.py\n"
        "tests/gpu/test_$t.py, recipes/mine.env, examples/train/grpo/plugin/plugin.py, "
        "bench/QUESTION/NAME.tar.gz,\n"
        "bench/throughput/latest, bench/generation/2026-12-02-1424-sampler/generation-sampler.json "
        "and its .log\n"
        "bench/generation/2026-12-02-1424-sampler/nothing.json\n"
    )
    assert stale_paths("docs/note.md", text) == [
        "docs/note.md:1: entrypoint/keys.py",
        "docs/note.md:2: entrypoint/data/swift_{rlhf,x}_args.json",
        "docs/note.md:2: link nowhere.md",
        "docs/note.md:6: bench/generation/2026-12-02-1424-sampler/nothing.json",
    ]
