"""`python -m entrypoint`: an interpreter with the locked stack, or a plain answer instead of a traceback.

The entrypoint needs the packages of requirements/runtime.lock, not one interpreter's minor version: the
image's Python 3.10 (the container, or the host's `.venv` that `make venv` builds) and the same locked
versions built for Python 3.11 or 3.12 (the lent GPU machine's kit, bench/device/gpu-work.sh) both run it.
What fails far from here is checked first: a bare interpreter lacks python-dotenv (a new user's first copy of
a README command), and a Python before 3.10 cannot read the entrypoint's syntax (`X | Y` types at run time).
"""

from __future__ import annotations  # the annotations below, read by a Python before 3.10 too

import importlib.util
import sys

WRONG_INTERPRETER = 2  # bad input, refused before any work (cli.py's exit statuses)
USE = (
    ".venv/bin/python -m entrypoint ... (made by `make venv`), or the container: docker compose run --rm "
    "train ..."
)
OLDEST = (3, 10)
# The locked stack's packages that importing entrypoint.cli needs (import name: distribution name); the rest
# are imported where they are used, and a command that needs one names it.
NEEDED = {
    "dotenv": "python-dotenv",
    "pydantic": "pydantic",
    "huggingface_hub": "huggingface-hub",
    "psutil": "psutil",
}


def refusal(
    version: tuple[int, ...] = sys.version_info[:3], find_spec=importlib.util.find_spec
) -> str | None:
    """Why this interpreter cannot run the entrypoint, in one line, or None when it can."""
    if tuple(version[:2]) < OLDEST:
        shown = ".".join(str(v) for v in version)
        return (
            f"grpo-rig: this is Python {shown} ({sys.executable}); the entrypoint needs Python 3.10 or "
            f"later with the locked stack: {USE}"
        )
    missing = [dist for name, dist in NEEDED.items() if find_spec(name) is None]
    if missing:
        return f"grpo-rig: {sys.executable} lacks the locked stack (no {', '.join(missing)}): {USE}"
    return None


if __name__ == "__main__":
    try:
        why = refusal()
        if why is not None:
            print(why, file=sys.stderr)
            sys.exit(WRONG_INTERPRETER)
        from entrypoint.cli import main  # after the check above
    # Ctrl-C while the check or the entrypoint's own imports run (pydantic, requests)
    except KeyboardInterrupt:
        print("grpo-rig: stopped by SIGINT before the command started: nothing written", file=sys.stderr)
        sys.exit(130)

    raise SystemExit(main())
