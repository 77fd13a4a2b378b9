"""Has the upstream code a hook patches changed since the hook was written? Read from source, never imported.

For a Target (hooks/base.py) the installed module's file is found without importing it or its parent
packages (importlib.util.find_spec of the top-level package only, then the dotted path walked to x.py or
x/__init__.py), parsed with `ast`, and the node of its qualname hashed: sha256 of its canonical text
(`canonical`: node types and fields, line numbers left out, so code moving within the file is no drift), first
16 hex digits. Not ast.dump: its text differs between Python versions (3.12 adds `type_params=[]` to every
definition), and the same source must hash the same on the image's 3.10 and on a 3.11-3.13 stack.

tests/child/test_hooks.py compares every target with its declared hash, so a lock bump names every hook to
re-check; `python -m entrypoint.child.drift` prints the installed hashes to pin once a hook is re-checked.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
from pathlib import Path

from entrypoint.child.hooks import ALL
from entrypoint.child.hooks.base import Hook, Target

HEX_DIGITS = 16


def source_file(module: str, root: Path | None = None) -> Path | None:
    """The .py file of dotted `module` (its __init__.py for a package), None where there is none. `root`:
    the folder that holds the top-level package instead of the installed one (a test's scratch copy)."""
    top, *rest = module.split(".")
    if root is None:
        spec = importlib.util.find_spec(top)  # a top-level name: nothing is imported
        if spec is None:
            return None
        if spec.submodule_search_locations:  # a package (a namespace package has no origin)
            base = Path(next(iter(spec.submodule_search_locations)))
        elif spec.origin and not rest:
            return Path(spec.origin)
        else:
            return None
    else:
        base = Path(root) / top
    path = base.joinpath(*rest)
    for candidate in (path.with_suffix(".py") if rest else None, path / "__init__.py"):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _definitions(node: ast.AST):
    """The functions and classes defined directly in `node`, also under if/try (TYPE_CHECKING, fallbacks)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield child
        elif isinstance(child, ast.If | ast.Try | ast.ExceptHandler):
            yield from _definitions(child)


def node_of(tree: ast.AST, qualname: str) -> ast.AST | None:
    """The definition `qualname` ("Class.method", "function", "Class") names in `tree`; the last one where
    a name is defined twice (the one Python keeps)."""
    node = tree
    for part in qualname.split("."):
        found = [n for n in _definitions(node) if n.name == part]
        if not found:
            return None
        node = found[-1]
    return node


def canonical(node: ast.AST | list | object) -> str:
    """`node` as text that depends on the code only: each node's type and its fields by name, leaving out
    fields that are None or empty (those a newer Python adds with nothing in them, e.g. 3.12's type_params)
    and positions (not in _fields)."""
    if isinstance(node, ast.AST):
        fields = ((name, getattr(node, name, None)) for name in node._fields)
        inner = ",".join(f"{name}={canonical(v)}" for name, v in fields if v is not None and v != [])
        return f"{type(node).__name__}({inner})"
    if isinstance(node, list):
        return "[" + ",".join(canonical(x) for x in node) + "]"
    return repr(node)


def digest(module: str, qualname: str, root: Path | None = None) -> str:
    """The target's hash (module docstring), or why there is none ("no file ...", "no ... in ...")."""
    path = source_file(module, root)
    if path is None:
        return f"no file for {module}"
    node = node_of(ast.parse(path.read_text(encoding="utf-8"), str(path)), qualname)
    if node is None:
        return f"no {qualname} in {path}"
    return hashlib.sha256(canonical(node).encode()).hexdigest()[:HEX_DIGITS]


@dataclasses.dataclass(frozen=True)
class Drift:
    """A target whose source is not the one its hook was written against."""

    hook: Hook
    target: Target
    found: str  # the installed source's hash, or why there is none

    def message(self) -> str:
        """What a person does about it: re-check the hook against the new source."""
        t, h = self.target, self.hook
        return (
            f"hook {h.name} ({h.variable}): {t.module}:{t.qualname} is {self.found}, not {t.sha256} as in "
            f"{', '.join(h.upstream)}, which the hook was written against. Re-check the hook against the new "
            f"source (entrypoint/child/hooks/{h.name}.py), then pin the new hash (python -m "
            f"entrypoint.child.drift); or delete the hook if this is the change it waits for: {h.delete_when}"
        )


def drifted(hook: Hook, root: Path | None = None) -> list[Drift]:
    """The targets of `hook` whose installed source (or `root`'s copy) differs from the declared one."""
    found = [(t, digest(t.module, t.qualname, root)) for t in hook.targets]
    return [Drift(hook, t, now) for t, now in found if now != t.sha256]


def main() -> None:
    """Print each hook's targets with the installed hash, marking those that differ from the pin."""
    for hook in ALL:
        for t in hook.targets:
            now = digest(t.module, t.qualname)
            mark = "" if now == t.sha256 else f"   <- pinned {t.sha256}"
            print(f"{hook.name:22} {t.module}:{t.qualname}  {now}{mark}")


if __name__ == "__main__":
    main()
