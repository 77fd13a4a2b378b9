"""`python -m entrypoint`: the locked stack's interpreter, or a plain answer instead of a traceback.

The entrypoint runs on the image's Python 3.10 with requirements/runtime.lock installed (the container, or
the host's `.venv` that `make venv` builds). Another interpreter fails far from here: Python 3.11's dataclasses
refuse one of the entrypoint's defaults, a bare Python 3.10 lacks python-dotenv (a new user's first copy of a
README command did both).
"""

import sys

WRONG_INTERPRETER = 2  # bad input, refused before any work (cli.py's exit statuses)
USE = ".venv/bin/python -m entrypoint ... (made by `make venv`), or the container: docker compose run --rm train ..."

if sys.version_info[:2] != (3, 10):
    print(f"grpo-rig: this is Python {sys.version.split()[0]} ({sys.executable}); the entrypoint runs on the "
          f"locked Python 3.10 stack: {USE}", file=sys.stderr)  # fmt: skip
    sys.exit(WRONG_INTERPRETER)
try:
    import dotenv  # noqa: F401 (the first of the locked stack's packages the entrypoint imports)
except ImportError:
    print(f"grpo-rig: {sys.executable} lacks the locked stack (no python-dotenv): {USE}", file=sys.stderr)
    sys.exit(WRONG_INTERPRETER)

try:
    from entrypoint.cli import main  # noqa: E402 (after the checks above)
except KeyboardInterrupt:  # Ctrl-C while the entrypoint's own modules are imported (pydantic, requests)
    print("grpo-rig: stopped by SIGINT before the command started: nothing written", file=sys.stderr)
    sys.exit(130)

raise SystemExit(main())
