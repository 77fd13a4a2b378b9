"""Running the children: one supervision policy (supervisor.py) with its console (printer.py), its signals
(signals.py) and what it asks of a running child (probes.py); what a person sees of them (console.py), why
one died (deaths.py) and what a failed run records (failures.py), start-up and GPU samples (startup.py,
monitor.py), the other nodes (nodes.py)."""
