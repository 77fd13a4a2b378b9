"""Human-facing files in the run directory: README.md (how to load the adapter)."""

from __future__ import annotations

from pathlib import Path

from entrypoint.export import sha256_file
from entrypoint.plan import Plan

README = """# GRPO run `{run}`

Recipe `{recipe}`, base model `{model}`. Status and inputs: `manifest.json`; training log:
`logging.jsonl`; each process's output: `logs/`; ms-swift's checkpoints: `train/`.

## Load the adapter

With PEFT:

```python
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

base = AutoModelForCausalLM.from_pretrained("{base_path}")
model = PeftModel.from_pretrained(base, "adapter")
tokenizer = AutoTokenizer.from_pretrained("{base_path}")
```

With ms-swift: `swift infer --model {base_path} --adapters adapter{swift_extra}`

With vLLM: `vllm serve {base_path} --enable-lora --lora-modules {run}=adapter`
"""


def write(plan: Plan, run_dir: Path) -> dict[str, str]:
    """Write README.md; returns {relative path: sha256} of what it wrote."""
    swift_extra = ""
    for key in ("model_type", "template"):
        if key in plan.recipe.trainer or plan.recipe.settings.MODEL_SOURCE == "embedded":
            value = plan.recipe.trainer.get(key)
            if value:
                swift_extra += f" --{key} {value[0]}"
    path = run_dir / "README.md"
    path.write_text(
        README.format(
            run=plan.run_name,
            recipe=plan.recipe.name,
            model=plan.recipe.raw("MODEL"),
            base_path=plan.model_path,
            swift_extra=swift_extra,
        )
    )
    return {"README.md": sha256_file(path)}
