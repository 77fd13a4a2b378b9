"""Installs the entrypoint's hooks in its child processes (trainer, rollout server and their workers).

The plan puts this folder first on the children's PYTHONPATH whenever one of the hooks' GRPO_RIG_*
variables is set (`plan` shows both); Python imports `sitecustomize` at start-up. The hooks themselves,
what each patches, why, what it saves and when it can go, are entrypoint/child/hooks/<name>.py; this file
only makes `entrypoint` importable, installs the enabled hooks (entrypoint/child/loader.py: each acts once
the child itself imports the library it patches, so nothing here imports torch, vLLM or ms-swift), then
runs the next sitecustomize on the path. This folder holds only this file: any other module here would
shadow a top-level name in every child.

Any other sitecustomize on the path (a distribution's, a user's) still runs: it is executed after this.
"""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # the folder that holds `entrypoint`


def _install_hooks():
    # appended, never first: the checkout's root also holds tests/ and bench/, which must shadow nothing
    if importlib.util.find_spec("entrypoint") is None:
        sys.path.append(ROOT)
    try:
        from entrypoint.child import loader

        loader.install(os.environ)
    except Exception as exc:  # the hooks must never take a child down
        print(f"grpo-rig site: hooks not installed: {exc!r}", file=sys.stderr, flush=True)


def _chain_next_sitecustomize():
    """Run the next `sitecustomize` on sys.path, which this file shadows."""
    for entry in sys.path:
        if os.path.abspath(entry or ".") == HERE:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as f:
                code = compile(f.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})  # noqa: S102
            return


_install_hooks()
_chain_next_sitecustomize()
