"""The README's "Which model fits?" table, generated from the planner so that it cannot drift from it.

Each row plans the shipped countdown recipe (recipes/countdown-1x4090.env: 8 completions of up to 256 tokens
per prompt, 32 per step, LoRA rank 8) with MODEL set to the row's model, on two example machines:
examples/inventories/1x4090-driver535.json (colocated vLLM) and 2x4090-driver535.json (vLLM on the second
card, TRAIN_GPUS=0 ROLLOUT_GPUS=1), and with QLoRA (QUANT_METHOD=bnb QUANT_BITS=4) on the first. A cell says
"no" where the plan, its memory check or its QLoRA checks refuse it (bitsandbytes counted as installed: the
image's lock holds it). The models are entrypoint/data/model_configs.json's (their dimensions and sources are
there). `--write` rewrites the table between the README's markers; `--check` exits 1 when it differs
(tests/plan/test_fits_table.py runs it).

    python scripts/fits_table.py [--write | --check]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from entrypoint.errors import BadInput  # noqa: E402
from entrypoint.facts.facts import Ports  # noqa: E402
from entrypoint.plan import build as plan_mod  # noqa: E402
from entrypoint.plan import memory  # noqa: E402
from entrypoint.preflight import memory_check, values  # noqa: E402
from entrypoint.recipe import load as recipe_mod  # noqa: E402
from entrypoint.world import hardware, host  # noqa: E402

README = ROOT / "README.md"
START, END = "<!-- fits-table: scripts/fits_table.py -->", "<!-- /fits-table -->"
RECIPE = "countdown-1x4090"
MACHINES = {
    "1 x RTX 4090": ("1x4090-driver535", []),
    "2 x RTX 4090": ("2x4090-driver535", ["TRAIN_GPUS=0", "ROLLOUT_GPUS=1"]),
    "1 x RTX 4090, QLoRA (4-bit)": ("1x4090-driver535", ["QUANT_METHOD=bnb", "QUANT_BITS=4"]),
}
# GPU runs that back a row (the others are planned only): where to read them
EVIDENCE = {
    "Qwen/Qwen2.5-0.5B-Instruct": "[measured](docs/benchmarks/countdown-throughput.md)",
    "Qwen/Qwen2.5-3B-Instruct": "[measured](docs/benchmarks/one-card-7b.md)",
    "Qwen/Qwen2.5-7B-Instruct": "[measured, one weight copy](docs/benchmarks/one-card-7b.md)",
    "Qwen/Qwen3-4B": "[measured, one weight copy](docs/gpu-evidence.md)",
    "Qwen/Qwen3-14B": "[measured, QLoRA](docs/benchmarks/one-card-14b.md)",
}
LEFT_OUT = ("joshuaHe/", "HuggingFaceTB/")  # a recipe's private SFT, the embedded CPU model


def cell(model: str, inventory: str, extra: list[str]) -> str:
    """What the planner makes of `model` on one machine: the predicted peak per card and what it chose."""
    pairs = [
        f"recipe={RECIPE}",
        f"MODEL={model}",
        f"INVENTORY={ROOT / 'examples' / 'inventories' / inventory}.json",
        "RUN_NAME=fits",
        *extra,
    ]
    try:
        r = recipe_mod.load(pairs, {}, recipe_mod.RECIPES_DIR)
    except BadInput as exc:
        return f"refused: {exc.problems[0].message}"
    gathered = host.gather(r, {}, probe_plugins=False)
    facts = dataclasses.replace(
        gathered,
        ports=Ports(rollout_first_free=8000, ephemeral=29999),
        importable=gathered.importable | {"bitsandbytes"},  # in the lock: the table is the image's
    )
    plan = plan_mod.build(
        r, hardware.load(str(ROOT / "examples" / "inventories" / f"{inventory}.json")), facts
    )
    fatal = [p for p in plan.problems if p.fatal]
    if fatal:
        return "no: " + fatal[0].message.split(":")[0]
    refused = [p for p in values.check_quantization(plan, facts, lambda key: key) if p.fatal]
    if refused:
        return "no: " + refused[0].message.split(":")[0]
    if any(p.fatal for p in memory_check.check(plan)):
        return (
            "no: "
            + " + ".join(f"{e.peak_gib:.1f}" for e in plan.budget.estimates(plan.layout))
            + " GiB predicted"
        )
    peaks = " + ".join(f"{e.peak_gib:.1f}" for e in plan.budget.estimates(plan.layout))
    a = plan.recipe.trainer_args
    how = [f"micro-batch {a.per_device_train_batch_size}"]
    if (
        plan.recipe.raw("OFFLOAD_MODEL") == "true"
        and plan.recipe.origin("OFFLOAD_MODEL") is recipe_mod.Origin.PLANNER
    ):
        how.append("one weight copy")
    tight = any(e.headroom < 0.10 for e in plan.budget.estimates(plan.layout))
    return f"{'yes, tight' if tight else 'yes'}: {peaks} GiB, {', '.join(how)}"


def rows() -> list[str]:
    """The table's markdown lines."""
    names = list(MACHINES)
    out = [
        f"| Model | Parameters | {' | '.join(names)} | GPU evidence |",
        "|---|---|" + "---|" * len(names) + "---|",
    ]
    for model, config in memory.shipped_configs().items():
        if model.startswith(LEFT_OUT):
            continue
        dims = memory.ModelDims.from_config(config)
        cells = [cell(model, *MACHINES[name]) for name in names]
        out.append(
            f"| {model} | {dims.params / 1e9:.1f} B | {' | '.join(cells)} | "
            f"{EVIDENCE.get(model, 'planned only')} |"
        )
    return out


def table() -> str:
    return "\n".join([START, *rows(), END])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite the README's table")
    group.add_argument("--check", action="store_true", help="exit 1 when the README's table differs")
    args = parser.parse_args()
    text = README.read_text()
    if not (args.write or args.check):
        print(table())
        return 0
    if START not in text or END not in text:
        print(f"README.md has no {START} ... {END} block", file=sys.stderr)
        return 1
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    new = before + table() + after
    if args.write:
        README.write_text(new)
    elif new != text:
        print(
            "README.md's model table differs from the planner's: run `python scripts/fits_table.py --write`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
