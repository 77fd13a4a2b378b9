"""Hooks the entrypoint installs in its child processes (trainer, rollout server and their workers).

The plan puts this folder first on the children's PYTHONPATH whenever one of the variables below is set
(`plan` shows both); Python imports `sitecustomize` at start-up. Each hook acts only once the library it
patches is imported by the child itself: nothing here imports torch, vLLM or ms-swift early.

GRPO_RIG_EMULATE_VRAM_GB=N (EMULATE_VRAM_GB): the process acts as if its GPU had N GiB, e.g. an RTX 4090 on
    an H200, for everything that sizes itself from the card:
    - torch's allocator is capped at N GiB (`set_per_process_memory_fraction`, applied when CUDA initialises
      through `torch.cuda._lazy_call`, so importing torch creates no CUDA context);
    - `torch.cuda.mem_get_info()` answers total = N GiB and free = N GiB minus what this process uses.
      vLLM sizes itself from exactly these two numbers: its KV cache is gpu_memory_utilization x total
      minus what the process already holds (vllm 0.8.5.post1 v1/worker/gpu_worker.py:170-215;
      worker/worker.py:225-260 for the V0 engine). Without this, VLLM_GPU_MEMORY_UTILIZATION=0.4 asked for
      0.4 x 139 GiB under a 24 GiB cap;
    - vLLM's NVML-based card size (`get_device_total_memory`) is capped the same way.
    "What this process uses" is NVML's figure for this PID (so several emulated cards on one GPU stay
    apart); where NVML does not list the process (a container's PID namespace), torch's reserved memory
    plus a context's 0.5 GiB.
GRPO_RIG_VLLM_KEEP_POOLS=1: keep vLLM's sleep-mode memory pools alive until the process is gone.
    With sleep mode (SLEEP_LEVEL >= 1) vLLM allocates through a pluggable CUDA allocator inside torch
    MemPools (vllm/device_allocator/cumem.py). At interpreter exit the garbage collector may destroy the
    allocator before its pool, or free the pool's blocks after vLLM released them: the trainer then dies
    after training with SIGSEGV, or SIGABRT "Trying to free a pointer not allocated here" in
    CUDAPluggableAllocator::raw_delete from MemPool::~MemPool (vllm-project/vllm#16993; the ordering
    analysis is vllm-project/vllm#46050). A pool and its allocator that are never collected are never torn
    down; the operating system reclaims the memory when the process ends.
GRPO_RIG_EVENTS=PATH: rank 0 of the trainer appends one JSON line per GRPO phase to PATH:
    {"t": unix seconds, "phase": "sync" | "generate" | "rollout" | "train", "seconds": ..., ...},
    where `rollout` is generation plus scoring and log-probs (ms-swift 3.6.4
    GRPOTrainer._generate_and_score_completions), `generate` the generation inside it
    (_generate_completions), `sync` the weight push to vLLM (_move_model_to_vllm) and `train` one
    micro-batch's training_step, which holds the round's rollout on the round's first micro-batch (HF
    Trainer.training_step -> ms-swift _prepare_inputs). The console heartbeat and the throughput
    benchmark read them; ms-swift's own logs stay as they are.

Any other sitecustomize on the path (a distribution's, a user's) still runs: it is executed after these.
"""

import contextlib
import ctypes
import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time

_EMULATE_GIB = float(os.environ.get("GRPO_RIG_EMULATE_VRAM_GB") or 0)
_KEEP_POOLS = os.environ.get("GRPO_RIG_VLLM_KEEP_POOLS") == "1"
_EVENTS = os.environ.get("GRPO_RIG_EVENTS", "")
GIB = 1024**3
CONTEXT_BYTES = (
    512 * 1024**2
)  # a CUDA context and cuBLAS workspace, where NVML cannot tell this process's use


def _say(text):
    print(f"grpo-rig site: {text}", file=sys.stderr, flush=True)


# --- EMULATE_VRAM_GB -------------------------------------------------------------------------------


