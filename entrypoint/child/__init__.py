"""Code that runs inside the children (ms-swift's trainer, the rollout server, their workers), put there
through PYTHONPATH by the plan. It imports nothing else of the entrypoint."""
