"""Multi-node start-up check: every node runs the same image, lock and recipe, and can reach node 0.

Before anything heavy, node 0 serves its identity over HTTP on MASTER_ADDR:MASTER_PORT+1 and waits for
every other node; each other node fetches it (retrying until NODE_CHECK_TIMEOUT), compares, and reports
its own. A node that cannot reach node 0 in time, or differs from it, stops with exit status 2 and says
what differs; node 0 records every node's identity in its manifest. torchrun's own rendezvous
(MASTER_PORT) starts only after this.

Compared: the lock's sha256, the image version and revision, and every recipe value except the keys
that may differ per node (node-local in entrypoint/recipe/keys.py). Each node also reports whether it has an active
InfiniBand/RoCE port: NCCL uses IB only when every node has it.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from entrypoint.errors import Problem
from entrypoint.recipe import keys
from entrypoint.record import manifest

if TYPE_CHECKING:
    from entrypoint.plan.build import Plan


def identity(plan: Plan) -> dict[str, Any]:
    """What must match across nodes, plus this node's facts."""
    r = plan.recipe
    return {
        "node_rank": r.settings.NODE_RANK,
        "lock_sha256": manifest.lock_sha256(),
        "image": manifest.image_identity(plan.facts.env),
        "recipe": {
            k: v.value
            for k, v in sorted(r.values.items())
            if not (keys.lookup(k) and keys.lookup(k).node_local)
        },
        "active_ib": bool(plan.inventory.active_ib_ports()),
        "gpus": [g.name for g in plan.inventory.gpus],
        "resume_from": plan.resume_from,
    }


def differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    out = []
    if mine["lock_sha256"] != theirs["lock_sha256"]:
        out.append(
            f"lock sha256 {theirs['lock_sha256']} != node 0's {mine['lock_sha256']} (different image or checkout)"
        )
    for key in ("version", "revision"):
        if mine["image"].get(key) != theirs["image"].get(key):
            out.append(f"image {key} {theirs['image'].get(key)} != node 0's {mine['image'].get(key)}")
    for key in sorted(set(mine["recipe"]) | set(theirs["recipe"])):
        if mine["recipe"].get(key) != theirs["recipe"].get(key):
            out.append(f"{key}={theirs['recipe'].get(key)!r} != node 0's {mine['recipe'].get(key)!r}")
    return out


def ib_problem(identities: list[dict[str, Any]], user_set_ib: bool) -> str | None:
    flags = {i["node_rank"]: i["active_ib"] for i in identities}
    if any(flags.values()) and not all(flags.values()) and not user_set_ib:
        without = ", ".join(str(k) for k, v in sorted(flags.items()) if not v)
        return f"node(s) {without} have no active InfiniBand/RoCE port while others do; NCCL would try IB between them"
    return None


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def serve(plan: Plan, timeout: float, say) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Node 0: publish the identity, collect every other node's. Returns (all identities, problems)."""
    s = plan.recipe.settings
    mine = identity(plan)
    reports: dict[int, dict[str, Any]] = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send(200, mine)

        def do_POST(self):
            theirs = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            diff = differences(mine, theirs)
            with lock:
                reports[int(theirs["node_rank"])] = {**theirs, "differences": diff}
            self._send(200, {"ok": not diff, "differences": diff})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((s.MASTER_ADDR, s.MASTER_PORT + 1), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    say(
        f"node 0: waiting for {s.NNODES - 1} node(s) on {s.MASTER_ADDR}:{s.MASTER_PORT + 1} (NODE_CHECK_TIMEOUT {timeout:.0f} s)"
    )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with lock:
                if len(reports) >= s.NNODES - 1:
                    break
            time.sleep(0.2)
        time.sleep(0.5)  # let the last reply reach its node
    finally:
        server.shutdown()
        server.server_close()
    problems = []
    missing = sorted(set(range(1, s.NNODES)) - set(reports))
    if missing:
        problems.append(
            Problem(
                "nodes",
                f"node(s) {', '.join(map(str, missing))} did not report within {timeout:.0f} s",
                f"start them with the same recipe and NODE_RANK 1..{s.NNODES - 1}; check that they reach "
                f"{s.MASTER_ADDR} on TCP {s.MASTER_PORT + 1} and {s.MASTER_PORT} (firewall)",
            )
        )
    for rank, report in sorted(reports.items()):
        for diff in report["differences"]:
            problems.append(Problem(f"node {rank}", diff, "run the same image and recipe on every node"))
    identities = [mine, *(reports[r] for r in sorted(reports))]
    ib = ib_problem(identities, "NCCL_IB_DISABLE" in plan.recipe.nccl)
    if ib:
        problems.append(
            Problem("NCCL_IB_DISABLE", ib, "set NCCL_IB_DISABLE=1 and NCCL_SOCKET_IFNAME on every node")
        )
    return identities, problems


def report(plan: Plan, timeout: float, say) -> tuple[dict[str, Any] | None, list[Problem]]:
    """Node > 0: fetch node 0's identity (retrying until `timeout`), compare, report ours."""
    s = plan.recipe.settings
    url = f"http://{s.MASTER_ADDR}:{s.MASTER_PORT + 1}/"
    mine = identity(plan)
    deadline = time.monotonic() + timeout
    next_note = time.monotonic()
    theirs = None
    while time.monotonic() < deadline:
        try:
            with _opener().open(url, timeout=3) as response:
                theirs = json.loads(response.read())
            break
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            if time.monotonic() >= next_note:
                say(f"node {s.NODE_RANK}: waiting for node 0 at {url}")
                next_note = time.monotonic() + 15
            time.sleep(1)
    if theirs is None:
        return None, [
            Problem(
                f"MASTER_ADDR {s.MASTER_ADDR}",
                f"node 0 did not answer on TCP {s.MASTER_PORT + 1} within {timeout:.0f} s",
                "check MASTER_ADDR (node 0's address on the network the nodes share), that node 0 is started, "
                f"and that TCP {s.MASTER_PORT}-{s.MASTER_PORT + 1} are open between the nodes",
            )
        ]
    request = urllib.request.Request(
        url, data=json.dumps(mine).encode(), headers={"Content-Type": "application/json"}
    )
    with _opener().open(request, timeout=10) as response:
        answer = json.loads(response.read())
    problems = [
        Problem(f"node {s.NODE_RANK}", d, "run the same image and recipe on every node")
        for d in answer["differences"]
    ]
    ib = ib_problem([theirs, mine], "NCCL_IB_DISABLE" in plan.recipe.nccl)
    if ib:
        problems.append(
            Problem("NCCL_IB_DISABLE", ib, "set NCCL_IB_DISABLE=1 and NCCL_SOCKET_IFNAME on every node")
        )
    return theirs, problems