class _Nvml:
    """This process's memory on a device, from NVML; None when NVML cannot tell."""

    handles = {}
    ready = None

    @classmethod
    def own_use(cls, torch, index):
        if cls.ready is None:
            try:
                import pynvml

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


def _emulate_card(torch):
    limit = _EMULATE_GIB * GIB

    def cap():
        for index in range(torch.cuda.device_count()):
            total = torch.cuda.get_device_properties(index).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), index)

    torch.cuda._lazy_call(cap)
    real_mem_get_info = torch.cuda.memory.mem_get_info

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


def _emulate_card_for_vllm(cuda_platform):
    """vLLM also reads the card's size through NVML, to pick its default batch of tokens per step
    (vllm 0.8.5.post1 engine/arg_utils.py:1580-1600): report the emulated card there too."""
    limit = int(_EMULATE_GIB * GIB)
    for cls in (cuda_platform.NvmlCudaPlatform, cuda_platform.NonNvmlCudaPlatform):
        real = cls.get_device_total_memory.__func__

        def get_device_total_memory(klass, device_id=0, real=real):
            return min(limit, real(klass, device_id))

        cls.get_device_total_memory = classmethod(get_device_total_memory)


# --- vLLM sleep-mode pools -------------------------------------------------------------------------


def _keep_vllm_pools(cumem):
    original = cumem.use_memory_pool_with_allocator

    @contextlib.contextmanager
    def use_memory_pool_with_allocator(*args, **kwargs):
        with original(*args, **kwargs) as data:
            for obj in data:  # (MemPool, CUDAPluggableAllocator): one reference nobody ever drops
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
            yield data

    cumem.use_memory_pool_with_allocator = use_memory_pool_with_allocator
    _say("vLLM sleep-mode memory pools are kept until exit (vllm-project/vllm#16993)")


# --- phase events ----------------------------------------------------------------------------------


def _record_phases(grpo):
    if os.environ.get("RANK", "0") != "0":
        return
    cls = grpo.GRPOTrainer

    def timed(name, phase, count=None):
        method = getattr(cls, name, None)
        if method is None:
            return

        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            start = time.time()
            try:
                return method(self, *args, **kwargs)
            finally:
                row = {"t": round(time.time(), 3), "phase": phase, "seconds": round(time.time() - start, 3)}
                state = getattr(self, "state", None)
                row["step"] = getattr(state, "global_step", None)
                if count is not None and args:
                    with contextlib.suppress(Exception):
                        row["completions"] = count(args[0])
                with contextlib.suppress(OSError), open(_EVENTS, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")

        setattr(cls, name, wrapper)

    timed("_move_model_to_vllm", "sync")
    timed("_generate_completions", "generate", count=len)
    timed("_generate_and_score_completions", "rollout", count=len)
    timed("training_step", "train")


# --- import hooks ----------------------------------------------------------------------------------

_AFTER_IMPORT = {}
if _EMULATE_GIB > 0:
    _AFTER_IMPORT["torch"] = _emulate_card
    _AFTER_IMPORT["vllm.platforms.cuda"] = _emulate_card_for_vllm
if _KEEP_POOLS:
    _AFTER_IMPORT["vllm.device_allocator.cumem"] = _keep_vllm_pools
if _EVENTS:
    _AFTER_IMPORT["swift.trainers.rlhf_trainer.grpo_trainer"] = _record_phases


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `_AFTER_IMPORT[name](module)` right after the child imports `name`, once."""

    def find_spec(self, fullname, path, target=None):
        hook = _AFTER_IMPORT.pop(fullname, None)
        if hook is None:
            return None
        if not _AFTER_IMPORT:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                hook(module)
            except Exception as exc:  # a hook must never take the child down
                _say(f"hook for {fullname} not installed: {exc!r}")

        spec.loader.exec_module = exec_module
        return spec


if _AFTER_IMPORT:
    sys.meta_path.insert(0, _AfterImport())


def _chain_next_sitecustomize():
    """Run the next `sitecustomize` on sys.path, which this file shadows."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or ".") == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as f:
                code = compile(f.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})  # noqa: S102
            return


_chain_next_sitecustomize()
