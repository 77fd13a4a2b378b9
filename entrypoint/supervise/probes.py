"""What the supervisor asks of a running child: whether its health endpoint answers (the rollout server's
/health/), which processes its tree holds now, and which TCP ports they listen on. The Supervisor's default
seams (`health`, `ports_of`); tests replace them."""

from __future__ import annotations

import urllib.error
import urllib.request

import psutil


def http_ok(url: str) -> bool:
    """GET `url` answered 200 (never through a proxy: the rollout is on loopback or a trusted network)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def process_tree(pid: int) -> list[psutil.Process]:
    """The process `pid` and all its descendants ([] when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def listening_ports(pid: int) -> set[int]:
    """TCP ports in LISTEN state owned by the process tree of `pid`."""
    found: set[int] = set()
    for proc in process_tree(pid):
        try:
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr:
                    found.add(conn.laddr.port)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
