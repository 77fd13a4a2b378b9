"""GRPO_RIG_VLLM_INSPECT_HERE=1: vLLM inspects the model's class in this process once CUDA is initialised
here.

vLLM 0.8.5 imports a lazily registered model class in a fresh Python process to read its interfaces, "to
avoid initializing CUDA" in a process that may fork workers later (vllm/model_executor/models/registry.py
_LazyRegisteredModel.inspect_model_cls, _run_in_subprocess). A colocated engine starts inside the
trainer, which initialised CUDA long before and forks no engine process (ms-swift 3.6.4 uses vLLM's
external launcher, which disables V1 multiprocessing): there the subprocess protects nothing and costs
its whole start-up, torch, transformers and vLLM imported again (14 s of the 74 s warm start-up on the
lent H200, bench/startup/2026-12-02-0445-startup/). A process that has not initialised CUDA (the rollout
server, `evaluate`) keeps vLLM's subprocess.
"""

from __future__ import annotations

import functools
import sys

from entrypoint.child.hooks.base import After, Hook, Target

REGISTRY = "vllm.model_executor.models.registry"


def _inspect_here_once_cuda_is_up(registry) -> None:
    lazy = registry._LazyRegisteredModel
    original = lazy.inspect_model_cls

    @functools.wraps(original)
    def inspect_model_cls(self):
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            return registry._ModelInfo.from_model_cls(self.load_model_cls())
        return original(self)

    lazy.inspect_model_cls = inspect_model_cls


def install(value: str, after: After) -> None:
    """On with "1" (the plan sets it for a colocated trainer, where the engine starts after CUDA did)."""
    if value == "1":
        after.patch(REGISTRY, _inspect_here_once_cuda_is_up)


HOOK = Hook(
    name="inspect_here",
    variable="GRPO_RIG_VLLM_INSPECT_HERE",
    targets=(
        Target(REGISTRY, "_LazyRegisteredModel.inspect_model_cls", "9bba2b6b7f17f76f"),
        Target(REGISTRY, "_LazyRegisteredModel.load_model_cls", "9296eaf02b0ea10c"),
        Target(REGISTRY, "_ModelInfo.from_model_cls", "19ca3a0058dd8bc9"),
    ),
    upstream=("vllm==0.8.5.post1",),
    why="vLLM 0.8.5 reads a lazily registered model class's interfaces in a fresh Python process so as not "
    "to initialise CUDA; in a colocated trainer CUDA is up long before and no engine process is forked, so "
    "the class is read in place there (a process without CUDA keeps vLLM's subprocess).",
    saves="14 s of the colocated trainer's 74 s warm start-up on the lent H200: the subprocess's own "
    "imports of torch, transformers and vLLM (bench/startup/2026-12-02-0445-startup/)",
    delete_when="when the image's vLLM no longer starts a subprocess for a known model on a warm start: its "
    "model-info cache (vllm-project/vllm#23558: _ModelInfo kept under VLLM_CACHE_ROOT/modelinfos, keyed by "
    "the model file's hash) filled in the image (vllm-project/vllm#51746 proposes "
    "`vllm prepare-model-info`), or an option to inspect in-process (vllm-project/vllm#19317)",
    install=install,
)
