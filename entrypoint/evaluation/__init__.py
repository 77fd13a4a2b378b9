"""`evaluate`'s work, each module one job; the command itself (its words and its flow) is
commands/evaluate.py. A layer of its own, below commands/ and above supervise/ and world/ (it shows progress
and asks NVML).

    heldout.py      the prompts the trainer never saw, read from the run's manifest, and its sampling
    generation.py   both models' completions (vLLM or HF generate) and the progress lines meanwhile
    scoring.py      the run's own reward functions on them
    summary.py      per reward: means with 95 % intervals, the paired difference, pass@1, the verdict
    report.py       eval.json, eval.md, eval.png, the scored completions and the manifest's summary
"""
