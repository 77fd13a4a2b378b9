"""Which model architectures vLLM 0.8.5.post1 can load in bitsandbytes 4-bit and serve a LoRA adapter on: what
a colocated QLoRA run (QUANT_METHOD=bnb QUANT_BITS=4 with vLLM) asks of vLLM's copy of the model.

vLLM's BitsAndBytesModelLoader refuses a model class without `packed_modules_mapping` ("does not support
BitsAndBytes quantization yet", vllm/model_executor/model_loader/loader.py:1151-1154); SupportsLoRA and
SupportsQuant give one (models/interfaces.py:139, :492). Serving the trained adapter (enable_lora) needs
SupportsLoRA in the class's bases ("does not support LoRA yet", v1/worker/lora_model_runner_mixin.py:33).

The committed table (data/vllm_bnb_lora.json) is read by preflight; `scan` rebuilds it from the installed
vLLM's source with `ast` (no import: vLLM takes ~20 s to import), and a test compares the two:
`python -m entrypoint.facts.vllm_bnb --write` after a vLLM bump.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import sys
from pathlib import Path

DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "vllm_bnb_lora.json"
# the registries of vllm/model_executor/models/registry.py a GRPO run's model comes from
REGISTRIES = ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS")
SUPPORTED = ""  # the table's value for an architecture vLLM loads in 4-bit with LoRA
NO_PACKED = (
    "no packed_modules_mapping: vLLM's bitsandbytes loader refuses the class "
    "(model_loader/loader.py:1151-1154)"
)
NO_LORA = (
    "no LoRA support (SupportsLoRA): vLLM cannot serve the adapter on it "
    "(v1/worker/lora_model_runner_mixin.py:33)"
)


class _Models:
    """vLLM's model modules, parsed once each, with what a class inherits resolved across their imports."""

    def __init__(self, models_dir: Path):
        self.dir = models_dir

    @functools.cache  # noqa: B019 (one scan, a few hundred modules)
    def tree(self, module: str) -> ast.Module | None:
        path = self.dir / f"{module}.py"
        return ast.parse(path.read_text(encoding="utf-8")) if path.exists() else None

    def _imported(self, module: str, name: str) -> tuple[str, str] | None:
        """(module, name) a `from .x import name` / `from vllm.model_executor.models.x import name` brings in,
        or a module-level `name = Other` alias."""
        tree = self.tree(module)
        for node in tree.body if tree else []:
            if isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level == 1 or source.startswith("vllm.model_executor.models."):
                    for alias in node.names:
                        if (alias.asname or alias.name) == name:
                            return source.rsplit(".", 1)[-1] if source else "", alias.name
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                    return module, node.value.id
        return None

    @functools.cache  # noqa: B019
    def features(self, module: str, name: str) -> frozenset[str]:
        """{"packed", "lora"} the class `name` of `module` has: its own `packed_modules_mapping` (class level
        or set in a method on self), or inherited; SupportsLoRA gives both, SupportsQuant the mapping."""
        if name == "SupportsLoRA":
            return frozenset({"packed", "lora"})
        if name == "SupportsQuant":
            return frozenset({"packed"})
        tree = self.tree(module)
        cls = (
            next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
            if tree
            else None
        )
        if cls is None:
            found = self._imported(module, name)
            return self.features(*found) if found and found != (module, name) else frozenset()
        out: set[str] = set()
        for node in ast.walk(cls):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign) and node.value
                else []
            )
            for t in targets:
                if (isinstance(t, ast.Name) and t.id == "packed_modules_mapping") or (
                    isinstance(t, ast.Attribute)
                    and t.attr == "packed_modules_mapping"
                    and ast.unparse(t.value) == "self"
                ):
                    out.add("packed")
        for base in cls.bases:
            base_name = (
                base.id
                if isinstance(base, ast.Name)
                else base.attr
                if isinstance(base, ast.Attribute)
                else ""
            )
            if base_name and base_name != "Module":
                out |= self.features(module, base_name)
        return frozenset(out)


def scan(vllm_dir: Path) -> dict[str, str]:
    """{architecture: SUPPORTED or why not} for every architecture of vLLM's REGISTRIES under `vllm_dir`."""
    models = _Models(vllm_dir / "model_executor" / "models")
    registry = models.tree("registry")
    out: dict[str, str] = {}
    for node in registry.body if registry else []:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in REGISTRIES for t in node.targets
        ):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                module, cls = ast.literal_eval(value)
                has = models.features(module, cls)
                out[ast.literal_eval(key)] = (
                    NO_PACKED if "packed" not in has else NO_LORA if "lora" not in has else SUPPORTED
                )
    return dict(sorted(out.items()))


@functools.cache
def table() -> dict[str, str]:
    """The committed scan of the lock's vLLM (DATA_FILE)."""
    return json.loads(DATA_FILE.read_text())["architectures"]


def why_not(architecture: str) -> str | None:
    """SUPPORTED ("") where vLLM 0.8.5 loads `architecture` in 4-bit and serves LoRA on it, why not where it
    cannot, None for an architecture its registry does not list."""
    return table().get(architecture)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {DATA_FILE.name}")
    args = parser.parse_args(argv)
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        print("vLLM is not installed here", file=sys.stderr)
        return 1
    found = scan(Path(spec.origin).parent)
    text = (
        json.dumps(
            {
                "_comment": "written by python -m entrypoint.facts.vllm_bnb --write from the installed "
                'vLLM (the lock\'s 0.8.5.post1); "" = loads in bitsandbytes 4-bit and serves LoRA',
                "architectures": found,
            },
            indent=1,
        )
        + "\n"
    )
    if args.write:
        DATA_FILE.write_text(text)
        print(
            f"wrote {DATA_FILE} ({len(found)} architectures, {sum(v == SUPPORTED for v in found.values())} "
            "supported)"
        )
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
