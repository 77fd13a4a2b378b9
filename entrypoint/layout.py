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
disjoint CUDA_VISIBLE_DEVICES=<rollout GPUs> (../shared/cases C05).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from entrypoint.errors import Problem
from entrypoint.hardware import Inventory
from entrypoint.keys import COLOCATE_ONLY, COLOCATE_ONLY_SOURCE
from entrypoint.recipe import Recipe

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


@dataclasses.dataclass(frozen=True)
class Layout:
    mode: str  # "cpu" | "hf" | "colocate" | "server"
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
        )
        if self.local_rollout:
            text += f"; vLLM rollout server on GPU(s) {_fmt(self.rollout_gpus)} (tp={self.rollout_tp}, dp={self.rollout_dp})"
        elif self.mode == "server":
            text += f"; remote vLLM rollout server at {self.rollout_host}"
        elif self.mode == "colocate":
            text += "; vLLM colocated on each training GPU"
        else:
            text += "; HF generation inside the trainer"
        return text


def _fmt(gpus: tuple[int, ...]) -> str:
    return ",".join(map(str, gpus)) if gpus else "-"


def is_loopback(address: str) -> bool:
    return address in ("localhost", "::1") or address.startswith("127.")


def connect_address(bind: str) -> str:
    """Where a local client reaches a server bound to `bind` (a wildcard bind is reached on loopback)."""
    return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind


