"""Installs the enabled hooks in this process (site/sitecustomize.py calls `install` at start-up).

Nothing is patched now: each hook registers the modules it patches, and an import finder first on
sys.meta_path runs the patches right after the child itself imports each of them (so importing this does
not import torch, vLLM or ms-swift). Before a hook's patch runs, the hook's targets in the module just
imported are looked up: one that is missing, or a patch that raises, is the hook's not-installed notice
(wire.NOTICE, once per process) and the hook's later patches are skipped; the child goes on.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.machinery
import sys
import time
from collections.abc import Callable, Mapping
from types import ModuleType

from entrypoint.child import runtime, wire
from entrypoint.child.hooks import ALL
from entrypoint.child.hooks.base import Hook


@dataclasses.dataclass(frozen=True)
class Patch:
    """apply(module) of `hook`, once its module is imported."""

    hook: Hook
    apply: Callable[[ModuleType], None]


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs the patches registered for a module right after the child imports it, once; times the
    imports asked for (`time`). Removes itself once nothing is left to do."""

    def __init__(self):
        self.patches: dict[str, list[Patch]] = {}  # module name -> patches, in registration order
        self.timed: dict[str, Callable[[dict], None]] = {}  # module name -> where its import event goes
        self.registered: list[str] = []  # hooks that asked for anything, in order
        self.failed: set[str] = set()  # hooks that did not install

    def for_hook(self, hook: Hook) -> _Registrar:
        """The `after` a hook's install is given."""
        return _Registrar(self, hook)

    def find_spec(self, fullname, path, target=None):
        """The regular spec of a module with patches or a timer, its loader made to run them after it."""
        patches = self.patches.pop(fullname, [])
        timed = self.timed.pop(fullname, None)
        if not patches and timed is None:
            return None
        if not self.patches and not self.timed:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run, start = spec.loader.exec_module, time.time()

        def exec_module(module):
            run(module)
            if timed is not None:
                timed({"phase": wire.IMPORT, "module": fullname, "seconds": round(time.time() - start, 3)})
            for patch in patches:
                self._apply(patch, module)

        spec.loader.exec_module = exec_module
        return spec

    def _apply(self, patch: Patch, module: ModuleType) -> None:
        hook = patch.hook
        if hook.name in self.failed:
            return
        try:
            self._check_targets(hook, module)
            patch.apply(module)
        except Exception as exc:  # a hook must never take the child down
            self.failed.add(hook.name)
            reason = str(exc) if isinstance(exc, runtime.MissingTarget) else f"{module.__name__}: {exc!r}"
            runtime.not_installed(hook.name, reason)

    @staticmethod
    def _check_targets(hook: Hook, module: ModuleType) -> None:
        """MissingTarget for a target of `hook` in `module` (just imported) that is not there. Targets in
        other modules are not looked up here: one may be half imported (in sys.modules, not yet run)."""
        for t in hook.targets:
            if t.module != module.__name__:
                continue
            owner, where = module, t.module
            for part in t.qualname.split("."):
                if not hasattr(owner, part):
                    raise runtime.MissingTarget(
                        f"{where} has no {part} ({t.module}:{t.qualname} of {', '.join(hook.upstream)})"
                    )
                owner, where = getattr(owner, part), f"{where}.{part}"


@dataclasses.dataclass(frozen=True)
class _Registrar:
    """hooks.After for one hook."""

    finder: AfterImport
    hook: Hook

    def patch(self, module: str, apply: Callable[[ModuleType], None]) -> None:
        """hooks.After.patch."""
        self.finder.patches.setdefault(module, []).append(Patch(self.hook, apply))
        self.finder.registered.append(self.hook.name)

    def time(self, module: str, write: Callable[[dict], None]) -> None:
        """hooks.After.time."""
        self.finder.timed[module] = write
        self.finder.registered.append(self.hook.name)


def install(environ: Mapping[str, str], hooks: tuple[Hook, ...] = ALL) -> list[str]:
    """Install every hook whose variable in `environ` turns it on (read once, here); the names of those
    that registered patches. The finder goes first on sys.meta_path when there is anything to do."""
    finder = AfterImport()
    values = {h.name: environ.get(h.variable, "") for h in hooks}
    for hook in hooks:
        try:
            hook.install(values[hook.name], finder.for_hook(hook))
        except Exception as exc:  # a hook must never take the child down
            finder.failed.add(hook.name)
            runtime.not_installed(hook.name, repr(exc))
    if finder.patches or finder.timed:
        sys.meta_path.insert(0, finder)
    return [name for name in dict.fromkeys(finder.registered) if name not in finder.failed]
