"""The trainer's start-up heap leaves the garbage collector's view: the second of the two patches of the lean
hook (entrypoint/child/hooks/lean.py declares it, with the upstream definitions it relies on, and installs
both).

Once GRPOTrainer is built (model, reference, vLLM engine loaded), the heap is collected once and frozen
(gc.freeze, as later vLLM versions do after their engine starts): the oldest generation's collections no
longer walk the millions of objects torch, transformers and vLLM left at start-up, pauses that land inside
a decode loop. Each phase event records the collector's seconds inside it (`gc_seconds`, hooks/events.py).
"""

from __future__ import annotations

from entrypoint.child import runtime


def freeze_startup_heap(grpo, hook: str = "lean") -> None:
    """Once a GRPOTrainer is built: one collection, then gc.freeze. `hook`: the hook whose not-installed
    notice a failure is."""
    import gc

    def freeze(trainer):
        gc.collect()
        gc.freeze()

    runtime.once_built(grpo.GRPOTrainer, freeze, hook)
