"""Code that runs inside the children (ms-swift's trainer, the rollout server, their workers), put there
through PYTHONPATH by the plan. It imports nothing else of the entrypoint.

    site/sitecustomize.py   what Python imports at a child's start-up: installs the enabled hooks
    loader.py               the import finder that patches each library once the child imports it
    hooks/                  one module per hook: what it patches upstream, why, what it saves, when it goes
    runtime.py              what the hooks share: the not-installed notice, the event writer, the wrappers
    drift.py                the hash of each upstream target's source, read without importing it
    sync_probe.py           the weight-sync check the sync_probe hook installs (tests/gpu)
    final_only.py           the lean hook's patches: vLLM builds only a plain request's final output,
    heap_freeze.py          and the trainer's start-up heap is frozen once it is built
    wire.py                 what the children write and the entrypoint reads: event rows, marks, notices
"""
