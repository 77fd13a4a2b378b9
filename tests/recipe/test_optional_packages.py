"""One rule for optional packages (recipe/optional.py, preflight/packages.py): every recipe value whose code
path imports a package is refused in seconds where the package cannot be imported, naming it and the values
that work without it; the table is checked against the installed ms-swift and transformers so that a new
optional import cannot be missed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from entrypoint.plan import build as plan_mod
from entrypoint.preflight import packages
from entrypoint.recipe import optional, swift_schema
from entrypoint.world import host
from tests.conftest import facts_for, load_inventory, load_recipe, refused


def _installed_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        pytest.skip(f"{module} is not installed in this environment")
    return Path(spec.origin).parent


@pytest.mark.cli  # parses every ms-swift source file (AST, no import): a few seconds
def test_committed_walk_matches_the_installed_code():
    fresh = optional.generate(_installed_dir("transformers"), _installed_dir("swift"))
    assert fresh == json.loads(optional.DATA_FILE.read_text()), (
        "regenerate: python -m entrypoint.recipe.optional --write"
    )


def test_the_walk_finds_the_imports_behind_the_values_users_set():
    data = optional.generated()
    assert data["optim"]["paged_adamw_8bit"] == ["bitsandbytes"] and data["optim"]["adamw_torch"] == []
    assert data["optim"]["adamw_torch_8bit"] == ["torchao"] and data["optim"]["lomo"] == ["lomo_optim"]
    assert data["report_to"]["swanlab"] == ["swanlab"] and data["report_to"]["wandb"] == ["wandb"]
    assert data["report_to"]["tensorboard"] == ["tensorboard|tensorboardX"]


def test_every_choice_of_an_enumerated_key_is_classified():
    """A value ms-swift accepts is either in the table (it needs a package) or known to need nothing: a new
    optimizer, attention, quantization method or tuner backend in a lock bump fails here until classified."""
    rlhf = swift_schema.load("rlhf")
    in_table: dict[str, set[str]] = {}
    for need in optional.needs():
        in_table.setdefault(need.key, set()).update(need.values or ())
    walked_optim = set(optional.generated()["optim"])
    for key in ("OPTIM", "ATTN_IMPL", "QUANT_METHOD", "TUNER_BACKEND"):
        for choice in rlhf[key.lower()].choices:
            known = in_table.get(key, set()) | optional.NEEDS_NOTHING.get(key, set())
            if key == "OPTIM":
                known |= walked_optim  # every optimizer has a walked branch, with or without imports
            assert choice in known, f"{key}={choice}: classify it in recipe/optional.py"
    for integration, modules in optional.generated()["report_to"].items():
        assert modules or integration in optional.REPORT_TO_FALLBACK, integration
    assert set(optional.NEEDS_NOTHING["REPORT_TO"]) == {"none", "all"}


def test_every_optional_import_of_ms_swift_is_accounted_for():
    """Each third-party module ms-swift's source imports that this environment cannot import is reached by
    a value in the table, or is listed in NOT_REACHED with why no GRPO recipe value reaches it."""
    named = {m for need in optional.needs() for group in need.modules for m in group.split("|")}
    named_tops = {m.split(".")[0] for m in named}
    unaccounted = []
    for module, where in optional.generated()["swift_imports"].items():
        if importlib.util.find_spec(module) is not None:
            continue
        if module not in named_tops and module not in optional.NOT_REACHED:
            unaccounted.append(f"{module} ({', '.join(where)})")
    assert not unaccounted, "add to recipe/optional.py (NEEDS or NOT_REACHED): " + "; ".join(unaccounted)


def _problems(
    *pairs: str, importable: set[str] | None = None, environ: dict | None = None, drop: set[str] = frozenset()
):
    r = load_recipe("recipe=smoke", *pairs, environ=environ)
    facts = facts_for(r, environ)
    found = (facts.importable - drop) if importable is None else frozenset(importable)
    facts = facts_for(r, environ, importable=found)
    plan = plan_mod.build(r, load_inventory("5x4090-driver535"), facts)
    return packages.check(plan, facts)


@pytest.mark.parametrize(
    ("pair", "module", "package", "works"),
    [
        ("REPORT_TO=tensorboard swanlab", "swanlab", "swanlab", "REPORT_TO=tensorboard (these work here:"),
        ("OPTIM=adamw_torch_4bit", "torchao", "torchao", "adamw_torch"),
        ("ATTN_IMPL=flash_attn", "flash_attn", "flash-attn", "ATTN_IMPL=sdpa"),
        ("TUNER_BACKEND=unsloth", "unsloth", "unsloth", "TUNER_BACKEND=peft"),
        ("QUANT_METHOD=hqq", "hqq", "hqq", "remove QUANT_METHOD and QUANT_BITS"),
    ],
)
def test_a_value_whose_package_is_missing_is_refused_naming_it_and_what_works(pair, module, package, works):
    found = _problems(pair, drop={module})
    assert len(found) == 1, found
    p = found[0]
    assert p.fatal and p.where.startswith(pair.split()[0].split("=")[0])
    assert f"needs the {package} package" in p.message and "would fail after the start-up" in p.message
    assert "does not hold it" in p.message
    assert works in p.fix and "requirements/runtime.in" in p.fix
    assert not _problems(pair, importable=set(optional.modules())), "passes once the package is importable"


@pytest.mark.parametrize(
    ("pair", "module", "package"),
    [
        ("OPTIM=paged_adamw_8bit", "bitsandbytes", "bitsandbytes"),
        ("QUANT_METHOD=bnb QUANT_BITS=4", "bitsandbytes", "bitsandbytes"),
        ("USE_LIGER_KERNEL=true", "liger_kernel", "liger-kernel"),
        ("DEEPSPEED=zero2", "deepspeed", "deepspeed"),
    ],
)
@pytest.mark.parametrize(("in_container", "mend"), [(False, "make venv"), (True, "make build")])
def test_a_locked_package_this_python_lacks_is_a_venv_or_image_to_sync_not_a_package_to_add(
    pair, module, package, in_container, mend
):
    """A venv or image older than the lock: the package is there to be had by syncing from the lock, not by
    editing it (which the message said of deepspeed, liger-kernel and bitsandbytes, all in the lock)."""
    r = load_recipe("recipe=smoke", *pair.split())
    facts = facts_for(r)
    assert facts.locked is not None and optional.normalised(package) in facts.locked
    facts = facts_for(r, importable=facts.importable - {module}, in_container=in_container)
    found = [p for p in packages.check(plan_mod.build(r, load_inventory("1x4090-driver535"), facts), facts)]
    assert len(found) == 1, found
    p = found[0]
    assert p.kind == "local" and p.where.startswith(pair.split("=")[0])
    assert f"{module} cannot be imported by this Python, though the image's lock" in p.message
    assert f"holds {package}" in p.message and mend in p.fix and "runtime.in" not in p.fix


def test_without_a_lock_file_the_message_does_not_claim_what_the_lock_holds(tmp_path):
    r = load_recipe("recipe=smoke", "REPORT_TO=swanlab")
    assert host.locked_packages(tmp_path / "runtime.lock") is None
    facts = facts_for(r, importable=facts_for(r).importable - {"swanlab"}, locked=None)
    (p,) = packages.check(plan_mod.build(r, load_inventory("5x4090-driver535"), facts), facts)
    assert "no requirements/runtime.lock here" in p.message and "does not hold" not in p.message


def test_report_to_swanlab_is_refused_in_seconds(tmp_path):
    if importlib.util.find_spec("swanlab") is not None:
        pytest.skip("swanlab is installed here")
    err = refused(tmp_path, "recipe=smoke", "REPORT_TO=swanlab")
    assert "error: REPORT_TO=swanlab (command line): needs the swanlab package" in err
    assert "REPORT_TO=none (these work here: " in err and "tensorboard" in err


@pytest.mark.parametrize(
    ("environ", "refused_here"),
    [
        ({"GRPO_RIG_VERSION": "1"}, True),  # the container: no ~/.netrc of a `wandb login`
        ({"GRPO_RIG_VERSION": "1", "WANDB_API_KEY": "k" * 40}, False),
        ({"GRPO_RIG_VERSION": "1", "WANDB_MODE": "offline"}, False),
        ({}, False),  # a host: a warning, since `wandb login` may have stored a key
    ],
)
def test_wandb_without_a_key_is_refused_in_the_container_and_warned_on_a_host(environ, refused_here):
    found = [
        p
        for p in _problems("REPORT_TO=wandb", importable={"wandb", "tensorboard", "vllm"}, environ=environ)
        if p.where == "REPORT_TO=wandb"
    ]
    assert [p.fatal for p in found] == ([True] if refused_here else ([False] if not environ else []))
    if found:
        assert "WANDB_API_KEY" in found[0].message and "WANDB_MODE=offline" in found[0].fix
    assert not _problems("REPORT_TO=wandb", "WANDB_MODE=offline", importable={"wandb"}, environ=environ)
