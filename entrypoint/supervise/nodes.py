"""Multi-node start-up check: every node runs the same image, lock and recipe, and can reach node 0.

Before anything heavy, node 0 serves its identity over HTTP on MASTER_ADDR:MASTER_PORT+1 and waits for
every other node; each other node fetches it (retrying until NODE_CHECK_TIMEOUT), compares, and reports
its own. A node that cannot reach node 0 in time, or differs from it, stops with exit status 2 and says
what differs; node 0 records every node's identity in its manifest. torchrun's own rendezvous
(MASTER_PORT) starts only after this.

Compared: the lock's sha256, the image version and revision, and every recipe value except the keys
that may differ per node (node-local in entrypoint/recipe/keys.py). Each node also reports whether it has an
active InfiniBand/RoCE port: NCCL uses IB only when every node has it.
"""

from __future__ import annotations

import http.client
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
            f"lock sha256 {theirs['lock_sha256']} != node 0's {mine['lock_sha256']} (different image or "
            "checkout)"
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
        return (
            f"node(s) {without} have no active InfiniBand/RoCE port while others do; NCCL would try IB "
            "between them"
        )
    return None


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


ANSWER_LIMIT = 1024**2  # bytes: an identity is a few hundred


def _json_answer(request: urllib.request.Request | str, deadline: float) -> Any:
    """The JSON a node answers `request` with, read against `deadline`: the body chunk by chunk, so a peer
    that trickles bytes cannot stretch the wait past NODE_CHECK_TIMEOUT as a per-read timeout would let it.
    Raises OSError (TimeoutError at the deadline), ValueError (not JSON, too large), HTTPException."""
    with _opener().open(request, timeout=max(0.1, min(10.0, deadline - time.monotonic()))) as response:
        data = b""
        while chunk := response.read1(64 * 1024):
            data += chunk
            if time.monotonic() >= deadline:
                raise TimeoutError("the answer was still arriving at the deadline")
            if len(data) > ANSWER_LIMIT:
                raise ValueError(f"an answer over {ANSWER_LIMIT} bytes")
    return json.loads(data)


def _not_node_0(url: str, why: str, s) -> Problem:
    return Problem(
        f"MASTER_ADDR {s.MASTER_ADDR}",
        f"what answers at {url} is not grpo-rig's node check ({why})",
        f"check MASTER_ADDR and MASTER_PORT: node 0 answers on TCP MASTER_PORT+1 ({s.MASTER_PORT + 1}); "
        "another service there takes the port",
    )


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
            try:  # another program's request, or a truncated one: answered 400, never a traceback here
                length = min(int(self.headers.get("Content-Length", 0)), ANSWER_LIMIT)
                theirs = json.loads(self.rfile.read(length))
                rank = int(theirs["node_rank"])
                diff = differences(mine, theirs)
            except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
                self._send(400, {"error": f"not a node's report ({exc!r})"})
                return
            with lock:
                reports[rank] = {**theirs, "differences": diff}
            self._send(200, {"ok": not diff, "differences": diff})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((s.MASTER_ADDR, s.MASTER_PORT + 1), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    say(
        f"node 0: waiting for {s.NNODES - 1} node(s) on {s.MASTER_ADDR}:{s.MASTER_PORT + 1} "
        f"(NODE_CHECK_TIMEOUT {timeout:.0f} s)"
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
            theirs = _json_answer(url, min(deadline, time.monotonic() + 3))
            if not isinstance(theirs, dict) or "node_rank" not in theirs:
                return None, [_not_node_0(url, f"it answered {json.dumps(theirs)[:60]}", s)]
            break
        except (ValueError, http.client.HTTPException) as exc:  # an answer, but not node 0's identity
            return None, [_not_node_0(url, str(exc) or type(exc).__name__, s)]
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
                "check MASTER_ADDR (node 0's address on the network the nodes share), that node 0 is "
                f"started, and that TCP {s.MASTER_PORT}-{s.MASTER_PORT + 1} are open between the nodes",
            )
        ]
    request = urllib.request.Request(
        url, data=json.dumps(mine).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        answer = _json_answer(request, time.monotonic() + 10)
        found = [str(d) for d in answer["differences"]]
    except urllib.error.HTTPError as exc:
        return theirs, [_not_node_0(url, f"it answered our report {exc.code} {exc.reason}", s)]
    except (ValueError, KeyError, TypeError, http.client.HTTPException) as exc:
        return theirs, [_not_node_0(url, f"its answer to our report: {exc!r}", s)]
    except OSError as exc:
        return theirs, [
            Problem(
                f"MASTER_ADDR {s.MASTER_ADDR}",
                f"node 0 took our report but did not answer it within 10 s ({getattr(exc, 'reason', exc)})",
                "start the run again on every node",
            )
        ]
    problems = [
        Problem(f"node {s.NODE_RANK}", d, "run the same image and recipe on every node") for d in found
    ]
    ib = ib_problem([theirs, mine], "NCCL_IB_DISABLE" in plan.recipe.nccl)
    if ib:
        problems.append(
            Problem("NCCL_IB_DISABLE", ib, "set NCCL_IB_DISABLE=1 and NCCL_SOCKET_IFNAME on every node")
        )
    return theirs, problems
