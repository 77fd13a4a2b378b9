"""Reward functions as plain Python (no ms-swift import), wrapped as ms-swift ORMs in
`entrypoint/plugins/grpo_rig_rewards.py`. Each module has one job and is unit-tested on its own."""
