"""GRPO_RIG_EMULATE_VRAM_GB=N (EMULATE_VRAM_GB): the process acts as if its GPU had N GiB, e.g. an RTX 4090 on
an H200, for everything that sizes itself from the card:

- torch's allocator is capped at N GiB (`set_per_process_memory_fraction`, applied when CUDA initialises
  through `torch.cuda._lazy_call`, so importing torch creates no CUDA context), unless the card already has
  no more than N GiB free because another process holds the rest (bench/device/ballast.py): the cap
  counts vLLM's sleeping pool as allocated, so sleep-mode and offload runs need the physical card;
- `torch.cuda.mem_get_info()` answers total = N GiB and free = N GiB minus what this process uses.
  vLLM sizes itself from exactly these two numbers: its KV cache is gpu_memory_utilization x total
  minus what the process already holds (vllm 0.8.5.post1 v1/worker/gpu_worker.py:170-215;
  worker/worker.py:225-260 for the V0 engine). Without this, VLLM_GPU_MEMORY_UTILIZATION=0.4 asked for
  0.4 x 139 GiB under a 24 GiB cap;
- vLLM's NVML-based card size (`get_device_total_memory`) is capped the same way.

"What this process uses" is NVML's figure for this PID (so several emulated cards on one GPU stay
apart); where NVML does not list the process (a container's PID namespace), torch's reserved memory
plus a context's 0.5 GiB.
"""

from __future__ import annotations

import functools
import os

from entrypoint.child.hooks.base import After, Hook, Target

GIB = 1024**3
CONTEXT_BYTES = (
    512 * 1024**2
)  # a CUDA context and cuBLAS workspace, where NVML cannot tell this process's use


class _Nvml:
    """This process's memory on a device, from NVML; None when NVML cannot tell. NVML is the module torch.cuda
    imported itself (torch 2.6.0 torch/cuda/__init__.py:61, absent where torch has none): this package
    imports no NVML of its own, so the planner that reads these declarations never does."""

    handles = {}
    ready = None

    @classmethod
    def own_use(cls, torch, index):
        if cls.ready is None:
            try:
                pynvml = torch.cuda.pynvml
                pynvml.nvmlInit()
                cls.ready = pynvml
            except Exception:
                cls.ready = False
        if not cls.ready:
            return None
        nvml = cls.ready
        try:
            if index not in cls.handles:
                uuid = str(torch.cuda.get_device_properties(index).uuid)
                cls.handles[index] = nvml.nvmlDeviceGetHandleByUUID(
                    uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
                )
            pid = os.getpid()
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(cls.handles[index]):
                if proc.pid == pid and isinstance(proc.usedGpuMemory, int):
                    return proc.usedGpuMemory
        except Exception:
            return None
        return None


def emulated_mem_info(free: int, total: int, used: int, limit: float) -> tuple[int, int]:
    """(free, total) bytes of a card of `limit` bytes for a process using `used` bytes of it, never more
    free than the real device has."""
    card = min(int(limit), total)
    return max(0, min(free, card - used)), card


def cap_fraction(free: int, total: int, limit: float) -> float | None:
    """The allocator cap (a fraction of `total`) that makes a card of `total` bytes, `free` of them free
    once this process's context exists, act as one of `limit` bytes; None where the card is already that
    small because another process holds the rest (a ballast): the physical limit is then the faithful one.
    The cap counts memory torch's allocator has handed out, and vLLM's sleeping pool (sleep mode's
    CuMemAllocator) is such memory: under the cap a run with SLEEP_LEVEL >= 1 runs out of memory that a
    real card of `limit` bytes has ("23.95 GiB is allocated by PyTorch" while NVML showed 3.89 GiB in use,
    Qwen2.5-7B on the lent H200, 2026-12-03; bench/device/ballast.py makes the physical card instead)."""
    if free <= limit:
        return None
    return min(1.0, limit / total)