def parse_ordinals(text: str) -> list[int]:
    """'0,1', '0-3', '2' -> ordinals. Raises ValueError on anything else."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            start, end = int(lo), int(hi)
            if end < start:
                raise ValueError(f"range {part} runs backwards")
            out.extend(range(start, end + 1))
        else:
            out.append(int(part))
    if len(set(out)) != len(out):
        raise ValueError("an ordinal is listed twice")
    return out


def _int(recipe: Recipe, name: str, default: int) -> int:
    tokens = recipe.trainer.get(name) or recipe.rollout.get(name.removeprefix("rollout_"))
    return int(tokens[0]) if tokens else default


def decide(
    recipe: Recipe, inventory: Inventory, environ: Mapping[str, str], rollout_only: bool = False
) -> tuple[Layout | None, list[Problem]]:
    """Place the run on the inventory's GPUs. Returns (layout or None when impossible, problems).

    `rollout_only`: this node only serves the rollout (`python -m entrypoint rollout`) for trainers on
    other nodes (their ROLLOUT_HOST); nothing trains here.
    """
    s = recipe.settings
    problems: list[Problem] = []
    use_vllm = recipe.trainer.get("use_vllm", ["false"])[0] == "true"
    visible = [g.index for g in inventory.gpus]

    if "CUDA_VISIBLE_DEVICES" in environ:
        problems.append(
            Problem(
                "CUDA_VISIBLE_DEVICES (environment)",
                f"is set to {environ['CUDA_VISIBLE_DEVICES']!r}; the entrypoint replaces it for each process",
                "select GPUs with TRAIN_GPUS / ROLLOUT_GPUS, or hide them from the container with compose device_ids",
                fatal=False,
            )
        )

    def ordinals(key: str, text: str) -> list[int] | None:
        try:
            values = parse_ordinals(text)
        except ValueError as exc:
            problems.append(
                Problem(f"{key} ({recipe.source(key)})", f"{text!r}: {exc}", "write ordinals like 0,1 or 0-3")
            )
            return None
        unknown = [v for v in values if v not in visible]
        if unknown:
            problems.append(
                Problem(
                    f"{key} ({recipe.source(key)})",
                    f"GPU {', '.join(map(str, unknown))} does not exist in this container. Visible:\n    "
                    + inventory.table().replace("\n", "\n    ")
                    + f"\n  {DOCKER_RENUMBERING}",
                    f"use ordinals from the list above (0..{len(visible) - 1})"
                    if visible
                    else "expose GPUs first",
                )
            )
            return None
        return values

    rollout_text = s.ROLLOUT_GPUS.strip()
    # Only an explicit TRAIN_GPUS=none asks for the CPU: `all` (the default) on a machine with no GPU is
    # the missing-GPU fault (C03), not a request to train slowly on the CPU.
    wants_gpu = use_vllm or bool(rollout_text) or s.TRAIN_GPUS.strip().lower() not in ("none", "")
    if not visible and wants_gpu:
        why = "USE_VLLM=true" if use_vllm else "the recipe names GPUs"
        problems.append(
            Problem(
                "GPU",
                NO_GPU_HELP.format(error=inventory.nvml_error or "NVML lists no device")
                + f" This recipe needs one ({why}).",
                "fix the GPU exposure above; for a CPU run set TRAIN_GPUS=none (recipe=smoke does)",
            )
        )
        return None, problems

    rollout = ordinals("ROLLOUT_GPUS", rollout_text) if rollout_text else []
    if rollout and not is_loopback(s.ROLLOUT_BIND) and not s.ROLLOUT_ALLOW_REMOTE:
        problems.append(
            Problem(
                f"ROLLOUT_BIND ({recipe.source('ROLLOUT_BIND')})",
                f"{s.ROLLOUT_BIND!r} is not loopback: the rollout server accepts weight updates and prompts from "
                "anyone who can reach it (no authentication in ms-swift 3.6.4)",
                "keep ROLLOUT_BIND=127.0.0.1, or set ROLLOUT_ALLOW_REMOTE=true on a trusted network",
            )
        )
    if rollout_only and rollout is not None:
        if not rollout:
            problems.append(
                Problem(
                    "ROLLOUT_GPUS",
                    "`rollout` serves on dedicated GPUs, and none are named",
                    "set ROLLOUT_GPUS=0 (or 0-3)",
                )
            )
        tp = _int(recipe, "rollout_tensor_parallel_size", 1)
        layout = Layout(mode="server", train_gpus=(), rollout_gpus=tuple(rollout), rollout_host=connect_address(s.ROLLOUT_BIND),
                        rollout_tp=tp, rollout_dp=max(1, len(rollout) // tp))  # fmt: skip
        return layout, problems
    train_text = s.TRAIN_GPUS.strip().lower()
    if train_text in ("none", ""):
        train: list[int] | None = []
    elif train_text == "all":
        train = [g for g in visible if g not in (rollout or [])]
    else:
        train = ordinals("TRAIN_GPUS", s.TRAIN_GPUS)
    if train is None or rollout is None:
        return None, problems

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
                f"GPU {_fmt(tuple(overlap))} is listed for both training and the rollout server; in server mode "
                "each needs its own card",
                "list disjoint GPUs, or empty ROLLOUT_GPUS to colocate vLLM on the training GPUs",
            )
        )
    if rollout and not train and train_text not in ("none",):
        problems.append(
            Problem(
                "ROLLOUT_GPUS",
                f"leaves no GPU for training ({len(visible)} visible, {len(rollout)} for the rollout)",
                "server mode needs at least 2 GPUs; on one GPU empty ROLLOUT_GPUS to colocate",
            )
        )
    if not train and use_vllm and not problems:
        problems.append(
            Problem("USE_VLLM", "vLLM needs a GPU, but the trainer runs on the CPU", "set USE_VLLM=false")
        )

    if not train:
        mode = "cpu"
    elif rollout or s.ROLLOUT_HOST:
        mode = "server"
    elif use_vllm:
        mode = "colocate"
    else:
        mode = "hf"

    tp = _int(recipe, "rollout_tensor_parallel_size", 1)
    if rollout and len(rollout) % tp:
        problems.append(
            Problem(
                "ROLLOUT_TENSOR_PARALLEL_SIZE",
                f"{tp} does not divide the {len(rollout)} rollout GPUs",
                "choose a divisor",
            )
        )
    colocate_tp = _int(recipe, "vllm_tensor_parallel_size", 1)
    if mode == "colocate" and len(train) % colocate_tp:
        problems.append(
            Problem(
                "VLLM_TENSOR_PARALLEL_SIZE",
                f"{colocate_tp} does not divide the {len(train)} training processes (ms-swift groups consecutive ranks)",
                "choose a divisor of the number of TRAIN_GPUS",
            )
        )
    if mode != "server" and not rollout_only:
        server_keys = [
            k
            for k in recipe.values
            if (
                k.startswith("ROLLOUT_")
                and k != "ROLLOUT_GPUS"
                and recipe.is_set(k)
                and recipe.source(k) != "environment"
                and not recipe.source(k).startswith("recipes/defaults.env")
            )
            or k == "VLLM_SERVER_TIMEOUT"
        ]
        if server_keys:
            problems.append(
                Problem(
                    ", ".join(sorted(server_keys)),
                    f"rollout-server settings, but this run has no rollout server ({mode}: ROLLOUT_GPUS and ROLLOUT_HOST are empty), "
                    "so they would do nothing",
                    "set ROLLOUT_GPUS=<ordinal> (or ROLLOUT_HOST) for server mode, or remove them"
                    + (
                        "; colocated vLLM takes VLLM_GPU_MEMORY_UTILIZATION, VLLM_MAX_MODEL_LEN, ..."
                        if mode == "colocate"
                        else ""
                    ),
                )
            )
    if mode == "server":
        for key, replacement in COLOCATE_ONLY.items():
            if recipe.is_set(key) and key.lower() in recipe.trainer:
                problems.append(
                    Problem(
                        f"{key} ({recipe.source(key)})",
                        f"only acts in colocate mode; in server mode ms-swift ignores it [source: {COLOCATE_ONLY_SOURCE}]",
                        f"set {replacement} for the rollout server"
                        if replacement
                        else f"remove {key} (server mode)",
                    )
                )

    host = s.ROLLOUT_HOST or (connect_address(s.ROLLOUT_BIND) if rollout else "")
    layout = Layout(
        mode=mode,
        train_gpus=tuple(train),
        rollout_gpus=tuple(rollout),
        rollout_host=host if mode == "server" else "",
        rollout_tp=tp,
        rollout_dp=max(1, len(rollout) // tp) if rollout else 1,
    )
    return layout, problems
