"""EMULATE_VRAM_GB: cap every child process's CUDA memory, to emulate a smaller card (e.g. a 24 GiB RTX
4090 on an H200). The plan puts this folder on the children's PYTHONPATH only when EMULATE_VRAM_GB is
set; Python imports `sitecustomize` at start-up.

Once `torch` is imported, a callback is queued with `torch.cuda._lazy_call`, so the cap
(`torch.cuda.set_per_process_memory_fraction`, relative to each device's total memory) is applied when
CUDA initialises, not earlier: importing torch does not create a CUDA context.
"""

import importlib.abc
import importlib.util
import os
import sys

_LIMIT_GIB = os.environ.get("GRPO_RIG_EMULATE_VRAM_GB")


def _install(torch) -> None:
    limit = float(_LIMIT_GIB) * 1024**3

    def cap() -> None:
        for index in range(torch.cuda.device_count()):
            total = torch.cuda.get_device_properties(index).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), index)

    torch.cuda._lazy_call(cap)


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _install(module)

        spec.loader.exec_module = exec_module
        return spec


if _LIMIT_GIB and float(_LIMIT_GIB) > 0:
    sys.meta_path.insert(0, _AfterTorchImport())
