"""TCP port checks on this machine (loopback or a given bind address only)."""

from __future__ import annotations

import socket

from entrypoint.facts.facts import (  # noqa: F401 (re-exported)
    ROLLOUT_PORT_SPAN,
    ROLLOUT_PORT_START,
    WEIGHT_SYNC_PORT,
)


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a TCP socket can bind host:port right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def first_free(start: int, host: str = "127.0.0.1", span: int = ROLLOUT_PORT_SPAN) -> int | None:
    """The first free port in [start, start + span), or None."""
    return next((p for p in range(start, start + span) if is_free(p, host)), None)


def ephemeral(host: str = "127.0.0.1") -> int:
    """A port the kernel considers free now (for torchrun's MASTER_PORT on a single node)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
