"""One rule for optional packages: a recipe value whose code path imports a package must find it here.

The table is recipe/optional.py (QUANT_METHOD, OPTIM, REPORT_TO, ATTN_IMPL, TUNER_BACKEND, DEEPSPEED, ...);
host.gather looked its modules up with importlib.util.find_spec in the launcher's interpreter, which is the
image's (or the venv installed from the same lock). A value whose modules are missing would fail after the
start-up, once the model has loaded: refused in seconds, naming the package and the values that work
without it; a package the lock holds (host.locked_packages) is a venv or image not synced from it, which
`make venv` or `make build` mends (a local problem: `plan` warns, `validate` refuses). And wandb without a
key: a run with no terminal cannot log in, so wandb stops it at the first log line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from entrypoint.errors import LOCAL, Problem
from entrypoint.recipe import optional, swift_schema

if TYPE_CHECKING:
    from entrypoint.facts.facts import Facts
    from entrypoint.plan.build import Plan

LOCK = "requirements/runtime.lock"
# How to do without the package, by key; keys with choices also list the values that work here.
WITHOUT = {
    "QUANT_METHOD": "remove QUANT_METHOD and QUANT_BITS to train bf16",
    "ATTN_IMPL": "ATTN_IMPL=sdpa (PyTorch's fused attention, no package), or remove ATTN_IMPL",
    "TUNER_BACKEND": "TUNER_BACKEND=peft (ms-swift's default)",
    "TRAIN_TYPE": "TRAIN_TYPE=lora",
    "INIT_WEIGHTS": "remove INIT_WEIGHTS (LoRA's default initialisation)",
    "DEEPSPEED": "remove DEEPSPEED",
}


def check(plan: Plan, facts: Facts) -> list[Problem]:
    r = plan.recipe
    schema = swift_schema.load("rlhf")
    defaults = {name: spec.default for name, spec in schema.items()}
    problems: list[Problem] = []
    for need, value in optional.asked(r.trainer, defaults):
        missing = need.missing(facts.importable)
        if not missing:
            continue
        source = r.source(need.key) if need.key.lower() in r.trainer else "ms-swift's default"
        where = f"{need.key}={value} ({source})" if need.values else f"{need.key} ({source})"
        modules = " and ".join(m.replace("|", " or ") for m in missing)
        if facts.locked is not None and optional.normalised(need.package) in facts.locked:
            problems.append(
                Problem(
                    where,
                    f"{modules} cannot be imported by this Python, though the image's lock ({LOCK}) holds "
                    f"{need.package}: {need.what} would fail after the start-up [source: {need.source}]",
                    "rebuild the image (make build)"
                    if facts.in_container
                    else "re-sync the virtualenv from the lock (make venv)",
                    kind=LOCAL,
                )
            )
            continue
        held = (
            f"the image's lock, {LOCK}, does not hold it" if facts.locked is not None else f"no {LOCK} here"
        )
        problems.append(
            Problem(
                where,
                f"needs the {need.package} package ({modules} cannot be imported here; {held}): "
                f"{need.what} would fail after the start-up [source: {need.source}]",
                _fix(need, value, r.trainer, facts, schema),
            )
        )
    return problems + _wandb_login(r.trainer, r.env, defaults, facts)


def _fix(need: optional.Need, value: str, trainer, facts: Facts, schema) -> str:
    key = need.key
    install = f"; or add {need.package} to requirements/runtime.in, re-lock and rebuild the image"
    if key == "REPORT_TO":
        kept = [v for v in trainer.get("report_to", []) if v != value]
        here = optional.working(key, sorted(optional.generated()["report_to"]), facts.importable)
        return (
            f"REPORT_TO={' '.join(kept) or 'none'} (these work here: {', '.join(here) or 'none'})" + install
        )
    spec = schema.get(key.lower())
    if spec is not None and spec.type == "bool":
        return f"{key}=false{install}"
    choices = list(spec.choices) if spec is not None and spec.choices else []
    here = [c for c in optional.working(key, choices, facts.importable) if c != "None"]
    listed = (
        f"{key}=<one that works here: {', '.join(here[:10])}{' ...' if len(here) > 10 else ''}>"
        if here
        else ""
    )
    return ("; ".join(t for t in (WITHOUT.get(key, ""), listed) if t) or f"remove {key}") + install


WANDB_OFF = ("offline", "disabled", "dryrun")


def _wandb_login(trainer, env, defaults, facts: Facts) -> list[Problem]:
    """REPORT_TO=wandb needs WANDB_API_KEY (or a key `wandb login` stored in ~/.netrc, or WANDB_MODE=offline):
    without one, wandb.init in a process with no terminal raises at the first log line, after the model loaded
    (wandb's 'api_key not configured (no-tty)')."""
    report_to = trainer.get("report_to") or defaults.get("report_to") or []
    if "wandb" not in report_to or "wandb" not in facts.importable:
        return []
    mode = (env.get("WANDB_MODE") or facts.env.get("WANDB_MODE") or "").lower()
    if "WANDB_API_KEY" in facts.secrets_set or mode in WANDB_OFF or facts.env.get("WANDB_DISABLED"):
        return []
    fix = (
        "export WANDB_API_KEY in the environment you start it from (never in a recipe), or "
        "WANDB_MODE=offline to log to the run directory and `wandb sync` later, or REPORT_TO=tensorboard"
    )
    if facts.in_container:
        return [
            Problem(
                "REPORT_TO=wandb",
                "WANDB_API_KEY is not set and the container has no `wandb login` of its "
                "own: wandb would stop the run at its first log line, after the model loaded",
                fix,
            )
        ]
    return [
        Problem(
            "REPORT_TO=wandb",
            "WANDB_API_KEY is not set: unless `wandb login` stored a key in ~/.netrc, "
            "wandb stops the run at its first log line, after the model loaded",
            fix,
            fatal=False,
        )
    ]
