"""The commands of `python -m entrypoint`: each reads the world once at the edge, decides, checks, and acts.

The top layer below cli.py: a command may use every package beneath it; nothing imports a command."""