def _emulate_card(torch, gib: float) -> None:
    limit = gib * GIB
    real_mem_get_info = torch.cuda.memory.mem_get_info

    def cap():
        for index in range(torch.cuda.device_count()):
            free, total = real_mem_get_info(index)
            fraction = cap_fraction(free, total, limit)
            if fraction is not None:
                torch.cuda.set_per_process_memory_fraction(fraction, index)

    torch.cuda._lazy_call(cap)

    @functools.wraps(real_mem_get_info)
    def mem_get_info(device=None):
        free, total = real_mem_get_info(device)
        index = torch.cuda._utils._get_device_index(device, optional=True)
        used = _Nvml.own_use(torch, index)
        if used is None:  # NVML does not list this PID (a PID namespace): torch's own share, plus a context
            used = torch.cuda.memory_reserved(index) + CONTEXT_BYTES
        return emulated_mem_info(free, total, used, limit)

    torch.cuda.memory.mem_get_info = mem_get_info
    torch.cuda.mem_get_info = mem_get_info


def _emulate_card_for_vllm(cuda_platform, gib: float) -> None:
    """vLLM also reads the card's size through NVML, to pick its default batch of tokens per step
    (vllm 0.8.5.post1 engine/arg_utils.py:1580-1600): report the emulated card there too."""
    limit = int(gib * GIB)
    for cls in (cuda_platform.NvmlCudaPlatform, cuda_platform.NonNvmlCudaPlatform):
        real = cls.get_device_total_memory.__func__

        def get_device_total_memory(klass, device_id=0, real=real):
            return min(limit, real(klass, device_id))

        cls.get_device_total_memory = classmethod(get_device_total_memory)


def install(value: str, after: After) -> None:
    """On for a number of GiB > 0 (the plan writes EMULATE_VRAM_GB's value)."""
    try:
        gib = float(value or 0)
    except ValueError:
        gib = 0.0
    if gib > 0:
        after.patch("torch", lambda torch: _emulate_card(torch, gib))
        after.patch("vllm.platforms.cuda", lambda cuda_platform: _emulate_card_for_vllm(cuda_platform, gib))


HOOK = Hook(
    name="emulate_vram",
    variable="GRPO_RIG_EMULATE_VRAM_GB",
    recipe_key="EMULATE_VRAM_GB",
    targets=(
        Target("torch.cuda", "_lazy_call", "ef646d27bb307b29"),
        Target("torch.cuda.memory", "set_per_process_memory_fraction", "2bb970c2d188fe49"),
        Target("torch.cuda.memory", "mem_get_info", "98c35da672e0cc3a"),
        Target("torch.cuda._utils", "_get_device_index", "1e7c8e5f4629fed6"),
        Target("vllm.platforms.cuda", "NvmlCudaPlatform.get_device_total_memory", "0572d93bce9b7a3c"),
        Target("vllm.platforms.cuda", "NonNvmlCudaPlatform.get_device_total_memory", "d9ca172332f4f6e7"),
        # what makes the patch matter: vLLM's KV cache is sized from mem_get_info's two numbers
        Target("vllm.v1.worker.gpu_worker", "Worker.determine_available_memory", "8b04c6c2ec2b20d6"),
    ),
    upstream=("torch==2.6.0", "vllm==0.8.5.post1"),
    why="A process acts as if its GPU had EMULATE_VRAM_GB GiB (an RTX 4090 on an H200) for everything that "
    "sizes itself from the card: torch's allocator cap, torch.cuda.mem_get_info (which vLLM sizes its KV "
    "cache from) and vLLM's NVML card size. Without it VLLM_GPU_MEMORY_UTILIZATION=0.4 asked for 0.4 x 139 "
    "GiB under a 24 GiB cap.",
    saves="no time: it is what lets one lent H200 stand in for the consumer cards the recipes target "
    "(tests/gpu/test_weight_sync.py runs two emulated 24 GiB cards on one GPU; docs/gpu-evidence.md)",
    delete_when="when no run or benchmark emulates a smaller card (EMULATE_VRAM_GB removed): torch's "
    "set_per_process_memory_fraction caps the allocator but never changes mem_get_info's answer "
    "(torch/cuda/memory.py), so no upstream release makes it unnecessary",
    install=install,
)
