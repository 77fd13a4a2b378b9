"""GRPO_RIG_VLLM_KEEP_POOLS=1: keep vLLM's sleep-mode memory pools alive until the process is gone.

With sleep mode (SLEEP_LEVEL >= 1) vLLM allocates through a pluggable CUDA allocator inside torch
MemPools (vllm/device_allocator/cumem.py). At interpreter exit the garbage collector may destroy the
allocator before its pool, or free the pool's blocks after vLLM released them: the trainer then dies
after training with SIGSEGV, or SIGABRT "Trying to free a pointer not allocated here" in
CUDAPluggableAllocator::raw_delete from MemPool::~MemPool (vllm-project/vllm#16993; the ordering
analysis is vllm-project/vllm#46050). A pool and its allocator that are never collected are never torn
down; the operating system reclaims the memory when the process ends.
"""

from __future__ import annotations

import contextlib
import ctypes

from entrypoint.child import runtime
from entrypoint.child.hooks.base import After, Hook, Target


def _keep_vllm_pools(cumem) -> None:
    original = cumem.use_memory_pool_with_allocator

    @contextlib.contextmanager
    def use_memory_pool_with_allocator(*args, **kwargs):
        with original(*args, **kwargs) as data:
            for obj in data:  # (MemPool, CUDAPluggableAllocator): one reference nobody ever drops
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
            yield data

    cumem.use_memory_pool_with_allocator = use_memory_pool_with_allocator
    runtime.say("vLLM sleep-mode memory pools are kept until exit (vllm-project/vllm#16993)")


def install(value: str, after: After) -> None:
    """On with "1" (the plan sets it for a colocated engine with SLEEP_LEVEL >= 1)."""
    if value == "1":
        after.patch("vllm.device_allocator.cumem", _keep_vllm_pools)


HOOK = Hook(
    name="keep_pools",
    variable="GRPO_RIG_VLLM_KEEP_POOLS",
    targets=(
        Target("vllm.device_allocator.cumem", "use_memory_pool_with_allocator", "4e4c2911e79d7038"),
        # calls it through the module's global name, which is what the patch replaces
        Target("vllm.device_allocator.cumem", "CuMemAllocator.use_memory_pool", "47f6163f211dcc9d"),
    ),
    upstream=("vllm==0.8.5.post1",),
    why="With sleep mode, interpreter exit may destroy vLLM's pluggable allocator before its MemPool, or "
    "free the pool's blocks after vLLM released them; pools and allocators that are never collected are "
    "never torn down, and the operating system reclaims the memory at exit.",
    saves="every colocated run with SLEEP_LEVEL=1 died at interpreter exit after its last checkpoint "
    "(SIGSEGV, or SIGABRT in MemPool::~MemPool); with the hook every such run on the lent H200 ended with "
    'exit status 0 (bench/gpu-evidence/notes.md, "A finished training is never reported as failed")',
    delete_when="when vllm-project/vllm#16993 is fixed upstream (vLLM tears its sleep-mode pools and "
    "their allocator down in order at exit; the ordering analysis is vllm-project/vllm#46050)",
    install=install,
)
