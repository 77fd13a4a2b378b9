"""GPU layout: which GPUs train, which serve the vLLM rollout, and in which mode.

Modes (`Layout.mode`):
    cpu       no GPU: the trainer generates with HF `generate` on the CPU (the smoke recipe)
    hf        GPUs train and generate with HF `generate` (USE_VLLM=false)
    colocate  every training rank builds its own vLLM engine on its own GPU (USE_VLLM=true, no
              ROLLOUT_GPUS); ms-swift's sleep/offload keys share the card
    server    a `swift rollout` process on dedicated ROLLOUT_GPUS (data parallel across them), the trainer
              on TRAIN_GPUS with --vllm_mode server; or, with ROLLOUT_HOST, a rollout on another node

ms-swift 3.6.4 asserts the trainer process sees exactly NPROC_PER_NODE GPUs (`is_mp()`,
v3.6.4:swift/utils/env.py:71-81, "GRPO with vLLM is not compatible with device_map",
rlhf_args.py:257-259), so the trainer gets CUDA_VISIBLE_DEVICES=<training GPUs> and the rollout a
disjoint CUDA_VISIBLE_DEVICES=<rollout GPUs> (case C05, tests/cases.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Literal

from entrypoint.errors import Problem
from entrypoint.facts.inventory import Inventory
from entrypoint.recipe.keys import COLOCATE_ONLY, COLOCATE_ONLY_SOURCE, COLOCATED_KEY
from entrypoint.recipe.load import Choice, Origin, Recipe

DOCKER_RENUMBERING = (
    "Ordinals are the container's: Docker numbers the GPUs it exposes from 0, whatever their host "
    "numbers (compose `device_ids: ['1', '2']` appear inside as 0 and 1)."
)
NO_GPU_HELP = (
    "No GPU is visible inside the container ({error}). Give the service the GPUs in compose.yaml "
    "(deploy.resources.reservations.devices: - driver: nvidia, count: all, capabilities: [gpu, compute, "
    "utility]) or `docker run --gpus all`, and install the NVIDIA Container Toolkit on the host "
    "(nvidia-ctk runtime configure --runtime=docker, then restart Docker). `nvidia-smi` on the host must "
    "work first."
)
NO_GPU_HERE = (
    "No GPU is visible on this machine ({error}), and this is not the grpo-rig image. To plan or validate "
    "for a GPU machine from here, describe it: INVENTORY=examples/inventories/{example} ({others}; or "
    "`python -m entrypoint doctor --save-inventory FILE` on that machine). To train, run inside "
    "the image on the GPU host (`docker compose run train recipe=...`)."
)
# The example machines, by the GPUs a recipe names (examples/inventories/)
EXAMPLE_INVENTORIES = {1: "1x4090-driver535.json", 2: "2x4090-driver535.json", 5: "5x4090-driver535.json"}


# cpu: no GPU; hf: GPUs, HF generation in the trainer; colocate: vLLM on the training GPUs; server: a
# `swift rollout` server on its own GPUs (here or on another node)
Mode = Literal["cpu", "hf", "colocate", "server"]


@dataclasses.dataclass(frozen=True)
class Layout:
    mode: Mode
    train_gpus: tuple[int, ...]
    rollout_gpus: tuple[int, ...]  # local rollout server GPUs (server mode on this node)
    rollout_host: str  # where the trainer finds the rollout server ("" unless server mode)
    rollout_tp: int = 1
    rollout_dp: int = 1

    @property
    def nproc_per_node(self) -> int:
        return max(1, len(self.train_gpus))

    @property
    def used_gpus(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.train_gpus) | set(self.rollout_gpus)))

    @property
    def local_rollout(self) -> bool:
        return self.mode == "server" and bool(self.rollout_gpus)

    def describe(self) -> str:
        if self.mode == "cpu":
            return "cpu: no GPU; HF generation inside the trainer"
        text = (
            f"{self.mode}: training on GPU(s) {_fmt(self.train_gpus)} (NPROC_PER_NODE={self.nproc_per_node})"
            if self.train_gpus or self.mode != "server"
            else f"{self.mode}: no training on this node"
        )
        if self.local_rollout:
            text += (
                f"; vLLM rollout server on GPU(s) {_fmt(self.rollout_gpus)} (tp={self.rollout_tp}, "
                f"dp={self.rollout_dp})"
            )
        elif self.mode == "server":
            text += f"; remote vLLM rollout server at {self.rollout_host}"
        elif self.mode == "colocate":
            text += "; vLLM colocated on each training GPU"
        else:
            text += "; HF generation inside the trainer"
        return text


def _fmt(gpus: tuple[int, ...]) -> str:
    return ",".join(map(str, gpus)) if gpus else "none"  # a sentence never reads "on GPU(s) -"


def is_loopback(address: str) -> bool:
    return address in ("localhost", "::1") or address.startswith("127.")


def connect_address(bind: str) -> str:
    """Where a local client reaches a server bound to `bind` (a wildcard bind is reached on loopback)."""
    return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind


def _ordinal(part: str) -> int:
    """One GPU ordinal; the spellings users bring from other tools are named (cuda:1, a UUID, -1)."""
    if part.isdigit():
        return int(part)
    if part.lower().startswith("cuda:") and part[5:].isdigit():
        raise ValueError(f"{part} is torch's device name: write the ordinal alone ({part[5:]})")
    if part.upper().startswith(("GPU-", "MIG-")):
        raise ValueError(
            f"{part} is a UUID: write the GPU's ordinal (`python -m entrypoint doctor` lists them)"
        )
    if part.lstrip("-").isdigit():
        raise ValueError(
            f"{part}: ordinals start at 0 (no GPU to train on: TRAIN_GPUS=none; no rollout GPU: leave "
            "ROLLOUT_GPUS empty)"
        )
    raise ValueError(f"{part} is not a GPU ordinal")


def _entries(text: str) -> list[str]:
    """A GPU list's entries, separated by commas or spaces as the recipe's other lists are ('0,1', '0 1',
    '0, 1'); a range keeps its dash whatever the spaces around it ('1 - 3')."""
    return [p for p in re.split(r"[,\s]+", re.sub(r"\s*-\s*", "-", text.strip())) if p]


def parse_ordinals(text: str) -> list[int]:
    """'0,1', '0 1', '0-3', '2' -> ordinals. Raises ValueError (naming the part and its fix) on anything
    else."""
    out: list[int] = []
    for part in _entries(text):
        lo, dash, hi = part.partition("-")
        if dash and lo.isdigit() and hi.isdigit():
            start, end = int(lo), int(hi)
            if end < start:
                raise ValueError(f"range {part} runs backwards")
            out.extend(range(start, end + 1))
        else:
            out.append(_ordinal(part))
    twice = sorted({o for o in out if out.count(o) > 1})
    if twice:
        raise ValueError(f"GPU {', '.join(map(str, twice))} is listed twice")
    return out


def decide(
    recipe: Recipe,
    inventory: Inventory,
    env: Mapping[str, str],
    rollout_only: bool = False,
    problems: list[Problem] | None = None,
    in_container: bool = True,
) -> Layout | None:
    """Place the run on the inventory's GPUs; None when no placement is possible. Problems are appended
    to `problems`.

    `env`: the environment variables host.gather read (CUDA_VISIBLE_DEVICES). `rollout_only`: this node
    only serves the rollout (`python -m entrypoint rollout`) for trainers on other nodes (their
    ROLLOUT_HOST); nothing trains here.
    """
    found: list[Problem] = []
    layout = _place(recipe, inventory, env, rollout_only, found, in_container)
    if problems is not None:
        problems.extend(found)
    return layout


# A fix for a GPU list: (the key, the ordinals the user meant where torch's names spell them) -> the fix
Fixer = Callable[[str, list[int] | None], str]


def _place(
    recipe: Recipe,
    inventory: Inventory,
    env: Mapping[str, str],
    rollout_only: bool,
    problems: list[Problem],
    in_container: bool = True,
    fixes: bool = True,
) -> Layout | None:
    """`fixes`: a refused GPU list gets a fix found by placing candidates (_placing_fix); False while placing
    one, so that a candidate's own faults are not searched in turn."""
    _warn_visible_devices(env, problems)
    use_vllm = recipe.trainer_args.use_vllm
    if not _gpus_there(recipe, inventory, use_vllm, problems, in_container):
        return None

    def fix(key: str, wanted: list[int] | None) -> str:
        return _placing_fix(recipe, inventory, env, rollout_only, in_container, key, wanted) if fixes else ""

    s = recipe.settings
    rollout = (
        _ordinals(recipe, inventory, "ROLLOUT_GPUS", s.ROLLOUT_GPUS.strip(), problems, fix)
        if s.ROLLOUT_GPUS.strip()
        else []
    )
    _check_bind(recipe, rollout, problems)
    if rollout_only and rollout is not None:
        return _rollout_only(recipe, inventory, rollout, problems)
    train = _training_gpus(recipe, inventory, rollout, problems, fix)
    if train is None or rollout is None:
        return None
    mode = _mode(recipe, len(inventory.gpus), train, rollout, use_vllm, problems)
    _check_parallel_sizes(recipe, mode, train, rollout, problems)
    _check_mode_keys(recipe, mode, rollout_only, problems)
    tp = recipe.rollout_args.tensor_parallel_size
    host = s.ROLLOUT_HOST or (connect_address(s.ROLLOUT_BIND) if rollout else "")
    return Layout(
        mode=mode,
        train_gpus=tuple(train),
        rollout_gpus=tuple(rollout),
        rollout_host=host if mode == "server" else "",
        rollout_tp=tp,
        rollout_dp=max(1, len(rollout) // tp) if rollout else 1,
    )


def _warn_visible_devices(env: Mapping[str, str], problems: list[Problem]) -> None:
    if "CUDA_VISIBLE_DEVICES" in env:
        problems.append(
            Problem(
                "CUDA_VISIBLE_DEVICES (environment)",
                f"is set to {env['CUDA_VISIBLE_DEVICES']!r}; the entrypoint replaces it for each process",
                "select GPUs with TRAIN_GPUS / ROLLOUT_GPUS, or hide them from the container with compose "
                "device_ids",
                fatal=False,
            )
        )


def no_gpu_text(inventory: Inventory, in_container: bool, gpus: int = 1) -> str:
    """What to do when NVML lists no GPU: expose them to the container, or describe the GPU machine; the
    example inventory offered has at least the `gpus` the recipe names (new-user walk: a 2-GPU import was
    offered the 1-GPU file, then told GPU 1 does not exist)."""
    size = min((n for n in EXAMPLE_INVENTORIES if n >= gpus), default=max(EXAMPLE_INVENTORIES))
    others = ", ".join(
        f"{f} for {n} GPU{'s' if n > 1 else ''}" for n, f in EXAMPLE_INVENTORIES.items() if n != size
    )
    return (NO_GPU_HELP if in_container else NO_GPU_HERE).format(
        error=inventory.nvml_error or "NVML lists no device", example=EXAMPLE_INVENTORIES[size], others=others
    )


def named_gpus(recipe: Recipe) -> int:
    """How many GPUs TRAIN_GPUS and ROLLOUT_GPUS name together (1 when they name none, or `all`)."""
    named: set[int] = set()
    for key in ("TRAIN_GPUS", "ROLLOUT_GPUS"):
        try:
            named |= set(parse_ordinals(getattr(recipe.settings, key)))
        except ValueError:  # `all`, `none`, or a refused value (its own problem)
            continue
    return max(1, len(named))


def _gpus_there(
    recipe: Recipe, inventory: Inventory, use_vllm: bool, problems: list[Problem], in_container: bool = True
) -> bool:
    """Only an explicit TRAIN_GPUS=none asks for the CPU: `all` (the default) on a machine with no GPU is
    the missing-GPU fault (C03), not a request to train slowly on the CPU."""
    s = recipe.settings
    wants_gpu = use_vllm or bool(s.ROLLOUT_GPUS.strip()) or s.TRAIN_GPUS.strip().lower() not in ("none", "")
    if inventory.gpus or not wants_gpu:
        return True
    why = "USE_VLLM=true" if use_vllm else f"TRAIN_GPUS={s.TRAIN_GPUS} ({recipe.source('TRAIN_GPUS')})"
    if inventory.source.startswith("file:") and not inventory.nvml_error:  # the machine it describes
        text = f"The inventory {inventory.source.removeprefix('file:')} lists no GPU."
        fix = (
            "give an inventory of the GPU machine (`python -m entrypoint doctor --save-inventory FILE` there)"
        )
    else:
        text = no_gpu_text(inventory, in_container, named_gpus(recipe))
        fix = (
            "fix the GPU exposure above"
            if in_container
            else "to plan or validate for a GPU machine from here, add "
            "INVENTORY=examples/inventories/<machine>.json; to train, run on that machine"
        )
    problems.append(
        Problem(
            "GPU",
            text + f" This recipe needs one ({why}).",
            f"{fix}; for a CPU run set TRAIN_GPUS=none (recipe=smoke does)",
        )
    )
    return False


def _ordinals(
    recipe: Recipe, inventory: Inventory, key: str, text: str, problems: list[Problem], fix: Fixer
) -> list[int] | None:
    visible = [g.index for g in inventory.gpus]
    where = f"{key} ({recipe.source(key)})"
    listed = ". Visible:\n    " + inventory.table().replace("\n", "\n    ")
    spelled = ""  # torch's names for GPUs that are not there: said before the list of those that are
    try:
        values = parse_ordinals(text)
    except ValueError as exc:
        meant = torch_ordinals(text)
        if meant is None:
            problems.append(Problem(where, f"{text!r}: {exc}{listed}", fix(key, None)))
            return None
        # the ordinal torch's name holds is no fix by itself: it may not exist, or serve the other role
        spelled = f"{text!r} uses torch's device names; GPU lists take the ordinals alone"
        if set(meant) <= set(visible):
            problems.append(Problem(where, spelled + listed, fix(key, meant)))
            return None
        values, spelled = meant, spelled + ", and "
    unknown = [v for v in values if v not in visible]
    if unknown:
        problems.append(
            Problem(
                where,
                spelled
                + (
                    f"GPU {unknown[0]} does not exist"
                    if len(unknown) == 1
                    else f"GPUs {', '.join(map(str, unknown[:-1]))} and {unknown[-1]} do not exist"
                )
                + (
                    f" on the machine {inventory.source[5:]} describes"
                    if inventory.source.startswith("file:")
                    else " in this container"
                )
                + listed
                + f"\n  {DOCKER_RENUMBERING}",
                fix(key, None),
            )
        )
        return None
    return values


def torch_ordinals(text: str) -> list[int] | None:
    """The ordinals a GPU list means where torch's device names spell some of them ('cuda:1,2' -> [1, 2]);
    None where something else is wrong with it (parse_ordinals says what)."""
    parts = _entries(text)
    plain = [p[len("cuda:") :] if p.lower().startswith("cuda:") else p for p in parts]
    try:
        return parse_ordinals(",".join(plain))
    except ValueError:
        return None


def _spell(gpus: list[int]) -> str:
    """Ordinals as a recipe writes them: runs as ranges ([0, 1, 2, 3] -> 0-3, [0, 2] -> 0,2)."""
    runs: list[list[int]] = []
    for g in sorted(gpus):
        if runs and g == runs[-1][-1] + 1:
            runs[-1].append(g)
        else:
            runs.append([g])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _placing_fix(
    recipe: Recipe,
    inventory: Inventory,
    env: Mapping[str, str],
    rollout_only: bool,
    in_container: bool,
    key: str,
    wanted: list[int] | None,
) -> str:
    """What to write instead of a GPU list that is refused: the first candidate (the user's own GPUs in
    ordinals, then layouts of the visible GPUs) whose placement is refused by nothing, as a fix of the memory
    plan is checked by planning it (preflight/memory_check). Tried, not guessed: 'ROLLOUT_GPUS=cuda:2' on two
    GPUs was told to write 2, which does not exist, and 'leave ROLLOUT_GPUS empty' led into the refusal of
    the recipe's rollout-server keys."""
    visible = [g.index for g in inventory.gpus]
    if not visible:
        return "expose GPUs first"
    # the other placement key's torch names are read as meant: its own problem names that fix
    other = "TRAIN_GPUS" if key == "ROLLOUT_GPUS" else "ROLLOUT_GPUS"
    written = getattr(recipe.settings, other)
    meant = torch_ordinals(written) if ":" in written else None
    base = {other: _spell(meant)} if meant else {}
    for changes, say in _candidates(recipe, key, wanted, visible, rollout_only):
        tried, found = _following(recipe, {**base, **changes}), []
        placed = _place(tried, inventory, env, rollout_only, found, in_container, fixes=False)
        if placed is not None and not any(p.fatal for p in found):
            return say
    return f"use ordinals from the list above ({_spell(visible)}), each GPU for one role"


def _candidates(
    recipe: Recipe, key: str, wanted: list[int] | None, visible: list[int], rollout_only: bool
) -> Iterator[tuple[dict[str, str], str]]:
    """(values to write, the fix that says so) to try in order for a refused TRAIN_GPUS or ROLLOUT_GPUS: the
    ordinals meant (cuda:1 -> 1), then a layout of the visible GPUs (a rollout server needs a GPU of its
    own, so one GPU means vLLM colocated, its server keys moved to colocated vLLM's)."""
    if wanted and set(wanted) <= set(visible):
        yield {key: _spell(wanted)}, f"write {key}={_spell(wanted)}"
    if key == "ROLLOUT_GPUS" and rollout_only:
        yield {key: str(visible[0])}, f"for example ROLLOUT_GPUS={visible[0]} (the list above)"
        return
    rest, last = _spell(visible[:-1]), str(visible[-1])
    if key == "ROLLOUT_GPUS":
        if len(visible) > 1:
            yield (
                {"ROLLOUT_GPUS": last, "TRAIN_GPUS": rest},
                f"for example ROLLOUT_GPUS={last} with TRAIN_GPUS={rest} (the list above; each needs its "
                "own)",
            )
        yield _colocating(recipe, visible)
        return
    rollout = torch_ordinals(recipe.settings.ROLLOUT_GPUS) or []
    free = [g for g in visible if g not in rollout]
    if free:
        less = ", less ROLLOUT_GPUS" if rollout else ""
        yield {"TRAIN_GPUS": _spell(free)}, f"for example TRAIN_GPUS={_spell(free)} (the list above{less})"
    if recipe.settings.ROLLOUT_GPUS.strip() and len(visible) > 1:
        yield (
            {"TRAIN_GPUS": rest, "ROLLOUT_GPUS": last},
            f"for example TRAIN_GPUS={rest} with ROLLOUT_GPUS={last} (the list above; each needs its own)",
        )
    elif recipe.settings.ROLLOUT_GPUS.strip():  # one GPU: no room for a server (the fix says TRAIN_GPUS)
        yield _colocating(recipe, visible)


def _colocating(recipe: Recipe, visible: list[int]) -> tuple[dict[str, str], str]:
    """The candidate without a rollout server: ROLLOUT_GPUS empty, the recipe's server keys moved to colocated
    vLLM's (or removed), the one GPU training."""
    moved, said = _moved_to_colocated(recipe)
    if len(visible) > 1:
        return {
            "ROLLOUT_GPUS": "",
            **moved,
        }, "leave ROLLOUT_GPUS empty to colocate vLLM on the training GPUs" + said
    lead = (
        f"leave ROLLOUT_GPUS empty: with one GPU vLLM runs colocated on it (TRAIN_GPUS={visible[0]}); a "
        "rollout server needs a GPU of its own"
    )
    return {"ROLLOUT_GPUS": "", "TRAIN_GPUS": str(visible[0]), **moved}, lead + said


def _moved_to_colocated(recipe: Recipe) -> tuple[dict[str, str], str]:
    """The changes that move the recipe's rollout-server keys to colocated vLLM's (ROLLOUT_MAX_MODEL_LEN ->
    VLLM_MAX_MODEL_LEN; "" removes one that has none), and the words that say so after a fix."""
    changes: dict[str, str] = {}
    moved, removed = [], []
    for k in _server_keys(recipe):
        changes[k] = ""
        if k in COLOCATED_KEY and recipe.trainer_args.use_vllm:
            changes[COLOCATED_KEY[k]] = recipe.raw(k) or ""
            moved.append(f"{k}={recipe.raw(k)} as {COLOCATED_KEY[k]}={recipe.raw(k)}")
        else:
            removed.append(k)
    said = f"; write {', '.join(moved)} (colocated vLLM's keys)" if moved else ""
    said += f"; remove {', '.join(removed)} (a rollout server's only)" if removed else ""
    return changes, said


def _following(recipe: Recipe, changes: Mapping[str, str]) -> Recipe:
    """The recipe with `changes` written on the command line, "" unsetting a key: what following a fix
    gives."""
    unset = [k for k, v in changes.items() if v == "" and k not in ("TRAIN_GPUS", "ROLLOUT_GPUS")]
    return recipe.without(unset).with_values(
        Choice(k, v, "", Origin.COMMAND_LINE) for k, v in changes.items() if k not in unset
    )


def _check_bind(recipe: Recipe, rollout: list[int] | None, problems: list[Problem]) -> None:
    s = recipe.settings
    if rollout and not is_loopback(s.ROLLOUT_BIND) and not s.ROLLOUT_ALLOW_REMOTE:
        problems.append(
            Problem(
                f"ROLLOUT_BIND ({recipe.source('ROLLOUT_BIND')})",
                f"{s.ROLLOUT_BIND!r} is not loopback: the rollout server accepts weight updates and prompts "
                "from anyone who can reach it (no authentication in ms-swift 3.6.4)",
                "keep ROLLOUT_BIND=127.0.0.1, or set ROLLOUT_ALLOW_REMOTE=true on a trusted network",
            )
        )


def _rollout_only(
    recipe: Recipe, inventory: Inventory, rollout: list[int], problems: list[Problem]
) -> Layout:
    if not rollout:
        visible = [g.index for g in inventory.gpus]  # a fix names GPUs there are ("0-3" on one GPU did not)
        fix = f"set ROLLOUT_GPUS={visible[0]}" if visible else "expose GPUs first"
        fix += f" (or {_spell(visible)})" if len(visible) > 1 else ""
        problems.append(
            Problem("ROLLOUT_GPUS", "`rollout` serves on dedicated GPUs, and none are named", fix)
        )
    tp = recipe.rollout_args.tensor_parallel_size
    return Layout(
        mode="server",
        train_gpus=(),
        rollout_gpus=tuple(rollout),
        rollout_host=connect_address(recipe.settings.ROLLOUT_BIND),
        rollout_tp=tp,
        rollout_dp=max(1, len(rollout) // tp),
    )


def _training_gpus(
    recipe: Recipe, inventory: Inventory, rollout: list[int] | None, problems: list[Problem], fix: Fixer
) -> list[int] | None:
    text = recipe.settings.TRAIN_GPUS.strip().lower()
    if text in ("none", ""):
        return []
    if text == "all":
        return [g.index for g in inventory.gpus if g.index not in (rollout or [])]
    return _ordinals(recipe, inventory, "TRAIN_GPUS", recipe.settings.TRAIN_GPUS, problems, fix)


def _mode(
    recipe: Recipe,
    visible: int,
    train: list[int],
    rollout: list[int],
    use_vllm: bool,
    problems: list[Problem],
) -> Mode:
    """cpu, hf, colocate or server, and what makes the combination impossible."""
    s = recipe.settings
    if s.ROLLOUT_HOST and rollout:
        problems.append(
            Problem(
                "ROLLOUT_HOST",
                "set together with ROLLOUT_GPUS",
                "ROLLOUT_GPUS for a rollout here, ROLLOUT_HOST for one on another node; not both",
            )
        )
    if (rollout or s.ROLLOUT_HOST) and not use_vllm:
        problems.append(
            Problem(
                "ROLLOUT_GPUS" if rollout else "ROLLOUT_HOST",
                "a dedicated rollout server needs vLLM, but USE_VLLM is false",
                "set USE_VLLM=true, or drop the rollout keys to generate inside the trainer",
            )
        )
    overlap = sorted(set(train) & set(rollout))
    if overlap:
        problems.append(
            Problem(
                "ROLLOUT_GPUS",
                f"GPU {_fmt(tuple(overlap))} is listed for both training and the rollout server; in server "
                "mode each needs its own card",
                "list disjoint GPUs, or empty ROLLOUT_GPUS to colocate vLLM on the training GPUs",
            )
        )
    if rollout and not train and s.TRAIN_GPUS.strip().lower() not in ("none",):
        problems.append(
            Problem(
                "ROLLOUT_GPUS",
                f"leaves no GPU for training ({visible} visible, {len(rollout)} for the rollout)",
                "server mode needs at least 2 GPUs; on one GPU empty ROLLOUT_GPUS to colocate",
            )
        )
    if not train and use_vllm and not problems:
        problems.append(
            Problem("USE_VLLM", "vLLM needs a GPU, but the trainer runs on the CPU", "set USE_VLLM=false")
        )
    if not train:
        return "cpu"
    if rollout or s.ROLLOUT_HOST:
        return "server"
    return "colocate" if use_vllm else "hf"


def _check_parallel_sizes(
    recipe: Recipe, mode: str, train: list[int], rollout: list[int], problems: list[Problem]
) -> None:
    tp = recipe.rollout_args.tensor_parallel_size
    if rollout and len(rollout) % tp:
        problems.append(
            Problem(
                "ROLLOUT_TENSOR_PARALLEL_SIZE",
                f"{tp} does not divide the {len(rollout)} rollout GPUs",
                "choose a divisor",
            )
        )
    dp = recipe.rollout_args.data_parallel_size
    # a layer's value only: the entrypoint passes rollout GPUs / tp itself
    if rollout and "data_parallel_size" in recipe.rollout and dp * tp != len(rollout):
        problems.append(
            Problem(
                f"ROLLOUT_DATA_PARALLEL_SIZE ({recipe.source('ROLLOUT_DATA_PARALLEL_SIZE')})",
                f"{dp} engine(s) x tensor parallel {tp} is not the {len(rollout)} rollout GPU(s) "
                f"({_fmt(tuple(rollout))}); the server runs one engine per {tp} GPU(s) it is given",
                f"set ROLLOUT_DATA_PARALLEL_SIZE={len(rollout) // tp if len(rollout) >= tp else 1}, or leave "
                "it unset (the entrypoint derives it from ROLLOUT_GPUS)",
            )
        )
    colocate_tp = recipe.trainer_args.vllm_tensor_parallel_size
    if mode == "colocate" and len(train) % colocate_tp:
        problems.append(
            Problem(
                "VLLM_TENSOR_PARALLEL_SIZE",
                f"{colocate_tp} does not divide the {len(train)} training processes (ms-swift groups "
                "consecutive ranks)",
                "choose a divisor of the number of TRAIN_GPUS",
            )
        )


def _server_keys(recipe: Recipe) -> list[str]:
    """The rollout-server keys the recipe sets (ROLLOUT_GPUS aside), which a run without a server refuses."""
    return [
        k
        for k in recipe.values
        if (
            k.startswith("ROLLOUT_")
            and k != "ROLLOUT_GPUS"
            and k not in recipe.dropped  # its own refusal says what is wrong with it
            and recipe.is_set(k)
            and recipe.origin(k) not in (Origin.ENVIRONMENT, Origin.DEFAULTS_FILE)
        )
    ]


def _check_mode_keys(recipe: Recipe, mode: str, rollout_only: bool, problems: list[Problem]) -> None:
    """Keys that do nothing in this mode: rollout-server keys without a server, colocate-only keys with
    one."""
    if mode != "server" and not rollout_only:
        server_keys = _server_keys(recipe)
        if server_keys:
            colocate_hint = "; colocated vLLM takes VLLM_GPU_MEMORY_UTILIZATION, VLLM_MAX_MODEL_LEN, ..."
            problems.append(
                Problem(
                    ", ".join(sorted(server_keys)),
                    f"rollout-server settings, but this run has no rollout server ({mode}: ROLLOUT_GPUS and "
                    "ROLLOUT_HOST are empty), so they would do nothing",
                    "set ROLLOUT_GPUS=<ordinal> (or ROLLOUT_HOST) for server mode, or remove them"
                    + (colocate_hint if mode == "colocate" else ""),
                )
            )
    steps = recipe.settings.VLLM_SCHEDULER_STEPS
    if steps > 1 and mode == "server":
        problems.append(
            Problem(
                f"VLLM_SCHEDULER_STEPS ({recipe.source('VLLM_SCHEDULER_STEPS')})",
                "only acts on a colocated vLLM; the rollout server (`swift rollout`) runs vLLM as ms-swift "
                "starts it",
                "remove VLLM_SCHEDULER_STEPS (server mode)",
                fatal=False,
            )
        )
    if steps > 1 and recipe.vllm_use_v1:
        problems.append(
            Problem(
                f"VLLM_SCHEDULER_STEPS={steps} with VLLM_USE_V1=1",
                "multi-step scheduling exists only in vLLM's V0 engine; vLLM 0.8.5 raises "
                "NotImplementedError at engine start with VLLM_USE_V1=1 (vllm/engine/arg_utils.py:1327-1330, "
                "1649-1652)",
                "set VLLM_SCHEDULER_STEPS=1 to keep the V1 engine, or remove VLLM_USE_V1 (plan sets it to 0)",
            )
        )
    if mode == "server":  # ms-swift takes these in server mode and ignores them (warning for one): so do we
        for key, replacement in COLOCATE_ONLY.items():
            if recipe.is_set(key) and key.lower() in recipe.trainer:
                acts = f"; {replacement} is what sizes the rollout server" if replacement else ""
                problems.append(
                    Problem(
                        f"{key} ({recipe.source(key)})",
                        f"only acts in colocate mode; in server mode ms-swift ignores it{acts} [source: "
                        f"{COLOCATE_ONLY_SOURCE}]",
                        # the user's own text, moved to the server's key
                        f"set {replacement}={recipe.raw(key)} instead (the server's own key)"
                        if replacement
                        else f"remove {key} (server mode)",
                        fatal=False,
                    )
                )
