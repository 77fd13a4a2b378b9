"""Running the children: one supervision policy (supervisor.py), what a person sees of them (console.py),
why one died (deaths.py), start-up and GPU samples (startup.py, monitor.py), the other nodes (nodes.py)."""
